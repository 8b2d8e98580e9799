"""``StreamingDataLoader``: the DataLoader subclass, its iterators, the frameworks.

``loader`` is the DataLoader subclass, ``settings`` checks its arguments,
``registry`` holds the loaders of other iterables (``serves``),
``iterators`` commit each batch as it is returned, ``launch`` starts the worker
processes and gathers the batches (through ``streaming.workers``), ``plain`` is the
path without workers, ``frameworks`` what Lightning and Accelerate expect, ``hf`` how
the Hugging Face ``Trainer`` resumes the loader (the only module that imports
``transformers``). Imports ``core``, ``samples``, ``workers`` and ``dataset``; never
``mixture`` (a mixture's loader registers itself with ``registry.serves``).
"""

__all__: list[str] = []
