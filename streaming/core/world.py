"""``World``: where one process stands in a job, worked out once and handed down. Pure.

A rank ``rank`` of ``world_size`` reads its splits in ``workers`` processes: the
DataLoader's worker processes (``num_workers=k``: k of them, this one worker
``worker``), or, without any, the rank's own process (``workers=1``). Any k works:
which process reads which rows is an I/O decision, never an order one.

- ``parted``: every worker walks all of the rank's splits and reads only its
  block slots of every window (``core.plan.Part``): each row is read once, every
  worker reads about 1/k of the rows whatever the split count, and each of its
  shares of a batch holds the samples whose rows it read.
- otherwise (a ``transform``, which may drop rows; packing, which reads a split's
  documents in sequence; mixtures): worker w owns the rank's splits at positions
  w, w + k, ... (k need not divide them; a worker beyond the rank's splits idles).

The loader learns the worker count from the user; each process learns its own
place once (``workers.side.find_world``) and hands this value down to whatever
cuts, reads or reports its shares.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .ownership import worker_splits
from .plan import Part

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
    parted: bool = False
    """The rank's workers share every split by block slots (``Part``), not whole splits."""

    def owns(self, index: int) -> bool:
        """Whether the split at position ``index`` of the rank's splits is this process's."""
        return self.parted or index % self.workers == self.worker

    def splits(self, rank_splits: Sequence[int]) -> list[int]:
        """The splits of ``rank_splits`` this process walks: all of them when ``parted``
        or alone, else those at positions w, w + k, ... (none for a worker beyond them)."""
        if self.workers <= 1 or self.parted:
            return list(rank_splits)
        return worker_splits(rank_splits, worker=self.worker, num_workers=self.workers)

    @property
    def part(self) -> Part | None:
        """The block slots this process reads of every window (``None``: all of its splits')."""
        if not self.parted or self.workers <= 1:
            return None
        return Part(self.worker, self.workers, self.world_size)
