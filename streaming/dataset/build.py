"""How ``StreamingDataset(...)`` turns the user's settings into a ``DatasetEngine``.

Checks every setting (one error format, naming the field, the value and the fix),
resolves the topology, the seed and the storage profile, opens the table and
plans the first epoch.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

from ..core.cachesettings import cache_settings
from ..core.optionchecks import check_handle_options, check_options
from ..core.options import Options
from ..core.ownership import rank_splits
from ..core.plan import PLAN_FORMAT
from ..core.profiles import profile_for
from ..samples import blobs
from ..samples.view import TableView, open_view, unplanned_view
from ..tables import cached, source
from ..tables.table import Table
from . import jobplan, torchrun
from .engine import DatasetEngine
from .topology import draw_seed, require_group, topology

__all__ = ["build_engine"]

_HANDLE = ("storage_options", "tag_snapshot", "connection_factory")
"""Settings that reach the table's handle, never a state."""
_SIZES = ("block_rows", "shuffle_buffer_size")
"""Plan sizes that, when not given, are sized for the table's rows."""


def build_engine(table: Any, given: Mapping[str, Any]) -> DatasetEngine:
    """The engine of ``StreamingDataset(table, **given)``.

    Raises:
        ValueError: a setting out of range (see ``StreamingDataset``).
    """
    torchrun.check_torchrun_store()
    shared_plan = jobplan.shares_plan(given["rank"], given["world_size"], given["filter"])
    options = _options(table, given)
    rank_splits(options.num_splits, rank=options.rank, world_size=options.world_size)  # a given S: now
    snapshot, handle = source.open_table(
        table,
        version=given["version"],
        storage_options=given["storage_options"],
        connection_factory=given["connection_factory"],
    )
    cached.warn_unused(handle, cache_dir=given["cache_dir"])
    options, view = _first_view(snapshot, handle, options, shared_plan=shared_plan)
    owned = rank_splits(options.num_splits, rank=options.rank, world_size=options.world_size)
    override = given["worker_info_override"]
    return DatasetEngine(
        options,
        view,
        owned,
        tag_snapshot=bool(given["tag_snapshot"]),
        worker_info_override=override,
    )


def _options(table: Any, given: Mapping[str, Any]) -> Options:
    """The checked settings: topology, seed and storage profile filled in."""
    rank, world_size = topology(given["rank"], given["world_size"])
    check_handle_options({name: given[name] for name in _HANDLE})
    if given["follow_latest"] is True and isinstance(world_size, numbers.Integral):
        require_group(int(world_size), what="follow_latest", fix="leave follow_latest off")
    seed = given["shuffle_seed"]
    if seed is None and isinstance(world_size, numbers.Integral):
        seed = draw_seed(world_size)
    profile, profile_plan = profile_for(
        given["storage_profile"],
        source.table_uri(table),
        block_rows=given["block_rows"],
        shuffle_buffer_size=given["shuffle_buffer_size"],
        stacklevel=4,  # the caller of StreamingDataset() (through build_engine)
    )
    filled = {
        "rank": rank,
        "world_size": world_size,
        "shuffle_seed": seed,
        "block_rows": profile.block_rows,
        "shuffle_buffer_size": profile.shuffle_buffer_size,
        "profile": profile,
        "profile_plan": profile_plan,
        "user_sizes": tuple(name for name in _SIZES if given[name] is not None),
        "cache": cache_settings(given["cache_dir"], given["cache_limit"]),
        "num_splits": world_size if given["num_splits"] is None else given["num_splits"],
        "splits_defaulted": given["num_splits"] is None,
        "plan_format": PLAN_FORMAT,
    }
    values = {**given, **filled}
    return check_options({name: values[name] for name in Options.__dataclass_fields__})


def _first_view(
    snapshot: source.Snapshot, handle: Table, options: Options, *, shared_plan: bool
) -> tuple[Options, TableView]:
    """The options sized for ``snapshot`` and its view for the first epoch.

    When the snapshot cannot be planned (no rows, a column or filter column it does
    not have), the view holds that error for its first use instead: building a
    dataset to resume a checkpoint never fails because of the latest version.
    A ``num_splits`` not given is chosen for the snapshot's planned rows
    (``Options.with_default_splits``); one split per rank if it cannot be planned.
    """
    row_bytes = blobs.row_bytes(handle, options.columns)
    options = options.sized_for(row_bytes)
    index = None
    if shared_plan and options.filter:  # one scan for the job (its errors are the job's, not deferred)
        index = jobplan.shared_filter_index(snapshot, handle, options.filter)
    try:
        if options.splits_defaulted:
            if index is None and options.filter:
                index = source.build_filter_index(handle, options.filter)
            options = options.with_default_splits(_planned_rows(handle, index), row_bytes=row_bytes)
        view = open_view(snapshot, handle, options, epoch=options.epoch, filter_index=index)
    except ValueError as error:  # every rank of a shared plan reads the same version: all fail alike
        return options, unplanned_view(snapshot, options, error)
    if shared_plan and options.filter:
        jobplan.check_same_plan(view, options)  # one plan checked on every rank
    return options, view


def _planned_rows(handle: Table, index: source.FilterIndex | None) -> int:
    """The rows a plan of ``handle`` lays out: live rows, or those ``index`` says match."""
    if index is not None:
        return int(sum(index.counts()))
    return int(sum(source.fragment_rows(handle)[1]))
