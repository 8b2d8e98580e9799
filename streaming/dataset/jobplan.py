"""One plan per job: a ``filter``'s matching rows found once, by rank 0, for every rank.

Without it every rank of a job scans the table for the rows a ``filter`` matches,
W scans for one plan. When a dataset with a ``filter`` takes its rank and world
size from an initialised ``torch.distributed`` process group, construction is a
collective: the ranks check that they opened one version of the table, rank 0
builds the filter index and broadcasts it, and every rank checks that it planned
exactly what the others did.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np

from ..tables import source
from ..tables.table import Table

__all__ = ["check_same_plan", "shares_plan", "shared_filter_index"]


def shares_plan(rank: int | None, world_size: int | None, filter: str | None) -> bool:  # noqa: A002
    """Whether this dataset's plan is made once per job (see the module's docstring)."""
    if filter is None or rank is not None or world_size is not None:
        return False
    import torch.distributed as dist

    return bool(dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1)


def _gather(value: Any) -> list[Any]:
    import torch.distributed as dist

    values: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(values, value)
    return values


def shared_filter_index(snapshot: source.Snapshot, handle: Table, predicate: str) -> source.FilterIndex:
    """Rank 0's filter index of ``snapshot``, on every rank; one scan for the job.

    Raises (on every rank alike):
        ValueError: the ranks opened different versions of the table, or the
            filter cannot be applied.
    """
    import torch.distributed as dist

    versions = _gather(snapshot.version)
    if len(set(versions)) > 1:
        raise ValueError(
            f"the ranks opened different versions of table {snapshot.uri!r} (by rank: {versions}): "
            "it changed while the job started; pass the same version= on every rank "
            f"(rank 0 opened {versions[0]})"
        )
    box: list[Any] = [None]
    index: source.FilterIndex | None = None
    if dist.get_rank() == 0:
        try:
            index = source.build_filter_index(handle, predicate)
            box[0] = ("index", len(index.ids), len(index.offsets))
        except ValueError as error:
            box[0] = ("error", str(error))
    if "gloo" not in str(dist.get_backend()):  # nccl and others: CPU tensors cannot travel
        box = [box[0] if box[0] is None or box[0][0] == "error" else index]
        dist.broadcast_object_list(box, src=0)
        if isinstance(box[0], tuple):
            raise ValueError(box[0][1])
        return box[0]
    dist.broadcast_object_list(box, src=0)
    if box[0][0] == "error":
        raise ValueError(box[0][1])
    _, fragments, matching = box[0]
    return _broadcast_index(index, fragments=fragments, matching=matching)


def _broadcast_index(
    index: source.FilterIndex | None, *, fragments: int, matching: int
) -> source.FilterIndex:
    """Rank 0's ``index`` on every rank, its arrays sent as tensors over gloo (no pickling);
    the other ranks pass None and the sizes rank 0 announced."""
    import torch
    import torch.distributed as dist

    # the arrays go as tensors (no pickling): int64 fragment ids and starts, uint32 offsets as int32
    arrays = (
        (np.asarray(index.ids), np.asarray(index.starts), np.asarray(index.offsets))
        if index is not None
        else (
            np.empty(fragments, np.int64),
            np.empty(fragments + 1, np.int64),
            np.empty(matching, np.uint32),
        )
    )
    for array in arrays:
        tensor = torch.from_numpy(array.view(np.int32) if array.dtype == np.uint32 else array)
        dist.broadcast(tensor, src=0)
    if index is not None:
        return index
    return source.FilterIndex(ids=arrays[0], starts=arrays[1], offsets=arrays[2])


def plan_digest(view: Any, options: Any) -> str:
    """A digest of what a rank planned: table version, matching rows per fragment, settings."""
    described = {
        "uri": view.snapshot.uri,
        "version": view.snapshot.version,
        "fragments": list(view.fragment_ids),
        "rows": list(view.fragment_rows),
        "num_splits": options.num_splits,
        "split_length": view.plan.split_length,
        "shuffle_seed": options.shuffle_seed,
        "epoch": view.epoch,
        "filter": options.filter,
    }
    # the filter index itself is rank 0's on every rank; its matching rows per fragment are in "rows"
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()


def check_same_plan(view: Any, options: Any) -> None:
    """Every rank planned the same epoch; raises ``ValueError`` on every rank otherwise."""
    digests = _gather(plan_digest(view, options))
    if len(set(digests)) > 1:
        differing = [rank for rank, digest in enumerate(digests) if digest != digests[0]]
        raise ValueError(
            f"ranks {differing} planned another epoch than rank 0 for table {view.snapshot.uri!r} "
            "(other settings or another filter): pass the same settings on every rank"
        )
