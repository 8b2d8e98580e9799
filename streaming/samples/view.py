"""What a dataset reads: one snapshot, its columns, filter, plan and packing, as one frozen value.

A ``TableView`` is built whole or not at all, so a dataset that switches snapshot
(``load_state_dict``) or epoch (``set_epoch``) swaps one value in on success and
keeps the old one when anything fails.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.options import Options
from ..core.plan import EpochPlan, Part, PlanSettings, window_rows_for
from ..core.progress import Cursor
from ..core.stats import Counters
from ..tables import source
from ..tables.table import Table
from . import blobs
from .assemble import iterate_batches
from .blobs import BlobRead
from .iterate import iterate_cycles
from .packing import Packing, iterate_blocks, packing_for
from .window import WindowSource

__all__ = ["TableView", "open_view", "plan_settings"]


def plan_settings(options: Options, epoch: int) -> PlanSettings:
    """The order-defining settings of ``epoch``."""
    return PlanSettings(
        num_splits=options.num_splits,
        shuffle=options.shuffle,
        seed=options.shuffle_seed,
        epoch=epoch,
        block_rows=options.block_rows,
        window_rows=window_rows_for(
            shuffle_buffer_size=options.shuffle_buffer_size,
            num_splits=options.num_splits,
            block_rows=options.block_rows,
        ),
        clump_rows=options.clump_rows,
        plan_format=options.plan_format,
    )


class UnplannedPlan(EpochPlan):
    """Stands in for the plan of a snapshot that cannot be planned: the settings are
    known, and any other use raises the error that planning it raised.

    A dataset built on the latest version of a table that was since emptied,
    overwritten or left with no row matching its filter still loads a checkpoint
    whose version plans; only using the unplanned snapshot itself fails.
    """

    def __init__(self, settings: PlanSettings, error: ValueError, *, version: int) -> None:
        self.settings = settings
        self.reason = (
            f"{error} (version {version} of the table, which this dataset was built on; "
            "load_state_dict() of a checkpoint pins the version it was taken on)"
        )

    def __getattr__(self, name: str) -> Any:
        raise ValueError(self.reason)


@dataclass(frozen=True)
class TableView:
    """One snapshot as a dataset reads it in one epoch."""

    snapshot: source.Snapshot
    columns: tuple[str, ...]
    filter_index: source.FilterIndex | None
    fragment_ids: tuple[int, ...]
    fragment_rows: tuple[int, ...]
    plan: EpochPlan
    packing: Packing | None
    blobs: BlobRead | None = None

    @property
    def epoch(self) -> int:
        """The epoch the plan is for."""
        return self.plan.settings.epoch

    @property
    def planned(self) -> bool:
        """False for a snapshot that could not be planned (see ``UnplannedPlan``)."""
        return not isinstance(self.plan, UnplannedPlan)

    def require_plan(self) -> None:
        """Raise the planning error of an unplanned snapshot."""
        if isinstance(self.plan, UnplannedPlan):
            raise ValueError(self.plan.reason)

    def for_epoch(self, options: Options, epoch: int) -> TableView:
        """The same snapshot planned for another epoch."""
        plan = EpochPlan(self.fragment_ids, self.fragment_rows, plan_settings(options, epoch))
        return dataclasses.replace(self, plan=plan)

    def split_total(self, num_splits: int) -> int:
        """Samples (or packed blocks) every split holds in this epoch."""
        if self.packing is not None:
            return self.packing.split_blocks(num_splits)
        return self.plan.split_length

    def window_source(
        self, options: Options, counters: Counters, *, part: Part | None = None
    ) -> WindowSource:
        """How this view's windows are read and transformed (only ``part``'s rows of them)."""
        return WindowSource(
            snapshot=self.snapshot,
            plan=self.plan,
            columns=self.columns,
            filter_index=self.filter_index,
            transform=options.transform,
            on_error=options.on_transform_error,
            batch_rows=options.read_batch_size,
            counters=counters,
            transform_threads=options.transform_threads,
            transform_depth=options.transform_depth,
            transform_rng=options.transform_rng,
            take_rows=options.profile.take_rows,
            cache=options.cache,
            blobs=self.blobs,
            part=part,
        )

    def stream(
        self,
        options: Options,
        splits: Sequence[int],
        cursor: Cursor,
        *,
        counters: Counters,
        sizes: Iterator[int] | None = None,
        part: Part | None = None,
    ) -> Generator[Any, None, None]:
        """Samples (or packed blocks, or with ``sizes`` columnar batches of those sizes) of ``splits``.

        With ``part`` only that part's rows are read: the others' samples are
        ``NOT_MINE`` (and a columnar batch is a ``PartedBatch`` of its rows and slots).
        """
        windows = self.window_source(options, counters, part=part)
        threads = options.io_threads
        if self.packing is not None:
            return iterate_blocks(windows, splits, cursor, io_threads=threads, packing=self.packing)
        if sizes is not None:
            return iterate_batches(windows, splits, cursor, io_threads=threads, sizes=sizes)
        return iterate_cycles(windows, splits, cursor, io_threads=threads)


def _columns(handle: Table, wanted: tuple[str, ...] | None) -> tuple[str, ...]:
    available = source.column_names(handle)
    if wanted is None:
        return tuple(available)
    unknown = [name for name in wanted if name not in available]
    if unknown:
        named = ", ".join(f"`{name}`" for name in unknown)
        what = f"column {named} because it does" if len(unknown) == 1 else f"columns {named} because they do"
        version = handle.version
        raise ValueError(
            f"columns={list(wanted)!r}: cannot select {what} not exist in version {version} of the table; "
            f"use names it has: {available!r}"
        )
    return tuple(wanted)


def open_view(
    snapshot: source.Snapshot,
    handle: Table,
    options: Options,
    *,
    epoch: int,
    filter_index: source.FilterIndex | None = None,
) -> TableView:
    """Resolve columns, filter, plan and packing of ``snapshot`` for ``epoch``.

    ``filter_index``: the filter's index of this snapshot, already built (by rank 0
    of the job, or for this snapshot before); ``None`` builds it if there is a filter.

    Raises:
        ValueError: an unknown column, a bad filter, too few rows for the splits,
            or packing settings the table cannot take.
    """
    columns = _columns(handle, options.columns)
    packs = options.pack_sequences is not None
    blob_read = blobs.check_columns(snapshot, handle, columns, mode=options.blobs, packing=packs)
    if filter_index is None and options.filter:
        filter_index = source.build_filter_index(handle, options.filter)
    ids, rows = source.fragment_rows(handle)
    if filter_index is not None:
        matching = dict(zip(filter_index.ids.tolist(), filter_index.counts(), strict=True))
        rows = [matching.get(fragment_id, 0) for fragment_id in ids]
    plan = EpochPlan(ids, rows, plan_settings(options, epoch))
    packing = packing_for(options, handle, columns, plan.split_length * options.num_splits)
    return TableView(snapshot, columns, filter_index, tuple(ids), tuple(rows), plan, packing, blob_read)


def unplanned_view(snapshot: source.Snapshot, options: Options, error: ValueError) -> TableView:
    """A view of ``snapshot`` that holds ``error`` (its planning failed) for its first use."""
    plan = UnplannedPlan(plan_settings(options, options.epoch), error, version=snapshot.version)
    return TableView(snapshot, tuple(options.columns or ()), None, (), (), plan, None)
