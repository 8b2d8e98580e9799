"""Rank, world size and a shared seed, from an initialised torch.distributed group."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["draw_seed", "topology"]


def topology(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """Fill in rank/world_size from an initialised process group, else 0/1."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return (
            dist.get_rank() if rank is None else rank,
            dist.get_world_size() if world_size is None else world_size,
        )
    return (0 if rank is None else rank, 1 if world_size is None else world_size)


def draw_seed(world_size: int) -> int:
    """One fresh seed, the same on every rank (rank 0's, broadcast)."""
    import torch.distributed as dist

    seed = int.from_bytes(os.urandom(8), "little") >> 12  # 52 bits: exact in any JSON reader
    if dist.is_available() and dist.is_initialized():
        box: list[Any] = [seed]
        dist.broadcast_object_list(box, src=0)
        return int(box[0])
    if world_size > 1:
        raise ValueError(
            f"shuffle_seed=None with world_size={world_size} needs an initialised "
            "torch.distributed process group to share one seed between ranks; pass the "
            "same integer shuffle_seed on every rank, or call init_process_group first"
        )
    return seed
