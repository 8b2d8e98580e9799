"""Rows of one window after a user ``transform``: transformed lazily, batch by batch.

A window's rows are cut, in yield order, into ``read_batch_size``-row batches.
A batch is transformed when the consumer reaches it, on a pool of
``transform_parallelism`` threads shared by every split of the iterator. At most
``transform_queue_depth`` batches of a split are transformed or being
transformed at once, the one the consumer is in included (the later ones are
transformed ahead of it), and a batch the consumer has left is freed. So the
first sample costs one transformed batch per split, and memory holds at most
``transform_queue_depth`` transformed batches per split besides the raw window.
"""

from __future__ import annotations

import bisect
import copy
import functools
import logging
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ..core.stats import Counters
from ..errors import TransformContractError, TransformErrorWarning

__all__ = ["OnError", "Seeds", "Transformer", "TransformedRows"]

_LOG = logging.getLogger("streaming")

OnError = str | Callable[[Exception], bool]
"""``"raise"``, ``"skip"``, ``"warn"``, ``"replace"`` or ``handler(exception) -> bool``
(True drops the row)."""


Spare = Callable[[], list[Any] | None]
"""A good sample from outside a batch, as a one-item list (``None``: there is none)."""


@dataclass(frozen=True)
class _Done:
    """One transformed batch: a sample per row (``None`` for a dropped row)."""

    samples: list[Any]
    skipped: list[int]  # offsets in the batch of the dropped rows, ascending


@dataclass(frozen=True)
class Seeds:
    """Where per-row random generators come from: (seed, epoch) of the plan, and a
    ``salt`` that tells apart the sources of a mixture (empty for a single table)."""

    seed: int
    epoch: int
    salt: tuple[int, ...] = ()

    def rngs(self, split: int, first: int, count: int) -> list[np.random.Generator]:
        """Generators of the rows at positions ``first``, ... of ``split``: each seeded from
        (seed, epoch, split, position), so the same on every run, topology and batch size."""
        return [
            np.random.default_rng(
                np.random.SeedSequence([*self.salt, self.seed, self.epoch, split, position])
            )
            for position in range(first, first + count)
        ]


@dataclass(frozen=True)
class Transformer:
    """How to transform batches: the user's function, its error rule and its threads.

    Attributes:
        transform: ``transform(pyarrow.RecordBatch)`` returning one sample per row.
        batch_rows: Rows per ``transform`` call (``read_batch_size``).
        on_error: What a row the transform fails on does (see ``OnError``).
        counters: Where the time spent and the rows dropped are added.
        executor: The threads that run transforms.
        depth: Batches of a split transformed at once, the consumer's own included.
        seeds: With ``transform_rng=True``: the transform also gets one random
            generator per row.
    """

    transform: Callable[..., Iterable[Any]]
    batch_rows: int
    on_error: OnError
    counters: Counters
    executor: Executor
    depth: int
    seeds: Seeds | None = None

    def run(self, batch: pa.RecordBatch, split: int, first: int, spare: Spare | None = None) -> _Done:
        """Transform one batch (rows at positions ``first``, ... of ``split``); a batch
        that fails is retried row by row unless ``on_error`` is ``"raise"``. With
        ``"replace"``, ``spare()`` stands in when no row of the batch transforms."""
        start = time.perf_counter()
        try:
            try:
                return _Done(self.apply(batch, split, first), [])
            except TransformContractError:
                raise
            except Exception:
                if self.on_error == "raise":
                    raise
            return self._retry_rows(batch, split, first, spare)  # the user decides per row
        finally:
            self.counters.add(transform=time.perf_counter() - start)

    def apply(self, batch: pa.RecordBatch, split: int, first: int) -> list[Any]:
        """``transform`` on ``batch`` (with its rows' generators, if asked), checked."""
        if self.seeds is None:
            return _apply(self.transform, batch)
        rngs = self.seeds.rngs(split, first, batch.num_rows)
        return _apply(lambda rows: self.transform(rows, rngs), batch, self.transform)

    def _retry_rows(self, batch: pa.RecordBatch, split: int, first: int, spare: Spare | None) -> _Done:
        samples: list[Any] = []
        skipped: list[int] = []
        failures: list[Exception] = []
        for index in range(batch.num_rows):
            try:
                samples.extend(self.apply(batch.slice(index, 1), split, first + index))
            except TransformContractError:
                raise
            except Exception as error:
                if callable(self.on_error) and not self.on_error(error):
                    raise
                failures.append(error)
                skipped.append(index)
                samples.append(None)
        self.counters.add(dropped=len(skipped))
        if failures and self.on_error == "replace":
            return _Done(_replaced(samples, skipped, failures[0], spare), [])
        if failures and self.on_error == "warn":
            for index, failure in zip(skipped, failures, strict=True):  # one record per row, as the peer logs
                where = (first + index, split)
                _LOG.warning("Skipped position %d of split %d: transform failed (%r)", *where, failure)
            warnings.warn(
                f"transform {_qualname(self.transform)} failed on {len(failures)} of {batch.num_rows} "
                f"rows of a batch; they were skipped (first error: {failures[0]!r})",
                TransformErrorWarning,
                stacklevel=2,
            )
        return _Done(samples, skipped)


class TransformedRows:
    """The rows of one window in yield order, transformed as the consumer reaches them.

    Rows the transform dropped are remembered, so readers can tell positions
    passed from samples delivered. Used by one consumer thread; the transforms
    themselves run on the ``Transformer``'s threads.
    """

    def __init__(
        self, table: pa.Table, order: np.ndarray, transformer: Transformer, *, split: int, start: int
    ) -> None:
        self._table = table
        self._order = order
        self._transformer = transformer
        self._split = split
        self._start = start  # the split position of the window's first row
        self._rows = transformer.batch_rows
        self._batches: dict[int, Future[_Done] | _Done] = {}
        self._first_kept = 0  # batches below this one were left behind and freed

    def __len__(self) -> int:
        return len(self._order)

    def prime(self, before: int) -> None:
        """Start transforming this window's first batches while the consumer finishes
        the previous window: as many as its ``depth`` allows with ``before`` rows of
        that window still to come."""
        ahead = self._transformer.depth - -(-before // self._rows)
        for index in range(max(0, ahead)):
            self._submit(index)

    def reach(self, start: int, stop: int) -> int:
        """``stop``, cut at the end of the batch that holds row ``start``."""
        return min(stop, (start // self._rows + 1) * self._rows)

    def _submit(self, index: int) -> None:
        if index * self._rows >= len(self._order) or index in self._batches:
            return
        record = self._record(np.arange(index * self._rows, min(len(self._order), (index + 1) * self._rows)))
        first = self._start + index * self._rows
        spare = functools.partial(self._spare, index)
        run = self._transformer.run
        self._batches[index] = self._transformer.executor.submit(run, record, self._split, first, spare)

    def _record(self, rows: np.ndarray) -> pa.RecordBatch:
        """The window's rows at yield-order offsets ``rows`` as one record batch."""
        table = self._table.take(pa.array(self._order[rows])).combine_chunks()
        records = table.to_batches()
        return records[0] if records else pa.RecordBatch.from_pylist([], schema=table.schema)

    def _spare(self, index: int) -> list[Any] | None:
        """The nearest row of the window outside batch ``index`` that transforms (after
        the batch first, then before it), as a one-sample list; ``None`` if none does.
        Runs on a transform thread and reads only what never changes."""
        low, high = index * self._rows, min(len(self._order), (index + 1) * self._rows)
        for offset in [*range(high, len(self._order)), *range(low - 1, -1, -1)]:
            try:
                return self._transformer.apply(
                    self._record(np.array([offset])), self._split, self._start + offset
                )
            except TransformContractError:
                raise
            except Exception:  # noqa: S112 - a bad row cannot stand in; the next may
                continue
        return None

    def _batch(self, index: int) -> _Done:
        """Batch ``index`` transformed (waiting for it), with the next ones scheduled."""
        for ahead in range(index, index + self._transformer.depth):
            self._submit(ahead)
        for old in range(self._first_kept, index):  # the consumer never goes back
            self._batches.pop(old, None)
        self._first_kept = max(self._first_kept, index)
        entry = self._batches[index]
        if isinstance(entry, Future):
            entry = self._batches[index] = entry.result()
        return entry

    def _parts(self, start: int, stop: int) -> Iterable[tuple[int, _Done, int, int]]:
        """(first row, batch, start, stop) of each batch that rows [start, stop) touch."""
        row = start
        while row < stop:
            index = row // self._rows
            base = index * self._rows
            end = min(stop, base + self._rows)
            yield base, self._batch(index), row - base, end - base
            row = end

    def exact(self, start: int, stop: int) -> list[Any]:
        """Rows [start, stop) transformed in one call of their own, outside the batches
        (a mixture's worker, whose neighbouring rows belong to other workers)."""
        record = self._record(np.arange(start, stop))
        spare = functools.partial(self._spare, start // self._rows)
        return self._transformer.run(record, self._split, self._start + start, spare).samples

    def samples(self, start: int, stop: int) -> list[Any]:
        """Transformed samples for rows [start, stop); a dropped row gives ``None``."""
        parts = self._parts(start, stop)
        return [sample for _, done, low, high in parts for sample in done.samples[low:high]]

    def kept(self, start: int, stop: int) -> list[int] | None:
        """Offsets from ``start`` of the rows in [start, stop) that were not dropped.

        ``None`` when no row in the range was dropped (the common case).
        """
        dropped: set[int] = set()
        for base, done, low, high in self._parts(start, stop):
            skipped = done.skipped
            inside = skipped[bisect.bisect_left(skipped, low) : bisect.bisect_left(skipped, high)]
            dropped.update(base + offset for offset in inside)
        if not dropped:
            return None
        return [offset - start for offset in range(start, stop) if offset not in dropped]

    def waiting(self, position: int) -> tuple[int, int]:
        """(raw rows not yet transformed, transformed rows not yet consumed) from ``position``."""
        ready = 0
        for index, entry in self._batches.items():
            if isinstance(entry, _Done) or entry.done():
                low = max(position, index * self._rows)
                ready += max(0, min(len(self._order), (index + 1) * self._rows) - low)
        return len(self._order) - position - ready, ready

    def close(self) -> None:
        """Cancel transforms not yet started and free every batch."""
        for entry in self._batches.values():
            if isinstance(entry, Future):
                entry.cancel()
        self._batches.clear()


def _replaced(samples: list[Any], skipped: list[int], first: Exception, spare: Spare | None) -> list[Any]:
    """``samples`` with each dropped row replaced by a copy of the nearest kept sample
    of the batch after it (else before it), or, if none, of ``spare()``: the same
    choice on every run."""
    bad = set(skipped)
    kept = [index for index in range(len(samples)) if index not in bad]
    if not kept:
        stand_in = spare() if spare is not None else None
        if stand_in is None:
            raise RuntimeError(
                f"on_transform_error='replace': the transform failed on every row of a window "
                f"of the split, so no row can stand in for them (first error: {first!r}); "
                "fix the transform, or filter the bad rows out with filter="
            ) from first
        return [copy.deepcopy(stand_in[0]) for _ in samples]
    for index in skipped:
        source = kept[min(bisect.bisect_left(kept, index), len(kept) - 1)]
        samples[index] = copy.deepcopy(samples[source])
    return samples


def _apply(
    transform: Callable[[pa.RecordBatch], Iterable[Any]], batch: pa.RecordBatch, named: object = None
) -> list[Any]:
    """``transform(batch)`` as a list, checked to hold one sample per row (errors name
    ``named``, the user's function, if ``transform`` wraps it)."""
    result = transform(batch)
    if isinstance(result, (pa.RecordBatch, pa.Table, Mapping)):
        raise TransformContractError(
            f"transform {_qualname(named or transform)} returned {_described(result)} for a batch "
            f"of {batch.num_rows} rows; it must return an iterable of samples, one per row "
            "(for example a list of dicts: batch.to_pylist())"
        )
    produced = list(result)
    if len(produced) != batch.num_rows:
        raise TransformContractError(
            f"transform {_qualname(named or transform)} returned {len(produced)} samples for "
            f"a batch of {batch.num_rows} rows; it must return exactly one sample per row, "
            "one output row per input row (filter rows with the filter= argument instead)"
        )
    return produced


def _described(result: object) -> str:
    """What a transform returned instead of samples, in words: its kind and size."""
    if isinstance(result, (pa.RecordBatch, pa.Table)):
        return f"a {type(result).__name__} with {result.num_rows} rows / {result.num_columns} columns"
    return f"a {type(result).__name__} with {len(result)} keys"  # type: ignore[arg-type]


def _qualname(function: object) -> str:
    module = getattr(function, "__module__", None)
    name = getattr(function, "__qualname__", type(function).__qualname__)
    return f"{module}.{name}" if module else str(name)
