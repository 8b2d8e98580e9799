"""``Positioned``: a snapshot, its plan and the committed position in it; the state methods.

The half of the dataset engine (``engine.DatasetEngine``) that owns the position:
it creates the view and the ledger in its constructor, and ``state_dict``,
``load_state_dict`` and ``check_load`` live here, next to them. Iteration and the
loaders' protocol live in ``engine.py``; the user's class is ``dataset.py``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

from ..core.balance import balanced
from ..core.ledger import Ledger
from ..core.lifecycle import Lifecycle
from ..core.options import Options
from ..core.order import RankOrder, ShareSlots
from ..core.ownership import rank_splits
from ..core.plan import PlanSettings
from ..core.progress import Mark, SplitProgress, WorkerReport, fresh
from ..core.world import World
from ..samples.view import TableView, open_view
from ..state.compat import check_compatible
from ..state.format import StreamState
from ..tables import source
from .observe import Described
from .topology import agree, simulated_splits

__all__ = ["Positioned"]

_LOG = logging.getLogger("streaming")


class Positioned(Described):
    """Where one rank stands in one snapshot's plan, and its checkpoints (package-internal)."""

    def __init__(
        self,
        options: Options,
        view: TableView,
        rank_splits: Sequence[int],
        *,
        tag_snapshot: bool,
        worker_info_override: Any = None,
    ):
        """``worker_info_override``: the testing hook (``StreamingDataset``): this process
        delivers, and so counts exactly, only that worker's splits of the rank; the
        state gives every other split its lockstep count."""
        self._options = options
        self._view = view
        self._tag_snapshot = tag_snapshot
        if tag_snapshot:
            source.protect(view.snapshot)
        self._lifecycle = Lifecycle()  # the live iterator; shipped to a plain DataLoader's workers
        self._worker_counters: dict[tuple[int, int], dict[str, float]] = {}
        self._worker_info_override = worker_info_override
        self._own(rank_splits)
        self._restart()

    def _own(self, splits: Sequence[int]) -> None:
        """Own the rank's ``splits``, with a fresh ledger of those this process counts."""
        self._rank_splits = list(splits)
        override, world_size = self._worker_info_override, self._options.world_size
        self._ledger = Ledger(simulated_splits(self._rank_splits, override, world_size=world_size))

    def _restart(self, progress: Sequence[SplitProgress] | None = None) -> None:
        """Start a run at ``progress`` (default: the start of the epoch)."""
        packed = self._view.packing is not None
        self._ledger.restart(
            progress or fresh(self.num_splits, packing=packed),
            total=self._view.split_total(self.num_splits) if self._view.planned else 0,
            by_samples=packed,
        )

    # -- what the facade and the mixture read (and ``observe.Described``) -------------

    def _engine_described(self) -> Positioned:
        return self

    @property
    def options(self) -> Options:
        """The settings in use (read-only)."""
        return self._options

    @property
    def view(self) -> TableView:
        """The view of the snapshot this epoch is planned on (read-only)."""
        return self._view

    @property
    def splits(self) -> Sequence[int]:
        """Splits of this rank: rank, rank + world_size, ... (read-only)."""
        return self._rank_splits

    def length(self) -> int:
        """Samples (or packed blocks) the next iterator of this rank will yield.

        Raises:
            TypeError: an endless dataset, which has no length.
        """
        if self._options.endless:
            raise TypeError(
                "an endless StreamingDataset has no len(): it moves into the next epoch by "
                "itself; count steps instead (Lightning: max_steps)"
            )
        return self._left()

    def _left(self) -> int:
        """Samples (or packed blocks) of this rank left in this epoch."""
        remaining = self.remaining()
        return sum(remaining[split] for split in self._rank_splits)

    def remaining(self, *, whole: bool = False) -> list[int]:
        """Samples (or blocks) each split has left in this epoch (``whole``: all of it).

        Raises:
            ValueError: the snapshot could not be planned (the reason, and that a
                checkpoint's ``load_state_dict`` pins its own version).
        """
        self._view.require_plan()
        if whole or self._options.evaluation:
            return [self._view.split_total(self.num_splits)] * self.num_splits
        return self._ledger.remaining()

    # -- checkpoints ----------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """``StreamingDataset.state_dict`` (its docstring says what is guaranteed)."""
        self._refuse_evaluation("state_dict")
        if self._lifecycle.shipped:
            raise RuntimeError(
                "this dataset was sent to the worker processes of a plain DataLoader, whose "
                "progress never reaches this process, so its state would be wrong; iterate it "
                "with streaming.StreamingDataLoader, which commits each batch as it is returned"
            )
        return self._state_of(self._ledger.cursor.progress())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """``StreamingDataset.load_state_dict`` (its docstring says what is checked)."""
        self._refuse_evaluation("load_state_dict")
        self._lifecycle.refuse_started("load_state_dict")
        view, progress = self.check_load(state)
        splits = view.plan.settings.num_splits  # the state's (adopted when this dataset's was defaulted)
        total = view.split_total(splits) if view.planned else 0
        progress, backs = balanced(progress, world_size=self.world_size, total=total)
        if backs[self.rank]:
            _LOG.info(
                "rank %d of %d delivers %d sample(s) of the state's partial cycle again, so that every "
                "rank has as many samples left",
                self.rank,
                self.world_size,
                backs[self.rank],
            )
        self.adopt(view, progress)

    def check_load(self, state: dict[str, Any]) -> tuple[TableView, tuple[SplitProgress, ...]]:
        """The view and progress ``state`` resumes, validated; changes nothing
        (package-internal: ``adopt`` applies it)."""
        saved = StreamState.from_dict(state)
        pinned = self._view.snapshot.at_version(saved.version)
        handle = source.open_snapshot(pinned, fresh=True)
        same = pinned.version == self._view.snapshot.version  # the filter index holds: no new scan
        index = self._view.filter_index if same else None
        options = self._adopted(saved)
        view = open_view(pinned, handle, options, epoch=saved.epoch, filter_index=index)
        check_compatible(saved, self.describe(view, saved.progress), split_length=view.plan.split_length)
        return view, saved.progress

    def _epoch_view(self, epoch: int) -> TableView:
        """The view of another epoch: re-planned on the same snapshot, or, with
        ``follow_latest``, on the table's newest version (rank 0's, on every rank)."""
        if not self._options.follow_latest:
            return self._view.for_epoch(self._options, epoch)
        snapshot = self._view.snapshot
        fix = "leave follow_latest off"
        version = agree(
            source.latest_version(snapshot), world_size=self.world_size, what="follow_latest", fix=fix
        )
        if version == snapshot.version:
            return self._view.for_epoch(self._options, epoch)
        pinned = snapshot.at_version(version)
        view = open_view(pinned, source.open_snapshot(pinned, fresh=True), self._options, epoch=epoch)
        if self._tag_snapshot:
            source.protect(pinned)
        _LOG.info("epoch %d of rank %d reads version %d of %s", epoch, self.rank, version, snapshot.uri)
        return view

    def view_at(self, epoch: int) -> TableView:
        """This dataset's snapshot planned for ``epoch`` (package-internal)."""
        return self._view if self._view.epoch == epoch else self._view.for_epoch(self._options, epoch)

    def adopt(self, view: TableView, progress: Sequence[SplitProgress]) -> None:
        """Swap in a validated view and progress (see ``check_load``)."""
        settings = view.plan.settings
        self.use(self._adopted(settings))
        self._view = view
        self._restart(progress)
        self._lifecycle.shipped = False
        if self._tag_snapshot:
            source.protect(view.snapshot)

    def use(self, options: Options) -> None:
        """Use ``options`` (package-internal); a new S (a checkpoint's, adopted) re-owns
        the rank's splits."""
        changed = options.num_splits != self.num_splits
        self._options = options
        if changed:
            self._own(rank_splits(options.num_splits, rank=self.rank, world_size=self.world_size))

    def _adopted(self, saved: StreamState | PlanSettings) -> Options:
        """The options a saved plan is resumed with: its format, its S if this
        dataset's was defaulted, its block and window if they came from the profile
        (``Options.adopting_format``, ``adopting_splits``, ``adopting``)."""
        options = self._options.adopting_format(saved.plan_format)
        options = options.adopting_splits(saved.num_splits, block_rows=saved.block_rows)
        return options.adopting(block_rows=saved.block_rows, window_rows=saved.window_rows)

    def release_snapshot(self) -> bool:
        """Remove the tag that protects this dataset's version (see ``tag_snapshot``).

        Returns False when the version had no such tag. After this, cleaning up old
        versions may delete it, and states that pin it can no longer be resumed.
        """
        return source.release(self._view.snapshot)

    def _refuse_evaluation(self, action: str) -> None:
        if self._options.evaluation:
            raise RuntimeError(
                f"cannot {action}: this dataset was built with evaluation=True, so every iter() "
                "restarts at position 0 of its epoch and it keeps no resumable position; "
                "checkpoint the training dataset instead"
            )

    def _state_of(self, progress: Sequence[SplitProgress]) -> dict[str, Any]:
        """The state dict for boundary ``progress``: splits of other ranks in lockstep."""
        lockstep = self._ledger.lockstep(progress, split_length=self._view.plan.split_length)
        return self.describe(self._view, lockstep).to_dict()

    def describe(self, view: TableView, progress: Sequence[SplitProgress]) -> StreamState:
        """The state of this dataset at ``progress`` in ``view`` (package-internal)."""
        settings, packing = view.plan.settings, view.packing
        return StreamState(
            num_splits=settings.num_splits,
            shuffle=self._options.shuffle,
            shuffle_seed=self.shuffle_seed,
            epoch=view.epoch,
            block_rows=settings.block_rows,
            window_rows=settings.window_rows,
            clump_rows=settings.clump_rows,
            plan_format=settings.plan_format,
            progress=tuple(progress),
            owned_splits=self._ledger.owned,
            uri=view.snapshot.uri,
            version=view.snapshot.version,
            filter=self._options.filter,
            columns=view.columns,
            packing=None if packing is None else dataclasses.astuple(packing),
        )

    # -- package-internal: StreamingDataLoader and StreamingMixture (see host.py) -

    @property
    def worker_counters(self) -> dict[tuple[int, int], dict[str, float]]:
        """The latest counters of every (pid, worker) whose batch was committed (live dict)."""
        return self._worker_counters

    def commit(self, report: WorkerReport) -> None:
        """Adopt a worker's report: its batch was handed to the trainer."""
        self._ledger.commit(report.progress)
        self._worker_counters[(report.pid, report.worker)] = report.counters

    def mark(self) -> Mark:
        """Where this process's cursor stands now (cheap: three list copies)."""
        return self._ledger.cursor.mark()

    def rewind(self, mark: Mark) -> None:
        """Put the cursor back (``num_workers=0``: a batch that failed was never delivered)."""
        self._ledger.cursor.restore(mark)

    def share_slots(self, world: World, *, batch_size: int) -> ShareSlots:
        """The slots of the share of ``world``'s worker in each batch of ``batch_size`` this
        rank yields from the committed position (package-internal, see ``workers.cut``)."""
        samples, remaining = self._ledger.cursor.samples, self._ledger.remaining()
        starts = [samples[split] for split in self._rank_splits]
        ends = [samples[split] + remaining[split] for split in self._rank_splits]
        if world.parted:  # each worker walks every sample; its rows say which slots are its
            return ShareSlots(RankOrder(starts, ends), 0, 1, batch_size)
        return ShareSlots(RankOrder(starts, ends), world.worker, world.workers, batch_size)
