"""The Hugging Face ``Trainer`` resumes a ``StreamingDataLoader`` from its own state.

On ``train(resume_from_checkpoint=...)`` the Trainer restores the model, the
optimizer and the RNG, and then fast-forwards the data by handing the train loader
and the number of batches already trained in the epoch to
``Trainer.get_resumed_dataloader``, whose default, accelerate's
``skip_first_batches``, builds a new plain ``DataLoader`` from the loader's dataset
and collate function. Nothing of ours runs in that loader, so it can neither skip
nor yield our batches. And the Trainer never saves a loader's state.

Two pieces fix both, with nothing to write but a base class:

- ``StreamingTrainerCallback`` writes the loader's ``state_dict()`` into every
  checkpoint (as a stateful callback, in its ``trainer_state.json``) and loads it
  into the loader when a resumed run begins.
- ``StreamingTrainerMixin`` adds that callback to the Trainer and overrides
  ``get_resumed_dataloader``: the loader, already at the checkpoint's position, is
  returned as it is, after checking that its position is the number of batches the
  Trainer counts.

``transformers`` is imported only here, and this module only when one of its names
is used: the package does not require it.
"""

from __future__ import annotations

import logging
from typing import Any

from ..dataset.dataset import StreamingDataset
from ..dataset.host import dataset_engine
from .loader import StreamingDataLoader

try:
    from transformers import TrainerCallback
    from transformers.trainer_callback import ExportableState
except ImportError as error:  # pragma: no cover - the test environment has transformers
    raise ImportError(
        "streaming.StreamingTrainerMixin and StreamingTrainerCallback need Hugging Face "
        "transformers; install it with `pip install transformers`"
    ) from error

__all__ = ["StreamingTrainerCallback", "StreamingTrainerMixin"]

_LOG = logging.getLogger("streaming")
_KEY = "data_state"
"""The attribute under which the loader's state sits in the callback's saved state."""

_GUIDE = "see 'Hugging Face Trainer' in docs/interop.md"


class StreamingTrainerCallback(TrainerCallback, ExportableState):  # type: ignore[misc]
    """Saves a ``StreamingDataLoader``'s state in every Trainer checkpoint and restores it.

    The Trainer writes a stateful callback's ``state()`` into each checkpoint's
    ``trainer_state.json``; this one's holds the train loader's ``state_dict()``
    after the last batch the Trainer took (exact for any ``num_workers`` and
    ``gradient_accumulation_steps``). When a resumed run begins, the state is
    loaded into the loader the Trainer's ``get_train_dataloader`` returned, so the
    loader continues where the checkpoint stands.

    ``StreamingTrainerMixin`` adds this callback by itself. Alone, it suits
    ``TrainingArguments(ignore_data_skip=True)``, under which the Trainer skips no
    batches and the loader's own position decides what comes next.

    In a job of several processes the main process writes the checkpoint, so it
    holds that rank's state, which resumes a job of the same number of processes
    (every rank's splits advance in lockstep); to change the number of processes,
    resume the data with a merged state (docs/resuming.md).

    Raises:
        ValueError: at the start of a resumed run whose checkpoint holds no loader
            state (it was saved without this callback), unless
            ``ignore_data_skip=True`` asks to start the epoch over.
        RuntimeError: at the start of a run resumed in the middle of an epoch by a
            ``transformers`` older than 5.25 (no ``get_resumed_dataloader``) without
            ``ignore_data_skip=True``: the Trainer would rebuild the loader to skip.
    """

    def __init__(self) -> None:
        self.loader: StreamingDataLoader | None = None
        self.restored = False

    def state(self) -> dict[str, Any]:
        """What the Trainer writes into a checkpoint: the loader's exact state."""
        saved = None if self.loader is None else self.loader.state_dict()
        return {"args": {}, "attributes": {_KEY: saved}}

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Find the train loader; when the run resumes a checkpoint, load its state."""
        loader = kwargs.get("train_dataloader")
        self.loader = loader if isinstance(loader, StreamingDataLoader) else None
        self.restored = False
        if self.loader is None or state.global_step == 0:
            return
        saved = _saved_state(state.stateful_callbacks.get(type(self).__name__))
        if saved is None:
            if args.ignore_data_skip:
                _LOG.warning(
                    "the checkpoint at step %d holds no StreamingDataLoader state; with "
                    "ignore_data_skip=True the loader starts its epoch over",
                    state.global_step,
                )
                return
            raise ValueError(
                f"the checkpoint at global step {state.global_step} holds no StreamingDataLoader "
                "state (it was saved without StreamingTrainerMixin or StreamingTrainerCallback), "
                "so where the data stood is unknown; resume from a checkpoint saved with it, or pass "
                f"TrainingArguments(ignore_data_skip=True) to start the epoch over ({_GUIDE})"
            )
        self.loader.load_state_dict(saved)
        self.restored = True
        if not args.ignore_data_skip and not _has_resume_hook() and _delivered_batches(self.loader):
            raise RuntimeError(
                f"transformers {_version()} has no Trainer.get_resumed_dataloader (5.25 and later "
                "have it), so the Trainer would rebuild the loader to skip the batches it already "
                "trained; pass TrainingArguments(ignore_data_skip=True): the loader resumes from its "
                f"own state ({_GUIDE})"
            )

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Forget the loader: a later ``train()`` finds its own."""
        self.loader = None


def _has_resume_hook() -> bool:
    """Whether the Trainer asks ``get_resumed_dataloader`` for the resumed loader."""
    from transformers import Trainer

    return hasattr(Trainer, "get_resumed_dataloader")


def _version() -> str:
    import transformers

    return str(transformers.__version__)


def _saved_state(entry: Any) -> dict[str, Any] | None:
    """The loader state in the callback's entry of ``trainer_state.json`` (the newest
    one when the Trainer kept a list)."""
    if isinstance(entry, list):
        entry = entry[-1] if entry else None
    if not isinstance(entry, dict):
        return None
    saved = entry.get("attributes", {}).get(_KEY)
    return saved if isinstance(saved, dict) else None


class StreamingTrainerMixin:
    """Mix into a ``transformers.Trainer`` subclass whose ``get_train_dataloader``
    returns a ``StreamingDataLoader``: ``resume_from_checkpoint`` then resumes the
    data exactly.

    ``class MyTrainer(StreamingTrainerMixin, Trainer)``. The mixin adds a
    ``StreamingTrainerCallback`` (every checkpoint holds the loader's state, and a
    resumed run loads it) and returns the loader from ``get_resumed_dataloader``
    as it is, instead of rebuilding it to skip batches. Every row of an epoch is
    trained once across the run that saved the checkpoint (up to it) and the
    resumed run, with any ``num_workers`` of the loader and any
    ``gradient_accumulation_steps``. Other loaders are left to the Trainer.
    Needs ``transformers`` 5.25 or later (``get_resumed_dataloader``); with an older
    one, pass ``TrainingArguments(ignore_data_skip=True)`` and the loader resumes
    from its own state all the same.

    Raises:
        ValueError: on resume, when the loader's position in its epoch is not the
            number of batches the Trainer counts as trained (the batch size,
            ``gradient_accumulation_steps`` or the number of processes changed since
            the checkpoint).
        RuntimeError: on resume, when the loader's state was not restored.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        callbacks = self.callback_handler.callbacks  # type: ignore[attr-defined]
        if not any(isinstance(callback, StreamingTrainerCallback) for callback in callbacks):
            self.add_callback(StreamingTrainerCallback())  # type: ignore[attr-defined]

    def get_resumed_dataloader(self, dataloader: Any, num_batches: int) -> Any:
        """A ``StreamingDataLoader`` as it is: its state, restored from the checkpoint,
        already stands ``num_batches`` batches into the epoch (checked)."""
        if not isinstance(dataloader, StreamingDataLoader):
            return super().get_resumed_dataloader(dataloader, num_batches)  # type: ignore[misc]
        callbacks = self.callback_handler.callbacks  # type: ignore[attr-defined]
        if not any(getattr(callback, "restored", False) for callback in callbacks):
            raise RuntimeError(
                f"the Trainer resumes {num_batches} batches into the epoch but the "
                "StreamingDataLoader's state was not restored from the checkpoint; keep the "
                f"StreamingTrainerCallback in the Trainer's callbacks ({_GUIDE})"
            )
        delivered = _delivered_batches(dataloader)
        if delivered is not None and delivered != num_batches:
            raise ValueError(
                f"the Trainer resumes {num_batches} batches into the epoch but the "
                f"StreamingDataLoader's state stands {delivered} batches of {dataloader.batch_size} "
                "into it: the loader's batch_size, gradient_accumulation_steps or the number of "
                "processes changed since the checkpoint; resume with the settings that saved it"
            )
        return dataloader


def _delivered_batches(loader: StreamingDataLoader) -> int | None:
    """Batches of the current epoch the loader has delivered (``None`` if unknown)."""
    host = loader.dataset
    if isinstance(host, StreamingDataset):
        engine = dataset_engine(host)
        owned = engine.owned_splits()
        whole, left = engine.remaining(whole=True), engine.remaining()
        done = sum(whole[split] - left[split] for split in owned)
        return -(-done // (loader.batch_size or 1))
    step = getattr(host, "step", None)  # a mixture counts whole global batches
    return step if isinstance(step, int) else None
