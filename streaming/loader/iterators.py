"""A loader's iterators: take the position at the first ``next()``, commit what is handed over.

``BatchIterator`` is the part every loader's iterator shares (the mixture's too);
``Committing`` is the single-table loader's: it commits each worker's report of a
batch as the batch is returned, and moves an endless dataset into its next epoch.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterator
from typing import Any, Protocol

from ..core.lifecycle import Guarded
from ..core.stats import Waits
from ..dataset.host import DatasetHost
from ..workers import transfer
from ..workers.shares import Shares, release
from ..workers.worker import SentShare
from .headstart import HeadStart
from .launch import Launch
from .plain import PlainBatches

__all__ = ["BatchIterator", "Committing", "IteratingLoader"]

_clock = time.perf_counter


class IteratingLoader(Protocol):
    """What a loader's iterators read of their loader (``StreamingDataLoader``); its
    settings come down through ``Launch``."""

    def __len__(self) -> int: ...


class BatchIterator(Guarded):
    """A loader's iterator (public to the package: the mixture's loader has one too).

    It takes its position and starts its workers at its first ``next()`` (``_first``),
    is busy while a ``next()`` runs, hands each drawn batch over through
    ``_delivered`` (where the position moves), and on its end closes the dataset's
    own iterator it wraps (``num_workers=0``) and stops its workers. A subclass
    says what its batches are gathered from (``_shares_of``) and which worker
    gauges go idle with the workers (``_reports``).
    """

    def __init__(self, loader: IteratingLoader, launch: Launch) -> None:
        super().__init__("iter(loader)")
        self._loader, self._launch = loader, launch
        self._busy = False
        self._batches: Iterator[Any] | HeadStart | None = None  # begun at the first next()
        self._channel: transfer.Channel | None = None
        self._shares: Shares | PlainBatches | HeadStart | None = None
        self.inner: Guarded | None = None  # num_workers=0: the host's own iterator
        self._finalizer: weakref.finalize[Any, Any] | None = None
        self._record: Waits | None = None  # the loop's waits, once begun

    @property
    def busy(self) -> bool:
        """True while a ``next()`` of this iterator is running."""
        return self._busy

    def _advance(self) -> Any:
        asked = _clock()
        first = self._batches is None
        self._busy = True
        try:
            if first:  # the first next(): take the committed position now
                self._first()
            drawn = self._draw()
        finally:
            self._busy = False
        batch = self._delivered(drawn)
        if first:
            self._record = self._waits()
            if self._record is not None:
                self._record.add_first(_clock() - asked)
        elif self._record is not None:
            self._record.add(_clock() - asked)
        return batch

    def _first(self) -> None:
        """Begin at the first ``next()``: take the committed position, start the batches."""
        self._launch.begin(stacklevel=6)
        self._begin()

    def _begin(self) -> None:
        """Start the current epoch's batches (its worker processes, with workers)."""
        self._batches, self._channel, self.inner = self._launch.start(self)
        self._shares = self._shares_of(self._batches)
        # unmaps the workers' shared memory however this iterator ends, even unclosed
        self._finalizer = weakref.finalize(
            self,
            release,
            self._batches,
            self._channel,
            num_workers=self._launch.num_workers,
            reports=self._reports(),
            keep=self._launch.persistent,
        )

    def _shares_of(self, batches: Iterator[Any] | HeadStart) -> Shares | PlainBatches | HeadStart:
        """What ``_draw`` gathers the batches of ``batches`` from (``Launch.shares``)."""
        return self._launch.shares(batches, waits=self._waits())

    def _waits(self) -> Waits | None:
        """Where the loop's waits for batches are kept (``None``: not kept)."""
        return None

    def _reports(self) -> dict[tuple[int, int], dict[str, float]]:
        """The workers' last reports, whose gauges are zeroed when they stop (none here)."""
        return {}

    def _draw(self) -> Any:
        """The next item of the DataLoader's batches."""
        raise NotImplementedError

    def _delivered(self, drawn: Any) -> Any:
        """Move the position for ``drawn``; return the batch the trainer gets."""
        return drawn

    def _release(self) -> None:
        if self.inner is not None:
            self.inner.close()
        if self._finalizer is not None:
            self._finalizer()


class Committing(BatchIterator):
    """Unwraps each batch and commits its worker's report on the way out."""

    def __init__(self, loader: IteratingLoader, launch: Launch, dataset: DatasetHost) -> None:
        super().__init__(loader, launch)
        self._dataset = dataset

    def _reports(self) -> dict[tuple[int, int], dict[str, float]]:
        return self._dataset.worker_counters

    def _waits(self) -> Waits:
        return self._dataset.waits

    def _delivered(self, drawn: tuple[list[SentShare], Any]) -> Any:
        items, batch = drawn
        for item in items:
            if item.report is not None:
                self._dataset.commit(item.report)
        return batch

    def _draw(self) -> tuple[list[SentShare], Any]:
        """The next batch, moving an endless dataset into its next epoch when one ends."""
        while True:
            # num_workers=0: the dataset's own iterator moves the cursor as the batch is
            # drawn, so a batch that fails part way (or that drop_last drops) must put it back
            before = self._dataset.mark() if self.inner is not None else None
            try:
                drawn = self._launch.gather(self._shares)
            except StopIteration:
                if not self._dataset.endless:
                    raise
            except BaseException:
                if before is not None and self.inner is not None:
                    self.inner.close()  # folds the stride it was in
                    self._dataset.rewind(before)
                raise
            else:
                if drawn is not None:
                    return drawn
                if before is not None:  # dropped (drop_last) or empty: never delivered
                    self._dataset.rewind(before)
                continue
            self._release()
            self._dataset.next_epoch()
            self._begin()

    def __len__(self) -> int:
        return len(self._loader)
