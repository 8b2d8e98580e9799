"""Round-robin iteration over owned splits, committing only completed cycles."""

from __future__ import annotations

import inspect
from collections.abc import Generator, Sequence
from typing import Any

from .reader import SplitReaders, WindowSource, open_readers

CHUNK_ROWS = 512
"""Samples taken from each split at a time; they are interleaved in one go."""


class Progress:
    """Committed per-split counts of one dataset object.

    While an iterator runs, the splits of its current segment advance together by
    ``cycles``; ``samples`` and ``positions`` fold that in on read.
    """

    def __init__(self, num_splits: int) -> None:
        self._samples = [0] * num_splits
        self._positions = [0] * num_splits
        self.start = [0] * num_splits
        self._segment: list[int] = []
        self.cycles = 0

    def reset(self, samples: Sequence[int], positions: Sequence[int]) -> None:
        """Adopt counts as the start of a run."""
        self._samples, self._positions = list(samples), list(positions)
        self.start = list(samples)
        self._segment, self.cycles = [], 0

    def _folded(self, values: list[int]) -> list[int]:
        result = list(values)
        for split in self._segment:
            result[split] += self.cycles
        return result

    @property
    def samples(self) -> list[int]:
        """Samples delivered per split, counting completed cycles only."""
        return self._folded(self._samples)

    @property
    def positions(self) -> list[int]:
        """Plan positions passed per split."""
        return self._folded(self._positions)

    def apply(self, splits: Sequence[int], samples: Sequence[int], positions: Sequence[int]) -> None:
        """Overwrite the counts of ``splits`` (a worker's snapshot, committed).

        Only for the trainer's copy, which no iterator of this process advances.
        """
        assert not self._segment, "apply() while an iterator of this process advances the counts"
        for split, count, position in zip(splits, samples, positions):
            self._samples[split] = count
            self._positions[split] = position

    def advance(self, splits: Sequence[int], cycles: int) -> None:
        """Count ``cycles`` more completed cycles for ``splits`` (no open segment)."""
        assert not self._segment, "advance() while a segment is open"
        for split in splits:
            self._samples[split] += cycles
            self._positions[split] += cycles

    def begin(self, splits: Sequence[int]) -> None:
        """Start a segment in which ``splits`` advance one per completed cycle."""
        self.fold()
        self._segment = list(splits)

    def fold(self) -> None:
        """Close the open segment into the stored counts."""
        self._samples, self._positions = self.samples, self.positions
        self._segment, self.cycles = [], 0


def _chunks(readers: SplitReaders, splits: Sequence[int]) -> tuple[list[list[Any]], int]:
    """The next samples of every split, trimmed to the same count."""
    chunks = [readers.take(split, CHUNK_ROWS) for split in splits]
    count = min(len(chunk) for chunk in chunks)
    for split, chunk in zip(splits, chunks):
        if len(chunk) > count:
            readers.unread(split, len(chunk) - count)
            del chunk[count:]
    return chunks, count


def iterate_cycles(
    windows: WindowSource,
    splits: Sequence[int],
    progress: Progress,
    *,
    io_threads: int,
) -> Generator[Any, None, None]:
    """Yield cycle 0, 1, ...: one sample of each split that has not run out.

    Inside a cycle splits come in ascending order. ``progress`` moves just before
    the last sample of a cycle is handed out, so it always counts whole cycles;
    samples of a partial cycle are replayed after a resume. Closing the generator
    stops the background reads.
    """
    ordered = sorted(splits)
    starts = {split: progress.positions[split] for split in ordered}
    with open_readers(windows, starts, io_threads=io_threads) as readers:
        try:
            while True:
                active = [split for split in ordered if readers.remaining(split) > 0]
                if not active:
                    return
                chunks, count = _chunks(readers, active)
                progress.begin(active)
                width = len(active)
                rows = iter(chunks[0] if width == 1 else [row for cycle in zip(*chunks) for row in cycle])
                for _ in range(count):
                    for _ in range(width - 1):
                        yield next(rows)
                    progress.cycles += 1
                    yield next(rows)
        finally:
            progress.fold()


def is_running(iterator: Generator[Any, None, None] | None) -> bool:
    """True while ``iterator`` exists and is neither exhausted nor closed."""
    return iterator is not None and inspect.getgeneratorstate(iterator) != inspect.GEN_CLOSED
