"""``StreamingDataLoader``: a DataLoader whose checkpoints count what the trainer received."""

from __future__ import annotations

import multiprocessing
import pickle
import sys
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from torch.utils.data import DataLoader, default_collate
from torch.utils.data.dataloader import _InfiniteConstantSampler

from . import commit, transfer
from .checkpoint import Counts
from .dataset import StreamingDataset
from .plan import worker_splits

_SAFE_METHODS = ("forkserver", "spawn")
_LEN_COUNTS = ("remaining", "epoch")


_PRELOAD = ("torch", "numpy", "pyarrow", "streaming.loader")
"""What the fork server imports once for every worker; never Lance (not fork-safe once
loaded), which ``streaming.loader`` does not import."""

_PRELOAD_HERE = sys.platform.startswith("linux")
"""Only on Linux: on macOS, forking after torch/numpy loaded Apple's frameworks is unsafe."""


def _start_method(context: Any) -> Any:
    """The multiprocessing context to use: never fork (Lance is not fork-safe)."""
    if context is None:
        available = multiprocessing.get_all_start_methods()
        return multiprocessing.get_context("forkserver" if "forkserver" in available else "spawn")
    name = context if isinstance(context, str) else context.get_start_method()
    if name == "fork":
        raise ValueError(
            "multiprocessing_context='fork' is refused: a worker forked from a process that "
            "has used Lance can hang or crash; use one of "
            f"{', '.join(repr(m) for m in _SAFE_METHODS)} (or leave it unset for the default)"
        )
    return context


def _preload_fork_server(context: Any) -> None:
    """Have a fork server not started yet import ``_PRELOAD`` once for all its workers.

    A worker forked from a server that imported torch starts in about 0.2 s instead
    of 1 s, at every epoch. Modules the program asked the server to preload are kept.
    """
    import multiprocessing.forkserver as forkserver

    server = getattr(forkserver, "_forkserver", None)
    current = list(getattr(server, "_preload_modules", ["__main__"]))
    context.set_forkserver_preload(list(dict.fromkeys([*current, *_PRELOAD])))


class _EpochSampler(_InfiniteConstantSampler):
    """The sampler of an IterableDataset loader, with ``set_epoch`` (for Lightning)."""

    def __init__(self, dataset: StreamingDataset) -> None:
        super().__init__()
        self._dataset = dataset

    def set_epoch(self, epoch: int) -> None:
        """Forward to ``StreamingDataset.set_epoch``."""
        self._dataset.set_epoch(epoch)


def _check_dataset(dataset: object) -> StreamingDataset:
    if not isinstance(dataset, StreamingDataset):
        raise TypeError(
            f"StreamingDataLoader needs a streaming.StreamingDataset, got {type(dataset).__name__}; "
            "use torch.utils.data.DataLoader for other datasets"
        )
    if type(dataset).__iter__ is not StreamingDataset.__iter__:
        raise TypeError(
            f"{type(dataset).__name__} overrides __iter__, so StreamingDataLoader cannot know "
            "which samples reached the trainer; transform samples with transform= or "
            "collate_fn= instead of overriding __iter__"
        )
    return dataset


def _check_options(*, in_order: bool, persistent_workers: bool, drop_last: bool) -> None:
    refusals = (
        (not in_order, "in_order=False", "batches must reach the trainer in the order they were planned"),
        (persistent_workers, "persistent_workers=True", "workers must restart from the committed position"),
        (drop_last, "drop_last=True", "a dropped batch would count as delivered"),
    )
    for refused, setting, reason in refusals:
        if refused:
            raise ValueError(f"StreamingDataLoader refuses {setting}: {reason}; leave it at its default")


def _check_picklable(keyword: str, function: object) -> None:
    if not callable(function):
        return
    try:
        pickle.dumps(function)
    except Exception as error:
        name = getattr(function, "__qualname__", type(function).__qualname__)
        module = getattr(function, "__module__", "?")
        raise TypeError(
            f"{keyword} {module}.{name} cannot be pickled for worker processes ({error}); "
            "define it at module level (not a lambda or a nested function) or use num_workers=0"
        ) from None


class StreamingDataLoader(DataLoader[Any]):
    """A ``DataLoader`` for ``StreamingDataset`` whose state is consumer-committed.

    Every worker batch travels with a snapshot of its worker's progress, committed
    to the dataset only when ``next()`` returns the batch to the trainer, so
    prefetched batches never move the saved position. Takes the arguments of
    ``torch.utils.data.DataLoader`` and yields the same collated batches.

    Worker w of k owns the rank's splits at positions w, w + k, ...; the rank's
    split count must be a multiple of ``num_workers``. Without a
    ``multiprocessing_context`` workers start with forkserver (else spawn); fork is
    refused because Lance is not fork-safe.

    ``len_counts`` chooses what ``len(loader)`` counts: ``"remaining"`` (the
    default) is the batches the next iteration really yields; ``"epoch"`` is the
    batches of this rank's whole epoch, what Lightning expects after a restore (it
    subtracts the batches it already ran). Neither changes what is yielded.

    Raises:
        TypeError: ``dataset`` is not a ``StreamingDataset`` or overrides
            ``__iter__``.
        ValueError: an unknown ``len_counts``, ``in_order=False``, ``persistent_workers=True``,
            ``drop_last=True``, a fork context, or a worker count that does not
            divide the rank's splits.
    """

    def __init__(
        self,
        dataset: StreamingDataset,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Any = None,
        batch_sampler: Any = None,
        num_workers: int = 0,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = None,
        multiprocessing_context: Any = None,
        generator: Any = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
        len_counts: str = "remaining",
    ) -> None:
        dataset = _check_dataset(dataset)
        if len_counts not in _LEN_COUNTS:
            raise ValueError(
                f"len_counts must be one of {', '.join(map(repr, _LEN_COUNTS))}, got {len_counts!r}; "
                "use 'epoch' with frameworks that count len() as the whole epoch (Lightning)"
            )
        # Columnar batches equal default_collate's; they need no transform. The dataset
        # then yields whole batches (no per-row fetching by the DataLoader).
        columnar = collate_fn in (None, default_collate) and dataset._options.transform is None
        columnar = columnar and dataset._options.pack_sequences is None
        columnar = columnar and batch_size is not None and batch_sampler is None
        _check_options(in_order=in_order, persistent_workers=persistent_workers, drop_last=drop_last)
        chosen_here = num_workers > 0 and multiprocessing_context is None
        if num_workers > 0:
            multiprocessing_context = _start_method(multiprocessing_context)
            worker_splits(
                dataset.owned_splits(), worker=0, num_workers=num_workers, world_size=dataset.world_size
            )
        collate = commit.CommittingCollate(collate_fn or default_collate, dataset._token, columnar=columnar)
        super().__init__(
            dataset,
            batch_size=None if columnar else batch_size,
            shuffle=shuffle,
            sampler=sampler,
            batch_sampler=batch_sampler,
            num_workers=num_workers,
            collate_fn=collate,
            pin_memory=pin_memory,
            drop_last=drop_last,
            timeout=timeout,
            worker_init_fn=worker_init_fn,
            multiprocessing_context=multiprocessing_context,
            generator=generator,
            prefetch_factor=prefetch_factor,
            persistent_workers=persistent_workers,
            pin_memory_device=pin_memory_device,
            in_order=in_order,
        )
        object.__setattr__(self, "sampler", _EpochSampler(dataset))
        object.__setattr__(self, "batch_size", batch_size)  # what the user asked for
        self._streaming = dataset
        self._columnar = columnar
        self._collate = collate
        # a fork server the loader chose is preloaded; a context the user passed is left alone
        self._preload = (
            chosen_here and _PRELOAD_HERE and self.multiprocessing_context.get_start_method() == "forkserver"
        )
        self._boundary: Counts | None = None
        self._len_counts = len_counts

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        """Yield batches; each one's progress is committed as it is returned."""
        dataset = self._streaming
        if self.num_workers > 0:
            _check_picklable("transform", dataset._options.transform)
            _check_picklable("on_transform_error", dataset._options.on_transform_error)
        if self._preload:
            _preload_fork_server(self.multiprocessing_context)
        channel = None
        if self.num_workers > 0 and self._columnar and transfer.available():
            channel = transfer.Channel.new(slots=(self.prefetch_factor or 2) + 2)
        self._collate.channel = channel
        with commit.shipping(
            dataset._token, batch=self.batch_size if self._columnar and self.batch_size else 0
        ):
            batches = super().__iter__()
        self._boundary = self._streaming._boundary_counts()
        return _Committing(batches, self, channel)

    def _after_commit(self) -> None:
        """Remember the counts if this batch completed a logical step of all workers."""
        counts = self._streaming._boundary_counts()
        if counts is not None:
            self._boundary = counts

    def __len__(self) -> int:
        """Batches the next iteration yields, counting every worker's short last batch.

        With ``len_counts="epoch"``: the batches of this rank's whole epoch instead,
        however much of it was delivered (as torchdata and Lightning count).
        """
        dataset, batch_size = self._streaming, self.batch_size or 1
        workers = max(1, self.num_workers)
        remaining = dataset._remaining(whole=self._len_counts == "epoch")
        total = 0
        for worker in range(workers):
            splits = worker_splits(
                dataset.owned_splits(), worker=worker, num_workers=workers, world_size=dataset.world_size
            )
            total += -(-sum(remaining[split] for split in splits) // batch_size)
        return total

    def state_dict(self, *, strict: bool = False) -> dict[str, Any]:
        """The dataset state at the last logical step boundary (or now, with ``strict``).

        With k > 1 workers, the state between boundaries is not a consistent cut;
        the last boundary's state replays at most k - 1 batches after a resume.

        Raises:
            RuntimeError: ``strict=True`` between logical step boundaries.
        """
        if strict or self.num_workers == 0 or self._boundary is None:
            return self._streaming.state_dict()
        return self._streaming._state_from(*self._boundary)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Forward to ``StreamingDataset.load_state_dict``."""
        self._streaming.load_state_dict(state)
        self._boundary = None

    def set_epoch(self, epoch: int) -> None:
        """Forward to ``StreamingDataset.set_epoch``."""
        self._streaming.set_epoch(epoch)
        self._boundary = None


def _release(batches: Iterator[Any], channel: transfer.Channel | None, *, num_workers: int) -> None:
    """Shut down the workers of ``batches``, then free their shared memory."""
    shutdown = getattr(batches, "_shutdown_workers", None)
    try:
        if shutdown is not None:
            shutdown()
    finally:
        if channel is not None:
            transfer.release(channel, num_workers=num_workers)


class _Committing(Iterator[Any]):
    """Unwraps each batch and commits its worker's snapshot on the way out."""

    def __init__(
        self, batches: Iterator[Any], loader: StreamingDataLoader, channel: transfer.Channel | None
    ) -> None:
        self._batches: Iterator[Any] | None = batches
        self._loader = loader
        self._channel = channel
        loader._streaming._attach(self)
        # unmaps the workers' shared memory however this iterator ends, even unclosed
        self._release = weakref.finalize(self, _release, batches, channel, num_workers=loader.num_workers)

    def close(self) -> None:
        """Stop the base iterator (its workers shut down); later ``next()`` stops."""
        self._batches = None
        self._release()

    @property
    def active(self) -> bool:
        """True until the batches are exhausted or failed."""
        return self._batches is not None

    def __next__(self) -> Any:
        if self._batches is None:
            raise StopIteration
        try:
            item = next(self._batches)
            batch = item.unwrap()  # before the commit: a batch that failed here was not delivered
        except BaseException:
            self.close()
            raise
        if item.snapshot is not None:
            self._loader._streaming._commit(item.snapshot)
            self._loader._after_commit()
        return batch

    def __len__(self) -> int:
        return len(self._loader)
