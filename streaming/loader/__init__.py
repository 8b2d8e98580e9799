"""``StreamingDataLoader``: worker processes, batch transfer, supervision, frameworks.

``loader`` is the DataLoader subclass, ``settings`` checks its arguments,
``iterators`` commit each batch as it is returned, ``shares`` and ``assembly`` gather
the workers' shares into batches, ``worker`` is what runs in each worker,
``transfer``/``byvalue`` how batches travel, ``supervisor`` watches the workers,
``outputs`` explains batches that cannot be collated, ``seeding`` notices a seeding
``worker_init_fn``, ``frameworks`` what Lightning and Accelerate expect, ``hf`` how
the Hugging Face ``Trainer`` resumes the loader (the only module that imports
``transformers``). Imports ``core``, ``read`` and ``dataset``; never ``mixture`` (a
mixture's loader registers itself with ``loader.serves``).
"""

__all__: list[str] = []
