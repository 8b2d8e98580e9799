"""One source of a mixture as one rank reads it: its cycle order, epoch after epoch.

Sample j of a source's epoch (its global order) is split j % S, position j // S, so
rank r of W takes every sample j with j % W == r: the rank's splits in ascending
order, cycle after cycle. A segment of the mixture schedule (global positions
[start, start + count), both multiples of W) is rank-local positions
[start / W, (start + count) / W) of that order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ..core.plan import digest
from ..read.reader import SplitReaders, Window, open_readers
from ..read.rows import Rows
from ..read.transformed import TransformedRows
from .schedule import Segment, Step

if TYPE_CHECKING:
    from ..dataset.dataset import StreamingDataset

__all__ = ["RankStream", "batch_columns"]


class RankStream:
    """Reads segments of one source for this rank, in order, opening each epoch's plan."""

    def __init__(self, dataset: StreamingDataset, *, name: str, exact: bool = False) -> None:
        self._dataset = dataset
        self._exact = exact  # transform exactly the rows kept, in calls of their own (workers)
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
        view = data.view_at(epoch)
        width = len(self._splits)
        starts = {split: max(0, -(-(local - index) // width)) for index, split in enumerate(self._splits)}
        self._stack = ExitStack()
        windows = dataclasses.replace(view.window_source(data.options, data.counters), rng_salt=self._salt)
        threads = data.options.io_threads
        readers = self._stack.enter_context(open_readers(windows, starts, io_threads=threads))
        self._readers, self._epoch, self._local = readers, epoch, local
        return readers

    def _spans(self, segment: Segment, *, keep: bool) -> tuple[int, int, list[list[tuple[Window, int, int]]]]:
        """(first rank-local position, count, each split's spans) of ``segment``."""
        start, count = segment.start // self._world, segment.count // self._world
        readers = self._readers
        if readers is None or segment.epoch != self._epoch or start != self._local:
            readers = self._open(segment.epoch, start)
        width = len(self._splits)
        spans: list[list[tuple[Window, int, int]]] = []
        for index, split in enumerate(self._splits):
            first = (index - start) % width  # offset in the segment of this split's first sample
            need = max(0, -(-(count - first) // width))
            parts = []
            while need > 0:
                window, low, high = (
                    readers.span(split, need) if keep and not self._exact else readers.skip(split, need)
                )
                parts.append((window, low, high))
                need -= high - low
            spans.append(parts)
        self._local = start + count
        return start, count, spans

    def read(self, segment: Segment, *, keep: bool) -> list[Any]:
        """This rank's samples of ``segment`` (``keep=False``: pass them untransformed)."""
        start, count, spans = self._spans(segment, keep=keep)
        if not keep:
            return []
        taken = [
            [sample for window, low, high in parts for sample in self._samples(window, low, high)]
            for parts in spans
        ]
        iterators = [iter(samples) for samples in taken]
        width = len(self._splits)
        return [next(iterators[local % width]) for local in range(start, start + count)]

    def _samples(self, window: Window, low: int, high: int) -> list[Any]:
        if self._exact and isinstance(window, TransformedRows):
            return window.exact(low, high)
        return window.samples(low, high)

    def read_columns(self, segment: Segment) -> tuple[list[str], list[Any]]:
        """This rank's rows of ``segment`` as columns in yield order (no transform)."""
        start, count, spans = self._spans(segment, keep=True)
        width = len(self._splits)
        sizes = np.array([sum(high - low for _, low, high in parts) for parts in spans])
        local = np.arange(start, start + count)
        split = local % width
        within = (local - start - (split - start) % width) // width
        order = (np.concatenate([[0], np.cumsum(sizes)[:-1]])[split] + within) if count else local
        windows = [window for parts in spans for window, _, _ in parts]
        rows = [window for window in windows if isinstance(window, Rows)]
        if not windows or len(rows) != len(windows):
            raise TypeError("columnar reads need windows of rows (no transform)")
        names = rows[0].names
        columns = []
        for column in range(len(names)):
            pieces = [
                cast(Rows, window).column(column, low, high) for parts in spans for window, low, high in parts
            ]
            columns.append(_take(pieces, order))
        return names, columns

    def close(self) -> None:
        """Stop the background reads."""
        if self._stack is not None:
            self._stack.close()
        self._stack, self._readers = None, None


def _take(pieces: list[Any], order: np.ndarray) -> Any:
    """The rows ``order`` of the pieces laid end to end (numpy arrays, or lists of values)."""
    if pieces and all(isinstance(piece, np.ndarray) for piece in pieces):
        return np.concatenate(pieces)[order]
    values = [value for piece in pieces for value in piece]
    return [values[index] for index in order]


def batch_columns(step: Step, streams: Mapping[str, RankStream], order: range | list[int]) -> dict[str, Any]:
    """This rank's share of ``step`` from every source, as whole columns in ``order``.

    Raises:
        TypeError: two sources with different columns (no batch could hold both).
    """
    names: list[str] | None = None
    parts: list[list[Any]] = []
    for source_name, segments in step.segments.items():
        for segment in segments:
            found, columns = streams[source_name].read_columns(segment)
            if names is None:
                names, parts = found, [[] for _ in found]
            elif found != names:
                raise TypeError(
                    f"sources[{source_name!r}] has columns {found} but an earlier source has "
                    f"{names}; give every source the same columns= (or a transform, or a collate_fn)"
                )
            for column, part in zip(parts, columns, strict=True):
                column.append(part)
    assert names is not None
    return {name: _reorder(column, order) for name, column in zip(names, parts, strict=True)}


def _reorder(parts: list[Any], order: range | list[int]) -> Any:
    """The pieces of a column laid end to end, then taken in ``order``."""
    if all(isinstance(part, np.ndarray) for part in parts):
        joined = np.concatenate(parts)
        return joined if isinstance(order, range) else joined[np.asarray(order)]
    values = [value for part in parts for value in part]
    return [values[index] for index in order]
