"""The ``StreamingDataLoader`` of a ``StreamingMixture``: one loader batch is one global step's share.

``StreamingDataLoader(mixture, ...)`` builds this class. Worker w of k yields the
rank's batches w, w + k, ... counted from the committed position; the DataLoader
hands them out in order, so the trainer's n-th batch is global step n, and the
state after it is exact (no replay) on any topology.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from typing import Any

from torch.utils.data import DataLoader, default_collate

from .. import _compat
from ..core.lifecycle import Guarded
from ..loader import outputs
from ..loader.loader import (
    _PRELOAD,
    _PRELOAD_HERE,
    StreamingDataLoader,
    _check_len_counts,
    _check_options,
    _check_picklable,
    _EpochSampler,
    _numbers,
    _start_method,
)
from ..loader.supervisor import supervise
from ..loader.worker import WorkerInit
from ..read.assemble import finish
from .mixture import StreamingMixture

__all__ = ["MixtureLoader"]


@StreamingDataLoader.serves(StreamingMixture)
class MixtureLoader(StreamingDataLoader):
    """``StreamingDataLoader`` over a ``StreamingMixture`` (built by ``StreamingDataLoader``)."""

    def __init__(
        self,
        dataset: StreamingMixture,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Any = None,
        batch_sampler: Any = None,
        num_workers: int = 0,
        collate_fn: Callable[[Any], Any] | None = None,
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
        len_counts: str = "auto",
    ) -> None:
        given = {"batch_size": batch_size, "num_workers": num_workers, "prefetch_factor": prefetch_factor}
        checked = _numbers({**given, "timeout": timeout})
        batch_size, num_workers = checked["batch_size"], checked["num_workers"]
        _check_options(in_order=in_order, persistent_workers=persistent_workers, drop_last=drop_last)
        _check_len_counts(len_counts)
        if batch_size != dataset.batch_size:
            raise ValueError(
                f"batch_size={batch_size!r} but one global batch of this mixture on this rank is "
                f"{dataset.batch_size} samples (global_batch_size={dataset.global_batch_size} over "
                f"world_size={dataset.world_size}); pass batch_size={dataset.batch_size}"
            )
        columnar = (
            collate_fn in (None, default_collate)
            and batch_sampler is None
            and all(data._options.transform is None for data in dataset.sources.values())
        )
        chosen_here = num_workers > 0 and multiprocessing_context is None
        if num_workers > 0:
            multiprocessing_context = _start_method(multiprocessing_context)
        DataLoader.__init__(
            self,
            dataset,
            batch_size=None if columnar else batch_size,
            shuffle=shuffle,
            sampler=sampler,
            batch_sampler=batch_sampler,
            num_workers=num_workers,
            collate_fn=_finish if columnar else collate_fn or outputs.collate_default,
            pin_memory=pin_memory,
            drop_last=drop_last,
            timeout=checked["timeout"],
            worker_init_fn=WorkerInit(worker_init_fn) if num_workers > 0 else worker_init_fn,
            multiprocessing_context=multiprocessing_context,
            generator=generator,
            prefetch_factor=checked["prefetch_factor"],
            persistent_workers=persistent_workers,
            pin_memory_device=pin_memory_device,
            in_order=in_order,
        )
        object.__setattr__(self, "sampler", _EpochSampler(dataset))  # type: ignore[arg-type]
        object.__setattr__(self, "batch_size", batch_size)  # what the user asked for
        self._columnar = columnar
        self._streaming = dataset  # type: ignore[assignment]
        self._mixture = dataset
        self._preload = (
            chosen_here and _PRELOAD_HERE and self.multiprocessing_context.get_start_method() == "forkserver"
        )
        self._len_counts = len_counts
        self._framework_counts = False  # len() was read as the whole epoch

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        """Yield this rank's share of every global batch; each is counted as it is returned."""
        mixture = self._mixture
        if self.num_workers > 0:
            for data in mixture.sources.values():
                _check_picklable("transform", data._options.transform)
        mixture._supersede("iter(loader)")
        iterator = _MixtureBatches(self)
        mixture._live.hold(iterator)
        return iterator

    def __len__(self) -> int:
        """Batches the next iteration yields; with ``len_counts="epoch"`` (or ``"auto"``
        when an epoch-counting framework asks), the batches of the whole epoch (for
        ``stop="never"``: the batches until its first source would run out, a fixed
        length frameworks can count epochs by; the stream itself goes on).

        Raises:
            TypeError: ``stop="never"`` when ``len()`` counts what remains.
        """
        mixture = self._mixture
        if self._counts_epoch():
            return mixture._epoch_steps()
        if mixture.endless:
            raise TypeError(
                "the loader of a StreamingMixture with stop='never' has no len(); count steps, or "
                "pass len_counts='epoch' for a fixed epoch length (what Lightning needs to fetch "
                "no batch ahead)"
            )
        return mixture._schedule.remaining_steps(mixture._position) or 0

    def replay_allowance(self) -> int:
        """0: a mixture's state is exact after every batch the loader returns."""
        return 0

    def state_dict(self, *, strict: bool = False) -> dict[str, Any]:
        """The mixture's state after the last batch returned (exact; ``strict`` changes nothing)."""
        del strict
        return self._mixture.state_dict()

    def load_state_dict(self, state: dict[str, Any], *, reweight: bool = False) -> None:
        """Forward to ``StreamingMixture.load_state_dict``."""
        self._mixture.load_state_dict(state, reweight=reweight)

    def set_epoch(self, epoch: int) -> None:
        """Forward to ``StreamingMixture.set_epoch``."""
        self._mixture.set_epoch(epoch)


class _MixtureBatches(Guarded):
    """The DataLoader's batches; each one moves the mixture's position as it is returned."""

    def __init__(self, loader: MixtureLoader) -> None:
        super().__init__("iter(loader)")
        self._loader = loader
        self._mixture = loader._mixture
        self._workers = loader.num_workers
        self._busy = False
        self._batches: Iterator[Any] | None = None  # begun at the first next()
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self.inner: Guarded | None = None  # num_workers=0: the mixture's own iterator

    def _begin(self) -> None:
        """Start the DataLoader's batches (its workers) at the committed position."""
        loader, mixture = self._loader, self._mixture
        mixture._begin_iteration(stacklevel=6, warn=not loader._framework_counts)
        if loader._preload:
            _compat.forkserver_preload(loader.multiprocessing_context, _PRELOAD)
        with mixture._shipping(columnar=loader._columnar):
            batches = DataLoader.__iter__(loader)
        supervise(batches, description="iter(loader)")
        self._batches = batches
        self._finalizer = weakref.finalize(self, _compat.shutdown_workers, batches)
        inner = mixture._live.current()
        mixture._live.hold(self)
        self.inner = None if inner is self else inner

    @property
    def busy(self) -> bool:
        """True while a ``next()`` of this iterator is running."""
        return self._busy

    def _advance(self) -> Any:
        self._busy = True
        try:
            if self._batches is None:  # the first next(): take the committed position now
                self._begin()
            assert self._batches is not None
            batch = next(self._batches)
        finally:
            self._busy = False
        if self._workers > 0:  # with none, the mixture's own iterator moved it
            self._mixture._commit_step()
        return batch

    def _release(self) -> None:
        if self.inner is not None:
            self.inner.close()
        if self._finalizer is not None:
            self._finalizer()


def _finish(columns: Any) -> dict[str, Any]:
    """The batch ``default_collate`` would make of a columnar batch's rows."""
    return finish({name: [column] for name, column in columns.items()})
