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
    ``cycles``; ``samples`` and ``positions`` fold that in on read. A split whose
    segment had rows dropped by the transform carries ``passed``: the positions
    it has passed after each number of cycles.
    """

    def __init__(self, num_splits: int) -> None:
        self._samples = [0] * num_splits
        self._positions = [0] * num_splits
        self.start = [0] * num_splits
        self._segment: list[int] = []
        self._passed: list[Passed] = []
        self.cycles = 0
        self.anchors: list[tuple[int, int, int]] = [(0, 0, 0)] * num_splits  # packing only

    def commit_anchors(self, anchors: dict[int, tuple[int, int, int]]) -> None:
        """Packing: adopt each split's new (blocks, document, offset) anchor."""
        assert not self._segment, "commit_anchors() while a segment is open"
        for split, anchor in anchors.items():
            self.anchors[split] = anchor
            self._samples[split], self._positions[split] = anchor[0], anchor[1]

    def reset(
        self,
        samples: Sequence[int],
        positions: Sequence[int],
        anchors: Sequence[tuple[int, int, int]] | None = None,
    ) -> None:
        """Adopt counts (and packing anchors) as the start of a run."""
        self._samples, self._positions = list(samples), list(positions)
        self.anchors = list(anchors) if anchors is not None else [(0, 0, 0)] * len(samples)
        self.start = list(samples)
        self._segment, self._passed, self.cycles = [], [], 0

    @property
    def samples(self) -> list[int]:
        """Samples delivered per split, counting completed cycles only."""
        result = list(self._samples)
        for split in self._segment:
            result[split] += self.cycles
        return result

    @property
    def positions(self) -> list[int]:
        """Plan positions passed per split."""
        result = list(self._positions)
        for split, passed in zip(self._segment, self._passed):
            result[split] += self.cycles if passed is None else passed[self.cycles]
        return result

    def apply(
        self,
        splits: Sequence[int],
        samples: Sequence[int],
        positions: Sequence[int],
        anchors: Sequence[tuple[int, int, int]] | None = None,
    ) -> None:
        """Overwrite the counts of ``splits`` (a worker's snapshot, committed).

        Only for the trainer's copy, which no iterator of this process advances.
        """
        assert not self._segment, "apply() while an iterator of this process advances the counts"
        for split, count, position in zip(splits, samples, positions):
            self._samples[split] = count
            self._positions[split] = position
        for split, anchor in zip(splits, anchors or ()):
            self.anchors[split] = tuple(anchor)  # type: ignore[assignment]

    def advance(self, splits: Sequence[int], cycles: int) -> None:
        """Count ``cycles`` more completed cycles for ``splits`` (no open segment)."""
        assert not self._segment, "advance() while a segment is open"
        for split in splits:
            self._samples[split] += cycles
            self._positions[split] += cycles

    def begin(self, splits: Sequence[int], passed: Sequence[Passed] | None = None) -> None:
        """Start a segment in which ``splits`` advance one sample per completed cycle.

        ``passed[i]`` (if given and not ``None``) lists the positions split i has
        passed after 0, 1, ... cycles; otherwise positions move with the samples.
        """
        self.fold()
        self._segment = list(splits)
        self._passed = list(passed) if passed is not None else [None] * len(splits)

    def fold(self) -> None:
        """Close the open segment into the stored counts."""
        self._samples, self._positions = self.samples, self.positions
        self._segment, self._passed, self.cycles = [], [], 0


Passed = list[int] | None


def _trim(
    readers: SplitReaders, split: int, taken: tuple[list[Any], list[int] | None, int], count: int, lag: int
) -> Passed:
    """Keep ``count`` samples of a ``take_kept`` result; give the later positions back.

    ``lag`` is how far the reader stood ahead of the committed position before the
    take (dropped rows it consumed after the last committed sample). Returns the
    positions passed after each number of cycles, from the committed position
    (``None``: one per cycle). Dropped rows are committed with the next kept
    sample, or, at the split's end, with the split's last sample.
    """
    samples, kept, rows = taken
    del samples[count:]
    if kept is None:
        readers.unread(split, rows - count)
        return None if lag == 0 else [0] + [lag + cycle for cycle in range(1, count + 1)]
    readers.unread(split, rows - kept[count] if count < len(kept) else 0)
    passed = [0] + [lag + offset + 1 for offset in kept[:count]]
    if count == len(kept) and readers.remaining(split) == 0:
        passed[count] = lag + rows
    return passed


def _chunks(
    readers: SplitReaders, splits: Sequence[int], committed: Sequence[int]
) -> tuple[list[list[Any]], int, list[Passed]]:
    """The next samples of every split, trimmed to the same count, and their ``passed``."""
    lags = [readers.positions[split] - committed[split] for split in splits]
    taken = [readers.take_kept(split, CHUNK_ROWS) for split in splits]
    count = min(len(samples) for samples, _, _ in taken)
    passed = [_trim(readers, *args) for args in zip(splits, taken, [count] * len(splits), lags)]
    return [samples for samples, _, _ in taken], count, passed


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
                chunks, count, passed = _chunks(readers, active, progress.positions)
                progress.begin(active, passed)
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
