"""Which splits a rank owns, and which a worker owns when workers own whole splits.

Rank r of W owns splits r, r + W, r + 2W, ...: every rank as many (S % W == 0),
strided so that a rank's splits spread over the segment order. Pure: no torch, no Lance.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["rank_splits", "worker_splits"]


def rank_splits(num_splits: int, *, rank: int, world_size: int) -> list[int]:
    """Splits owned by ``rank``: rank, rank + W, rank + 2W, ... (strided)."""
    if num_splits % world_size:
        works = -(-num_splits // world_size) * world_size
        raise ValueError(
            f"num_splits={num_splits} is not divisible by world_size={world_size}; every rank must own "
            f"as many splits: pass StreamingDataset(..., num_splits={works}) (a multiple of {world_size}; "
            f"a multiple of every world size the job may run on lets a checkpoint move between them), or "
            f"leave num_splits out (chosen for the table so that the common world sizes divide it)"
        )
    return list(range(rank, num_splits, world_size))


def worker_splits(splits: Sequence[int], *, worker: int, num_workers: int) -> list[int]:
    """The splits of a rank that worker ``worker`` of ``num_workers`` owns when workers own
    whole splits: those at positions worker, worker + num_workers, ... (strided; any
    ``num_workers``, so a worker beyond the rank's splits owns none)."""
    return list(splits[worker::num_workers])
