"""One source of a mixture as one rank reads it: its cycle order, epoch after epoch.

Sample j of a source's epoch (its global order) is split j % S, position j // S, so
rank r of W takes every sample j with j % W == r: the rank's splits in ascending
order, cycle after cycle. A segment of the mixture schedule (global positions
[start, start + count), both multiples of W) is rank-local positions
[start / W, (start + count) / W) of that order.
"""

from __future__ import annotations

import dataclasses
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

from .mixing import Segment
from .plan import digest
from .reader import SplitReaders, open_readers

if TYPE_CHECKING:
    from .dataset import StreamingDataset

__all__ = ["RankStream"]


class RankStream:
    """Reads segments of one source for this rank, in order, opening each epoch's plan."""

    def __init__(self, dataset: StreamingDataset, *, name: str) -> None:
        self._dataset = dataset
        self._salt = (digest("mixture source", name),)  # per-row generators differ by source
        self._splits = dataset.owned_splits()
        self._world = dataset.world_size
        self._stack: ExitStack | None = None
        self._readers: SplitReaders | None = None
        self._epoch = -1
        self._local = -1  # rank-local position the readers stand at

    def _open(self, epoch: int, local: int) -> SplitReaders:
        self.close()
        data = self._dataset
        view = data._view_at(epoch)
        width = len(self._splits)
        starts = {split: max(0, -(-(local - index) // width)) for index, split in enumerate(self._splits)}
        self._stack = ExitStack()
        windows = dataclasses.replace(view.window_source(data._options, data._counters), rng_salt=self._salt)
        threads = data._options.io_queue_depth
        readers = self._stack.enter_context(open_readers(windows, starts, io_threads=threads))
        self._readers, self._epoch, self._local = readers, epoch, local
        return readers

    def read(self, segment: Segment, *, keep: bool) -> list[Any]:
        """This rank's samples of ``segment`` (``keep=False``: pass them untransformed)."""
        start, count = segment.start // self._world, segment.count // self._world
        readers = self._readers
        if readers is None or segment.epoch != self._epoch or start != self._local:
            readers = self._open(segment.epoch, start)
        width = len(self._splits)
        taken: list[list[Any]] = []
        for index, split in enumerate(self._splits):
            first = (index - start) % width  # offset in the segment of this split's first sample
            need = max(0, -(-(count - first) // width))
            samples: list[Any] = []
            while need > 0:
                if keep:
                    part = readers.take(split, need)
                    samples.extend(part)
                    need -= len(part)
                else:
                    _, low, high = readers.span(split, need)
                    need -= high - low
            taken.append(samples)
        self._local = start + count
        if not keep:
            return []
        iterators = [iter(samples) for samples in taken]
        return [next(iterators[local % width]) for local in range(start, start + count)]

    def close(self) -> None:
        """Stop the background reads."""
        if self._stack is not None:
            self._stack.close()
        self._stack, self._readers = None, None
