"""Rank, world size and a shared seed, from an initialised torch.distributed group;
the splits a simulated worker iterates."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

from ..core.world import World

__all__ = ["agree", "draw_seed", "require_group", "simulated_splits", "topology"]


def topology(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """Fill in rank/world_size from an initialised process group, else 0/1.

    Without torch.distributed imported no group can be initialised, so a process
    that never imported it (the command line) does not pay torch's import here.
    """
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return (
            dist.get_rank() if rank is None else rank,
            dist.get_world_size() if world_size is None else world_size,
        )
    return (0 if rank is None else rank, 1 if world_size is None else world_size)


def agree(value: int, *, world_size: int, what: str, fix: str) -> int:
    """Rank 0's ``value`` on every rank (broadcast when a process group is initialised).

    Raises:
        ValueError: ``world_size > 1`` and no process group to share the value with
            (``what`` names the setting and its fix).
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        box: list[Any] = [value]
        dist.broadcast_object_list(box, src=0)
        return int(box[0])
    require_group(world_size, what=what, fix=fix)
    return value


def require_group(world_size: int, *, what: str, fix: str) -> None:
    """Raise ``ValueError`` if several ranks would have no process group to agree through."""
    import torch.distributed as dist

    if world_size > 1 and not (dist.is_available() and dist.is_initialized()):
        raise ValueError(
            f"{what} with world_size={world_size} needs an initialised torch.distributed "
            f"process group so that every rank uses rank 0's value; {fix}, or call "
            "init_process_group first"
        )


def draw_seed(world_size: int) -> int:
    """One fresh seed, the same on every rank (rank 0's, broadcast)."""
    seed = int.from_bytes(os.urandom(8), "little") >> 12  # 52 bits: exact in any JSON reader
    fix = "pass the same integer shuffle_seed on every rank"
    return agree(seed, world_size=world_size, what="shuffle_seed=None", fix=fix)


def simulated_splits(splits: Sequence[int], override: Any, *, world_size: int) -> list[int]:
    """The splits of ``splits`` (a rank's) that a dataset with ``worker_info_override``
    iterates: those of worker ``override.id`` of ``override.num_workers``; all of them
    without an override. They are the only splits whose counts its state knows exactly.

    Raises:
        ValueError: the override's ``id`` is not a worker of its ``num_workers``.
    """
    if override is None:
        return list(splits)
    place = World(world_size=world_size, worker=int(override.id), workers=int(override.num_workers))
    if not 0 <= place.worker < place.workers:
        raise ValueError(
            f"worker_info_override has id={place.worker} and num_workers={place.workers}; pass an id "
            f"from 0 to num_workers - 1 (and num_workers >= 1)"
        )
    return place.splits(splits)
