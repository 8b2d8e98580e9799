"""One source of a mixture as one rank (or one of its workers) reads it, epoch after epoch.

Sample j of a source's epoch (its global order) is split j % S, position j // S, so
rank r of W takes every sample j with j % W == r: the rank's splits in ascending
order, cycle after cycle. A segment of the mixture schedule (global positions
[start, start + count), both multiples of W) is rank-local positions
[start / W, (start + count) / W) of that order. Worker w of k reads only the
rank's splits at positions w, w + k, ... (its *share*): each row is read once
across the rank's workers, and the loader assembles every batch from their shares.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ..core.plan import digest
from ..core.world import World
from ..samples.reader import SplitReaders, open_readers
from ..samples.rows import Rows
from ..samples.window import Window
from .schedule import Segment, Step

if TYPE_CHECKING:
    from ..dataset.host import MixtureSource

__all__ = ["RankStream", "share_of"]


class RankStream:
    """Reads segments of one source for this rank, in order, opening each epoch's plan."""

    def __init__(self, dataset: MixtureSource, *, name: str, world: World | None = None) -> None:
        self._dataset = dataset
        self._place = world or World()  # this process reads the splits at positions w, w + k, ...
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
        starts = {
            split: max(0, -(-(local - index) // width))
            for index, split in enumerate(self._splits)
            if self._mine(index)
        }
        self._stack = ExitStack()
        windows = dataclasses.replace(view.window_source(data.options, data.counters), rng_salt=self._salt)
        threads = data.options.io_threads
        readers = self._stack.enter_context(open_readers(windows, starts, io_threads=threads))
        self._readers, self._epoch, self._local = readers, epoch, local
        return readers

    @property
    def world_size(self) -> int:
        """The source's world size."""
        return self._world

    def _mine(self, index: int) -> bool:
        """Whether the split at position ``index`` of the rank's splits is this process's."""
        return self._place.owns(index)

    def _spans(self, segment: Segment) -> tuple[int, int, list[list[tuple[Window, int, int]]]]:
        """(first rank-local position, count, each split's spans; none for others' splits) of ``segment``."""
        start, count = segment.start // self._world, segment.count // self._world
        readers = self._readers
        if readers is None or segment.epoch != self._epoch or start != self._local:
            readers = self._open(segment.epoch, start)
        width = len(self._splits)
        spans: list[list[tuple[Window, int, int]]] = []
        for index, split in enumerate(self._splits):
            first = (index - start) % width  # offset in the segment of this split's first sample
            need = max(0, -(-(count - first) // width)) if self._mine(index) else 0
            parts = []
            while need > 0:
                window, low, high = readers.span(split, need)
                parts.append((window, low, high))
                need -= high - low
            spans.append(parts)
        self._local = start + count
        return start, count, spans

    def _within(self, start: int, count: int) -> np.ndarray:
        """Offsets in a segment (from rank-local ``start``) of this process's samples."""
        local = np.arange(start, start + count)
        worker, workers = self._place.worker, self._place.workers
        return (local - start)[(local % len(self._splits)) % workers == worker]

    def read(self, segment: Segment) -> tuple[list[Any], np.ndarray]:
        """This process's samples of ``segment`` in the rank's order, and their offsets in it."""
        start, count, spans = self._spans(segment)
        taken = [
            [sample for window, low, high in parts for sample in window.samples(low, high)] for parts in spans
        ]
        iterators = [iter(samples) for samples in taken]
        width = len(self._splits)
        within = self._within(start, count)
        return [next(iterators[(start + offset) % width]) for offset in within.tolist()], within

    def read_columns(self, segment: Segment) -> tuple[list[str], list[Any], np.ndarray]:
        """This process's rows of ``segment`` as columns in the rank's order (no transform),
        and their offsets in it."""
        start, count, spans = self._spans(segment)
        width = len(self._splits)
        within = self._within(start, count)
        sizes = np.array([sum(high - low for _, low, high in parts) for parts in spans])
        split = (start + within) % width
        index = (within - (split - start) % width) // width  # the sample's index among its split's
        order = np.concatenate([[0], np.cumsum(sizes)[:-1]])[split] + index if len(within) else within
        windows = [window for parts in spans for window, _, _ in parts]
        rows = [window for window in windows if isinstance(window, Rows)]
        if len(rows) != len(windows):
            raise TypeError("columnar reads need windows of rows (no transform)")
        names = rows[0].names if rows else []
        columns = []
        for column in range(len(names)):
            pieces = [
                cast(Rows, window).column(column, low, high) for parts in spans for window, low, high in parts
            ]
            columns.append(_take(pieces, order))
        return list(names), columns, within

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


def share_of(step: Step, streams: Mapping[str, RankStream], *, columnar: bool) -> tuple[Any, np.ndarray, int]:
    """This process's share of ``step`` from every source, in source order: samples (or
    ``{column: [values]}`` pieces with ``columnar``), their offsets in the rank's batch
    before it is put in order, and the batch's size.

    Raises:
        TypeError: two sources with different columns (no batch could hold both).
    """
    names: list[str] | None = None
    samples: list[Any] = []
    parts: list[list[Any]] = []
    offsets: list[np.ndarray] = []
    size = 0
    for source_name, segments in step.segments.items():
        for segment in segments:
            stream = streams[source_name]
            if columnar:
                found, columns, within = stream.read_columns(segment)
                if len(within) and names is None:
                    names, parts = found, [[] for _ in found]
                elif len(within) and found != names:
                    raise TypeError(
                        f"sources[{source_name!r}] has columns {found} but an earlier source has "
                        f"{names}; give every source the same columns= (or a transform, or a collate_fn)"
                    )
                for column, part in zip(parts, columns, strict=False):
                    column.append(part)
            else:
                got, within = stream.read(segment)
                samples += got
            offsets.append(size + within)
            size += segment.count // stream.world_size
    where = np.concatenate(offsets) if offsets else np.zeros(0, dtype=np.int64)
    if not columnar:
        return samples, where, size
    pieces = {name: [_joined(column)] for name, column in zip(names or [], parts, strict=True)}
    return pieces, where, size


def _joined(parts: list[Any]) -> Any:
    """The pieces of a column laid end to end."""
    if all(isinstance(part, np.ndarray) for part in parts):
        return np.concatenate(parts)
    return [value for part in parts for value in part]
