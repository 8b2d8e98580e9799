"""The order of a rank's samples, and where each worker's share of every batch sits. Pure.

A rank's iterator hands out its splits' samples by *level* (a sample's index in
its split), and inside a level in ascending split order: cycle after cycle, and
after a resume from a partial cycle, the rest of that cycle first. With k
workers, worker w reads only the splits at positions w, w + k, ... of the
rank's splits, and each loader batch (rank samples [t * b, (t + 1) * b)) is
assembled in the trainer from one *share* per worker: the worker's samples of
that batch, in the same order, with their slots in the batch (``ShareSlots``). So the batches
are the same for every worker count, and every batch ends at an exact position.

``RankOrder`` computes which split position each rank sample comes from without
materialising the order: the levels are cut into segments in which the same
splits take part, so a lookup costs O(segments + samples asked for).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["RankOrder", "ShareSlots"]

_SLOTS_KEPT = 256
"""Distinct slot sets a ``RankOrder`` keeps worked out (one per place in a segment's period)."""


@dataclass(frozen=True)
class _Segment:
    """Levels [low, high) in which the split positions ``active`` take part; rank
    samples from ``offset`` on."""

    low: int
    high: int
    offset: int
    active: np.ndarray


class RankOrder:
    """The order of the samples a rank has left: by (level, split position).

    ``starts[j]`` is the level the split at position j of the rank's splits
    stands at (its samples delivered), ``ends[j]`` the level it will stop at (its
    samples delivered plus those left).
    """

    def __init__(self, starts: Sequence[int], ends: Sequence[int]) -> None:
        if len(starts) != len(ends):
            raise ValueError(f"{len(starts)} starts but {len(ends)} ends")
        if any(end < start for start, end in zip(starts, ends, strict=True)):
            raise ValueError(f"an end lies before its start: starts {list(starts)}, ends {list(ends)}")
        first, last = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
        self._starts = first
        levels = sorted({int(level) for level in (*starts, *ends)})
        self._segments: list[_Segment] = []
        offset = 0
        for low, high in itertools.pairwise(levels):
            active = np.flatnonzero((first <= low) & (last >= high))
            if len(active):
                self._segments.append(_Segment(low, high, offset, active))
                offset += (high - low) * len(active)
        self.total = offset
        self._offsets = [segment.offset for segment in self._segments]
        self._slots: dict[tuple[int, ...], np.ndarray] = {}

    def positions(self, low: int, high: int) -> np.ndarray:
        """The split position of each rank sample in [low, high) (clipped to ``total``)."""
        high = min(high, self.total)
        if high <= low:
            return np.zeros(0, dtype=np.int64)
        parts = []
        index = max(0, bisect.bisect_right(self._offsets, low) - 1)
        while low < high:
            segment = self._segments[index]
            width = len(segment.active)
            stop = min(high, segment.offset + (segment.high - segment.low) * width)
            within = np.arange(low - segment.offset, stop - segment.offset, dtype=np.int64)
            parts.append(segment.active[within % width])
            low, index = stop, index + 1
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def slots(self, low: int, high: int, *, worker: int, workers: int) -> np.ndarray:
        """Indices i in [0, high - low) of the rank samples low + i that come from a split
        position j with j % workers == worker, ascending (read-only).

        Inside one segment the positions repeat with the segment's width, so the answer
        depends only on where in that period ``low`` falls: it is worked out once and
        shared by every batch that falls there alike.
        """
        high = min(high, self.total)
        index = max(0, bisect.bisect_right(self._offsets, low) - 1) if high > low else -1
        segment = self._segments[index] if index >= 0 else None
        if segment is None or high > segment.offset + (segment.high - segment.low) * len(segment.active):
            return np.flatnonzero(self.positions(low, high) % workers == worker)
        key = (index, (low - segment.offset) % len(segment.active), high - low, worker, workers)
        found = self._slots.get(key)
        if found is None:
            if len(self._slots) >= _SLOTS_KEPT:
                self._slots.clear()
            found = np.flatnonzero(self.positions(low, high) % workers == worker)
            found.flags.writeable = False
            self._slots[key] = found
        return found

    def counts(self, count: int) -> np.ndarray:
        """How many of the first ``count`` samples each split position gives, by
        arithmetic on the segments (nothing of ``count``'s size is built)."""
        taken = np.zeros(len(self._starts), dtype=np.int64)
        for segment in self._segments:
            width = len(segment.active)
            here = min(count - segment.offset, (segment.high - segment.low) * width)
            if here <= 0:
                break
            cycles, extra = divmod(here, width)
            taken[segment.active] += cycles
            taken[segment.active[:extra]] += 1
        return taken

    def batches(self, batch_size: int) -> int:
        """How many batches of ``batch_size`` the samples make (the last one may be short)."""
        return -(-self.total // batch_size)


@dataclass(frozen=True)
class ShareSlots:
    """Worker ``worker`` of ``workers``: the slots of its share of each batch of ``batch_size``.

    The worker owns the split positions j with j % workers == worker.
    """

    order: RankOrder
    worker: int
    workers: int
    batch_size: int

    def slots(self, batch: int) -> np.ndarray:
        """Slots (indices in batch ``batch``) of this worker's samples, ascending."""
        low = batch * self.batch_size
        if self.workers == 1:
            return np.arange(len(self.order.positions(low, low + self.batch_size)), dtype=np.int64)
        return self.order.slots(low, low + self.batch_size, worker=self.worker, workers=self.workers)

    def size(self, batch: int) -> int:
        """Samples in batch ``batch`` (all workers together)."""
        low = batch * self.batch_size
        return max(0, min(self.batch_size, self.order.total - low))
