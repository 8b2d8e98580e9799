"""``DatasetEngine``: the machinery behind ``StreamingDataset``, and the loaders' side of it.

The facade (``dataset.py``) holds one engine and forwards its public members to
it. The loaders and the mixture reach the engine through
``host.dataset_engine(dataset)`` and call it through the protocols of ``host.py``:
iterating (``iterate``), taking the position at an iterator's first ``next()``,
committing the workers' reports, and, in a persistent worker, loading the
position the trainer posted (``reset``).
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from collections.abc import Generator, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from .. import _compat
from ..core import stats
from ..core.lifecycle import Guarded, Samples
from ..core.optionchecks import as_epoch
from ..core.options import Options
from ..core.progress import WorkerReport
from ..core.stats import Counters, Waits
from ..core.world import World
from ..errors import EpochCompleteWarning
from ..samples.view import TableView
from ..state.format import StreamState
from ..workers import cut
from ..workers.board import Board
from ..workers.side import Shipped, WorkerSide
from .positioned import Positioned

__all__ = ["DatasetEngine"]


_LOG = logging.getLogger("streaming")


class DatasetEngine(Positioned):
    """One rank's view, position, iterators and counters (package-internal).

    Pickled into a loader's worker processes with its settings, snapshot and
    position (never a Lance handle); a persistent worker keeps its engine and
    loads, at every later ``iter()``, the position the trainer posts (``reset``).
    """

    def __init__(
        self,
        options: Options,
        view: TableView,
        rank_splits: Sequence[int],
        *,
        tag_snapshot: bool,
        worker_info_override: Any,
    ) -> None:
        super().__init__(
            options, view, rank_splits, tag_snapshot=tag_snapshot, worker_info_override=worker_info_override
        )
        self._counters = Counters()  # reads of this process's iterators
        self._side = WorkerSide()  # what a loader hands down; this process's place and shares
        self._iterating: tuple[World, tuple[int, ...]] = (World(), ())
        """(place, splits) of this process's iterator."""

    def describe_self(self) -> str:
        """The facade's ``repr``."""
        snapshot = self._view.snapshot
        length = self.split_length if self._view.planned else "unplanned"
        return (
            f"StreamingDataset(uri={snapshot.uri!r}, version={snapshot.version}, "
            f"num_splits={self.num_splits}, rank={self.rank}, world_size={self.world_size}, "
            f"epoch={self.epoch}, split_length={length})"
        )

    # -- iteration ------------------------------------------------------------

    def iterate(self) -> Iterator[Any]:
        """The facade's ``iter()``: this rank's (or worker's) remaining samples."""
        world = self._side.place(
            self.rank,
            self.world_size,
            trainer_pid=self._lifecycle.trainer_pid,
            override=self._worker_info_override,
        )
        for_loader = self._lifecycle.for_loader  # else the loader has superseded the live iterator already
        if not for_loader and not world.in_worker:  # a plain DataLoader's worker has none
            self.supersede("iter(dataset)")
        if self._shares_windows(world):
            world = dataclasses.replace(world, parted=True)
        self._iterating = (world, tuple(world.splits(self._rank_splits)))
        stream = self._run(world, for_loader=for_loader, shipped=self._side.shipped)
        iterator = Samples(stream, "iter(dataset)")
        self._lifecycle.live.hold(iterator)
        return iterator

    def _shares_windows(self, world: World) -> bool:
        """Whether this worker reads its block slots of every split (``World.parted``):
        in a ``StreamingDataLoader``'s worker, when every row read is a sample (no
        ``transform``, which may drop rows, and no packing, which reads documents in
        sequence)."""
        return (
            world.in_worker
            and world.workers > 1
            and self._side.shipped is not None
            and self._options.transform is None
            and self._view.packing is None
        )

    def _run(self, world: World, *, for_loader: bool, shipped: Shipped | None) -> Generator[Any, None, None]:
        """The samples of ``world``'s splits from where the dataset stands at the first
        ``next()`` (for a loader: this process's share of every batch)."""
        if not for_loader:  # a loader begins the iteration itself
            self.begin_iteration(stacklevel=5)
        if not self._side.resume(world, self.reset):  # the trainer's position now, if it posts one
            return
        splits = world.splits(self._rank_splits)  # after a reset, which may have adopted another S
        self._iterating = (world, tuple(splits))
        if self._options.endless and not for_loader:
            yield from self._endless(splits)
        elif shipped is not None:  # a StreamingDataLoader moves an endless dataset on
            pieces = self.shares(world, splits, batch_size=shipped.batch_size, columnar=shipped.columnar)
            yield from self._side.send(
                pieces,
                world,
                report=self.worker_report,
                row_bytes=lambda: stats.row_bytes([self._counters]),
            )
        else:
            yield from self._stream(splits)

    def shares(
        self, world: World, splits: list[int], *, batch_size: int, columnar: bool
    ) -> Iterator[cut.Share]:
        """The share of ``world``'s process in each batch of ``batch_size`` from the committed
        position, reading ``splits`` (``world.splits`` of the rank's): what a loader's worker
        sends (package-internal)."""
        return cut.cut_shares(
            self.share_slots(world, batch_size=batch_size),
            lambda sizes: self._stream(splits, sizes=sizes, world=world),
            columnar=columnar,
            parted=world.parted,
        )

    def _stream(
        self, splits: list[int], *, sizes: Iterator[int] | None = None, world: World | None = None
    ) -> Generator[Any, None, None]:
        return self._view.stream(
            self._options,
            splits,
            self._ledger.cursor,
            counters=self._counters,
            sizes=sizes,
            part=None if world is None else world.part,
        )

    def _endless(self, splits: list[int]) -> Generator[Any, None, None]:
        """This epoch's rest, then every later epoch's samples, without end."""
        while True:
            yield from self._stream(splits)
            self.next_epoch()

    def next_epoch(self) -> None:
        """Move an endless dataset into the next epoch (the iterator stays live)."""
        _LOG.info(
            "endless dataset of rank %d moves from epoch %d to %d", self.rank, self.epoch, self.epoch + 1
        )
        self._view = self._epoch_view(self.epoch + 1)
        self._restart()

    def set_epoch(self, epoch: int) -> None:
        """Move to ``epoch`` (see ``StreamingDataset.set_epoch``)."""
        epoch = as_epoch(epoch)
        if epoch == self.epoch:
            return
        left, whole = self._left(), sum(self.remaining(whole=True)[split] for split in self._rank_splits)
        closed = self._lifecycle.set_epoch(epoch, anything_left=left > 0)
        if left > 0 and (closed is not None or left < whole) and not self._options.evaluation:
            _LOG.info(
                "set_epoch(%d) leaves epoch %d of rank %d with %d of %d samples undelivered%s",
                epoch,
                self.epoch,
                self.rank,
                left,
                whole,
                f" (closed {closed.description})" if closed is not None else "",
            )
        self._view = self._epoch_view(epoch)
        self._restart()

    def stats(self) -> dict[str, float]:
        """See ``StreamingDataset.stats``."""
        samples, positions = self._ledger.cursor.samples, self._ledger.cursor.positions
        totals = stats.total([self._counters.as_dict(), *self._worker_counters.values()])
        skipped = sum(positions[split] - samples[split] for split in self._rank_splits)
        return {
            "epoch": self.epoch,
            "rows_delivered": sum(samples[split] for split in self._rank_splits),
            "rows_skipped": 0 if self._view.packing is not None else skipped,
            **totals,
            **self._counters.waits.as_dict(),
            **stats.rows_per_worker(self._worker_counters),
        }

    # -- the loaders' protocol (see host.py) -------------------------------------

    @property
    def counters(self) -> Counters:
        """The read counters of this process's iterators."""
        return self._counters

    @property
    def waits(self) -> Waits:
        """The loop's waits for the loader's batches (kept with this process's counters)."""
        return self._counters.waits

    def user_functions(self) -> list[tuple[str, object]]:
        """(keyword, value) of the user's functions a worker process must unpickle."""
        return [
            ("transform", self._options.transform),
            ("on_transform_error", self._options.on_transform_error),
        ]

    def supersede(self, description: str) -> None:
        """A new iterator (``description``) closes the live one; an endless dataset whose
        epoch was fully delivered moves on at once (its ``epoch`` says where ``iter()`` is)."""
        self._lifecycle.supersede(description, anything_left=self._left() > 0)
        if self._options.endless and not self._options.evaluation and self._left() == 0:
            self.next_epoch()

    def begin_iteration(self, *, stacklevel: int, warn: bool = True) -> None:
        """At an iterator's first ``next()``: restart an evaluation pass, move an endless
        dataset on, or warn that the epoch was fully delivered."""
        if self._options.evaluation:
            self._restart()
        elif self._left() == 0 and self._options.endless:
            self.next_epoch()
        elif self._left() == 0 and warn:
            warnings.warn(
                f"epoch {self.epoch} was already fully delivered, so this iterator yields "
                f"nothing; call set_epoch({self.epoch + 1}) to move on (a validation loader, "
                "iterated once per check, wants StreamingDataset(..., evaluation=True))",
                EpochCompleteWarning,
                stacklevel=stacklevel,
            )

    def hold(self, iterator: Guarded) -> Guarded | None:
        """Make a loader's iterator the live one; return the one it wraps, if any (its
        own ``iter(dataset)`` with ``num_workers=0``)."""
        return self._lifecycle.hold(iterator)

    @contextmanager
    def shipping(self, *, batch_size: int, columnar: bool, board: Board | None = None) -> Iterator[None]:
        """While a loader starts its iterator: iterators yield one ``Share`` per batch of
        ``batch_size`` (of columnar pieces with ``columnar``); a pickle for a worker
        process is the loader's, not a plain DataLoader's, and carries ``board`` (a
        persistent loader's pipes)."""
        with (
            self._side.shipping(batch_size=batch_size, columnar=columnar, board=board),
            self._lifecycle.shipping(),
        ):
            yield

    def worker_report(self) -> WorkerReport:
        """In a worker process: the progress of the splits this worker's iterator owns."""
        world, splits = self._iterating
        progress = dict(zip(splits, self._ledger.cursor.progress(splits), strict=True))
        return self._side.report(world, progress, self._counters.as_dict())

    # -- persistent workers -----------------------------------------------------------

    def handover(self) -> dict[str, Any]:
        """In the trainer, as a loader's persistent workers start another iterator: where
        this rank stands (a state dict of the committed position, its epoch and version,
        for an evaluation dataset or a finished epoch too)."""
        return self.describe(self._view, self._ledger.cursor.progress()).to_dict()

    def reset(self, handover: dict[str, Any]) -> None:
        """In a persistent worker, before its next iterator reads: take the position
        ``handover`` (the trainer's) describes; this process's counters carry on."""
        saved = StreamState.from_dict(handover)
        settings = self._view.plan.settings
        same = (saved.version, saved.plan_format, saved.num_splits, saved.block_rows, saved.window_rows) == (
            self.version,
            settings.plan_format,
            self.num_splits,
            settings.block_rows,
            settings.window_rows,
        )
        view = self.view_at(saved.epoch) if same else self.check_load(handover)[0]  # else: open it
        self.use(self._adopted(saved))
        self._view = view
        self._restart(saved.progress)

    def __getstate__(self) -> dict[str, Any]:
        """Pickle for a worker process: settings, snapshot and position, no handles."""
        state = dict(self.__dict__)
        state["_counters"] = Counters()
        state["_worker_counters"] = {}
        for_child = _compat.pickling_for_child_process()
        state["_lifecycle"] = self._lifecycle.pickled(for_child=for_child)
        state["_side"] = self._side.pickled(for_child=for_child)
        return state
