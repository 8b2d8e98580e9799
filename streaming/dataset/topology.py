"""Rank, world size and a shared seed, from an initialised torch.distributed group."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["agree", "draw_seed", "require_group", "topology"]


def topology(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """Fill in rank/world_size from an initialised process group, else 0/1."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
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
