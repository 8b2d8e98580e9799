"""``World``: where one process stands in a job, worked out once and handed down. Pure.

A rank ``rank`` of ``world_size`` reads its splits in ``workers`` processes: the
DataLoader's worker processes (``num_workers=k``: k of them, this one worker
``worker``), or, without any, the rank's own process (``workers=1``). Worker w
reads the rank's splits at positions w, w + k, ...; each of its shares of a batch
holds its samples of those splits. The loader learns the worker count from the
user; each process learns its own place once (``workers.side.find_world``) and
hands this value down to whatever cuts, reads or reports its shares.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .plan import worker_splits

__all__ = ["World"]


@dataclass(frozen=True)
class World:
    """One process's place: rank of world size, worker of the rank's reading processes."""

    rank: int = 0
    world_size: int = 1
    worker: int = 0
    workers: int = 1
    """Processes that read the rank's splits (1: the rank's own process)."""
    in_worker: bool = False
    """True in a DataLoader worker process (its shares travel to the trainer)."""

    def owns(self, index: int) -> bool:
        """Whether the split at position ``index`` of the rank's splits is this process's."""
        return index % self.workers == self.worker

    def splits(self, rank_splits: Sequence[int]) -> list[int]:
        """This process's splits of ``rank_splits`` (positions w, w + k, ...).

        Raises:
            ValueError: ``workers`` does not divide the rank's splits (with the fix).
        """
        if self.workers <= 1:
            return list(rank_splits)
        return worker_splits(
            rank_splits, worker=self.worker, num_workers=self.workers, world_size=self.world_size
        )
