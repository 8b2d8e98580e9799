"""Round-robin iteration over owned splits, committing only completed cycles."""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

from ..core.progress import Cursor, Passed
from .reader import SplitReaders, WindowSource, open_readers

__all__ = ["CHUNK_ROWS", "iterate_cycles"]

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


def _chunks(
    readers: SplitReaders, splits: Sequence[int], committed: Sequence[int]
) -> tuple[list[list[Any]], int, list[Passed]]:
    """The next samples of every split, trimmed to the same count, and their ``passed``."""
    lags = [readers.positions[split] - committed[split] for split in splits]
    taken = [readers.take_kept(split, CHUNK_ROWS) for split in splits]
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
    """Yield cycle 0, 1, ...: one sample of each split that has not run out.

    Inside a cycle splits come in ascending order. ``cursor`` moves just before
    the last sample of a cycle is handed out, so it always counts whole cycles;
    samples of a partial cycle are replayed after a resume. Closing the generator
    stops the background reads.
    """
    ordered = sorted(splits)
    starts = {split: cursor.positions[split] for split in ordered}
    with open_readers(windows, starts, io_threads=io_threads) as readers:
        count = width = 0
        readers.held = lambda: max(0, count - cursor.cycles) * width  # the chunk's cycles to come
        try:
            while True:
                active = [split for split in ordered if readers.remaining(split) > 0]
                if not active:
                    return
                chunks, count, passed = _chunks(readers, active, cursor.positions)
                cursor.begin(active, passed)
                width = len(active)
                rows = iter(
                    chunks[0] if width == 1 else [row for cycle in zip(*chunks, strict=True) for row in cycle]
                )
                for _ in range(count):
                    for _ in range(width - 1):
                        yield next(rows)
                    cursor.cycles += 1
                    yield next(rows)
        finally:
            cursor.fold()
