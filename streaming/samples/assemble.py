"""Columnar batches: which rows make each batch, cut as columns without row dicts.

Inside a ``StreamingDataLoader`` with the default collate function and no
``transform``, the dataset yields whole batches as columns. A chunk takes the
same number of rows from each owned split's window and interleaves their row
indices in cycle order; batches are cut from consecutive chunks as index
slices (per-column pieces), which ``collated.finish`` makes into the batch
``default_collate`` would build.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ..core.progress import Cursor
from .collated import Gathered, vectorisable
from .iterate import CHUNK_ROWS, lowest_level
from .reader import SplitReaders, open_readers
from .rows import Rows
from .window import Window, WindowSource

__all__ = ["PartedBatch", "iterate_batches"]


class PartedBatch(NamedTuple):
    """A batch of one ``Part``'s rows: the per-column pieces of its rows, and the slots
    (places in the whole batch) they take."""

    pieces: dict[str, list[Any]]
    slots: np.ndarray


@dataclass
class _Chunk:
    """``rows`` interleaved rows of ``splits`` (``rows / len(splits)`` cycles).

    Of windows one ``Part`` read, ``mine`` says which of the rows were read here and
    ``columns`` hold only those (``before[i]``: how many of them precede row i).
    """

    splits: list[int]
    names: list[str]
    columns: list[Any]
    rows: int
    taken: int = 0
    committed: int = 0
    mine: np.ndarray | None = None
    before: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.mine is not None:
            self.before = np.concatenate([[0], np.cumsum(self.mine)])

    def columns_between(self, low: int, high: int) -> list[Any]:
        """The columns' pieces of rows [low, high) (of a part's chunk, those read here)."""
        if self.before is not None:
            low, high = int(self.before[low]), int(self.before[high])
        return [column[low:high] for column in self.columns]


def _interleave(parts: list[Any], mine: np.ndarray | None = None) -> Any:
    """Rows of several splits' slices in cycle order (one from each, in turn).

    With ``mine`` (over the interleaved rows: which were read here) each part holds
    only its rows read here, and so does the result.
    """
    if len(parts) == 1:
        return parts[0]
    if mine is not None:
        return _interleave_mine(parts, mine)
    if all(vectorisable(part) for part in parts) and len({(p.dtype, p.shape[1:]) for p in parts}) == 1:
        stacked = np.stack(parts, axis=1)
        return stacked.reshape(-1, *stacked.shape[2:])
    return [value for cycle in zip(*(list(part) for part in parts), strict=True) for value in cycle]


def _interleave_mine(parts: list[Any], mine: np.ndarray) -> Any:
    """``_interleave`` of parts that hold only the rows ``mine`` marks."""
    width = len(parts)
    place = np.cumsum(mine) - 1  # each interleaved row's index among the rows read here
    targets = [place[split::width][mine[split::width]] for split in range(width)]
    total = int(mine.sum())
    kinds = {(part.dtype, part.shape[1:]) for part in parts if isinstance(part, np.ndarray)}
    if all(vectorisable(part) for part in parts) and len(kinds) == 1:
        dtype, shape = kinds.pop()
        out = np.empty((total, *shape), dtype=dtype)
        for part, target in zip(parts, targets, strict=True):
            out[target] = part
        return out
    values: list[Any] = [None] * total
    for part, target in zip(parts, targets, strict=True):
        for index, value in zip(target.tolist(), list(part), strict=True):
            values[index] = value
    return values


def _shared_storage(windows: Sequence[Window]) -> list[Rows] | None:
    """``windows`` as ``Rows`` if they all gather from one read's storage, else None."""
    rows = [window for window in windows if isinstance(window, Rows)]
    if len(rows) == len(windows) and all(window.storage is rows[0].storage for window in rows):
        return rows
    return None


def _chunk(readers: SplitReaders, splits: list[int], *, limit: int) -> _Chunk:
    spans = [readers.span(split, limit) for split in splits]
    count = min(stop - start for _, start, stop in spans)
    for split, (_, start, stop) in zip(splits, spans, strict=True):
        readers.unread(split, stop - start - count)
    starts = [start for _, start, _ in spans]
    shared = _shared_storage([window for window, _, _ in spans])
    columns: list[Any]
    mine = None
    if shared is not None:  # the usual case: the splits' windows came from one read
        parts = [window.indices(start, start + count) for window, start in zip(shared, starts, strict=True)]
        indices = parts[0] if len(parts) == 1 else np.stack(parts, axis=1).reshape(-1)
        if shared[0].parted:
            mine = indices >= 0
            indices = indices[mine]
        names = shared[0].names
        columns = [Gathered(column, indices) for column in shared[0].storage.columns]
    else:  # splits at different windows (after a lagged resume): gather, then interleave
        rows = [window for window, _, _ in spans if isinstance(window, Rows)]
        if len(rows) != len(spans):
            raise TypeError("columnar batches need windows of rows (no transform)")
        names = rows[0].names
        if rows[0].parted:
            masks = [
                window.indices(start, start + count) >= 0 for window, start in zip(rows, starts, strict=True)
            ]
            mine = np.stack(masks, axis=1).reshape(-1)
        columns = [
            _interleave(
                [
                    window.column(index, start, start + count)
                    for window, start in zip(rows, starts, strict=True)
                ],
                mine,
            )
            for index in range(len(names))
        ]
    return _Chunk(
        splits=list(splits), names=list(names), columns=columns, rows=count * len(splits), mine=mine
    )


def _cut(chunks: deque[_Chunk], size: int) -> tuple[dict[str, list[Any]], np.ndarray | None]:
    """The next ``size`` rows (or fewer at the end) as per-column lists of pieces; of a
    part's chunks, only the rows read here, and their slots among the ``size``."""
    pieces: dict[str, list[Any]] = {name: [] for name in chunks[0].names}
    slots: list[np.ndarray] | None = None if chunks[0].mine is None else []
    wanted = size
    for chunk in chunks:
        if wanted == 0:
            break
        count = min(wanted, chunk.rows - chunk.taken)
        low, high = chunk.taken, chunk.taken + count
        for name, column in zip(chunk.names, chunk.columns_between(low, high), strict=True):
            pieces[name].append(column)
        if slots is not None and chunk.mine is not None:
            slots.append(np.flatnonzero(chunk.mine[low:high]) + (size - wanted))
        chunk.taken += count
        wanted -= count
    if slots is None:
        return pieces, None
    return pieces, (np.concatenate(slots) if slots else np.zeros(0, dtype=np.int64))


def _commit(cursor: Cursor, chunks: deque[_Chunk]) -> None:
    """Count every row of the batches handed out (a partial cycle too); drop used chunks."""
    for chunk in chunks:
        if chunk.taken > chunk.committed:
            width = len(chunk.splits)
            (low, low_extra), (high, high_extra) = divmod(chunk.committed, width), divmod(chunk.taken, width)
            # split i moves high - low cycles, one more if i < high_extra, one fewer if i < low_extra:
            # three runs of splits, each moved by one count
            for first, last, moved in _runs(low_extra, high_extra, width, high - low):
                if moved and last > first:
                    cursor.advance(chunk.splits[first:last], moved)
            chunk.committed = chunk.taken
    while chunks and chunks[0].taken == chunks[0].rows:
        chunks.popleft()


def _runs(low_extra: int, high_extra: int, width: int, cycles: int) -> list[tuple[int, int, int]]:
    """(first, last, moved): splits [first, last) of a chunk each moved ``moved`` samples
    when its committed rows went from ``low_extra`` to ``high_extra`` past whole cycles
    (``cycles`` more of them)."""
    one, two = sorted((low_extra, high_extra))
    middle = cycles + (1 if high_extra > low_extra else -1)
    return [(0, one, cycles), (one, two, middle), (two, width, cycles)]


def iterate_batches(
    windows: WindowSource,
    splits: Sequence[int],
    cursor: Cursor,
    *,
    io_threads: int,
    sizes: Iterator[int],
) -> Generator[dict[str, list[Any]] | PartedBatch, None, None]:
    """Yield batches of the next of ``sizes`` rows each, in the order ``iterate_cycles`` gives.

    Each batch is a dict of per-column pieces for ``finish`` (fewer rows at the
    end); of windows one ``Part`` reads, a ``PartedBatch`` of its rows of the batch.
    ``cursor`` counts every row handed out (a part's or not), updated just before
    each yield. A size of 0 is skipped (nothing is yielded for it).
    """
    ordered = sorted(splits)
    chunks: deque[_Chunk] = deque()
    positions = cursor.positions  # a fresh list each time it is read
    starts = {split: positions[split] for split in ordered}
    with open_readers(windows, starts, io_threads=io_threads) as readers:
        for batch_size in sizes:
            if batch_size == 0:
                continue
            buffered = sum(chunk.rows - chunk.taken for chunk in chunks)
            while buffered < batch_size:
                running = [split for split in ordered if readers.remaining(split) > 0]
                if not running:
                    break
                active, gap = lowest_level(readers.positions, running)
                chunks.append(
                    _chunk(readers, active, limit=CHUNK_ROWS if gap is None else min(CHUNK_ROWS, gap))
                )
                buffered += chunks[-1].rows
            if buffered == 0:
                return
            batch, slots = _cut(chunks, batch_size)
            _commit(cursor, chunks)
            yield batch if slots is None else PartedBatch(batch, slots)
