"""One read of windows: ``WindowSource`` turns (split, window) pairs into rows in yield
order, with parallel Lance takes per fragment (and blob reads, the local cache and the
plan of the next read); ``reader.SplitReaders`` schedules those reads ahead."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from ..core.cachesettings import CacheSettings
from ..core.plan import EpochPlan, Part
from ..core.profiles import PROFILES
from ..core.stats import Counters, timed
from ..tables import source
from . import blobs
from .blobs import BlobRead
from .planahead import PlanAhead
from .rows import Rows
from .transformed import OnError, Seeds, TransformedRows, Transformer

__all__ = ["Key", "Window", "WindowSource"]

Window = Rows | TransformedRows
Key = tuple[int, int]


@dataclass(frozen=True)
class WindowSource:
    """Everything needed to turn (split, window) pairs into rows in yield order."""

    snapshot: source.Snapshot
    plan: EpochPlan
    columns: Sequence[str]
    filter_index: source.FilterIndex | None
    transform: Callable[[pa.RecordBatch], Iterable[Any]] | None
    batch_rows: int
    counters: Counters
    on_error: OnError = "raise"
    transform_threads: int = 1
    transform_depth: int = 1
    transform_rng: bool = False
    rng_salt: tuple[int, ...] = ()  # a mixture's source: the digest of its name
    take_rows: int = PROFILES["local"].take_rows  # offsets per parallel take (0: one per fragment)
    cache: CacheSettings | None = None  # the local cache of a table in a bucket (see tables/cached.py)
    blobs: BlobRead | None = None  # the blob columns and how they are delivered (see samples/blobs.py)
    ahead: PlanAhead = field(default_factory=PlanAhead, compare=False, repr=False)  # see samples/planahead.py
    part: Part | None = None  # one of several processes reading these windows together (core.plan.Part)

    def transformer(self, executor: Executor) -> Transformer | None:
        """The ``Transformer`` of this source on ``executor`` (``None`` without a transform)."""
        if self.transform is None:
            return None
        settings = self.plan.settings
        seeds = Seeds(settings.seed, settings.epoch, self.rng_salt) if self.transform_rng else None
        return Transformer(
            self.transform,
            self.batch_rows,
            self.on_error,
            self.counters,
            executor,
            self.transform_depth,
            seeds,
        )

    def _table(self, pieces: Sequence[tuple[int, Any]], executor: Executor | None) -> pa.Table:
        """The rows of ``pieces`` in order (through the local cache, if any); a read with
        blob columns goes through ``blobs``, which reads the other columns like any read."""
        reading = source.open_snapshot(self.snapshot).through_cache(self.cache, self.counters)
        index, size = self.filter_index, self.take_rows
        if self.blobs is not None:
            return blobs.read_rows(
                self.snapshot,
                reading,
                pieces,
                columns=self.columns,
                blobs=self.blobs,
                filter_index=index,
                executor=executor,
                take_rows=size,
            )
        return source.read_rows(
            reading, pieces, columns=self.columns, filter_index=index, executor=executor, take_rows=size
        )

    def _nothing(self) -> tuple[tuple[int, Any], ...]:
        """A read of no row (a ``part`` with none here), which still gives the columns' types."""
        return ((int(self.plan.fragment_ids[0]), np.zeros(0, dtype=np.int64)),)

    def _converted(self, seconds: float) -> None:
        self.counters.add(convert=seconds)

    def read(
        self,
        requests: Sequence[Key],
        *,
        executor: Executor | None = None,
        transformer: Transformer | None = None,
    ) -> dict[Key, Window]:
        """Read the windows of ``requests`` together and put each in yield order.

        With ``executor`` the per-fragment takes run on its threads, several at once.
        With a ``transformer`` the windows are transformed lazily, as they are consumed.
        """
        with timed(self.counters, "read"):
            request = self.ahead.plan(self.plan, requests, part=self.part)
            if executor is not None:  # the next read's plan, while this one's takes run
                self.ahead.work_out_next(self.plan, requests, executor, part=self.part)
            table = self._table(request.pieces or self._nothing(), executor)
        self.counters.add(rows=table.num_rows, nbytes=table.nbytes, windows=len(requests))
        windows: list[Window]
        if transformer is not None:
            table = table.combine_chunks()  # one chunk: each batch is one cheap take
            window_rows = self.plan.settings.window_rows
            windows = [
                TransformedRows(table, gather, transformer, split=split, start=window * window_rows)
                for (split, window), gather in zip(requests, request.gathers, strict=True)
            ]
        else:
            # converted at first use (the transform stage of a read without one), timed then
            windows = list(
                Rows.gather(table, request.gathers, converted=self._converted, parted=self.part is not None)
            )
        return dict(zip(requests, windows, strict=True))
