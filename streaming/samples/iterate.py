"""Iteration over owned splits by level (a sample's index in its split), counting every sample."""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from typing import Any

from ..core.progress import Cursor, Passed
from .reader import SplitReaders, open_readers
from .window import WindowSource

__all__ = ["CHUNK_ROWS", "iterate_cycles", "lowest_level"]

CHUNK_ROWS = 512
"""Samples taken from each split at a time; they are interleaved in one go."""


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


def lowest_level(
    levels: Sequence[int] | Mapping[int, int], splits: Sequence[int]
) -> tuple[list[int], int | None]:
    """The splits at the lowest of ``levels`` (in the given order), and how many
    levels they rise before meeting the next splits (``None``: no splits above)."""
    low = min(levels[split] for split in splits)
    above = [levels[split] for split in splits if levels[split] > low]
    return [split for split in splits if levels[split] == low], (min(above) - low if above else None)


def _chunks(
    readers: SplitReaders, splits: Sequence[int], committed: Sequence[int], *, limit: int
) -> tuple[list[list[Any]], int, list[Passed]]:
    """The next samples of every split, trimmed to the same count, and their ``passed``."""
    lags = [readers.positions[split] - committed[split] for split in splits]
    taken = [readers.take_kept(split, limit) for split in splits]
    count = min(len(samples) for samples, _, _ in taken)
    passed = [_trim(readers, *args) for args in zip(splits, taken, [count] * len(splits), lags, strict=True)]
    return [samples for samples, _, _ in taken], count, passed


def iterate_cycles(
    windows: WindowSource,
    splits: Sequence[int],
    cursor: Cursor,
    *,
    io_threads: int,
) -> Generator[Any, None, None]:
    """Yield the samples of ``splits`` by level, inside a level in ascending split order.

    When every split stands at the same level that is cycle after cycle; a split
    behind the others (a resume from a partial cycle, a lagged merge) takes its
    samples alone until it meets them. ``cursor`` counts each sample as it is
    handed out, so a state taken in the middle of a cycle is exact. Closing the
    generator stops the background reads.
    """
    ordered = sorted(splits)
    positions = cursor.positions  # a fresh list each time it is read
    starts = {split: positions[split] for split in ordered}
    with open_readers(windows, starts, io_threads=io_threads) as readers:
        count = width = 0
        readers.held = lambda: max(0, (count - cursor.cycles) * width - cursor.within)  # the chunk's rest
        try:
            while True:
                running = [split for split in ordered if readers.remaining(split) > 0]
                if not running:
                    return
                active, gap = lowest_level(cursor.samples, running)
                limit = CHUNK_ROWS if gap is None else min(CHUNK_ROWS, gap)
                chunks, count, passed = _chunks(readers, active, cursor.positions, limit=limit)
                cursor.begin(active, passed)
                width = len(active)
                rows = iter(
                    chunks[0] if width == 1 else [row for cycle in zip(*chunks, strict=True) for row in cycle]
                )
                for _ in range(count):
                    for index in range(1, width):
                        cursor.within = index  # counted as it is handed out
                        yield next(rows)
                    cursor.within = 0
                    cursor.cycles += 1
                    yield next(rows)
        finally:
            cursor.fold()
