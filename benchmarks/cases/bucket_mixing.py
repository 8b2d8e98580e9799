"""Mixing of each shuffled contender on label-sorted tables, as guarantee 12 measures it.

Two local tables whose labels are sorted: 2,000,000 rows of 1,000 labels (batches
of 256, one split) and 40,000 rows of 10 labels (batches of 64, one split and four).
The ratio is the mean number of distinct labels per batch over that of a uniform
random permutation of the same labels. Mixing depends on the plan, not on where
the table lives, so it is measured locally once per contender.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.cases.bucket_contenders import labels_of
from benchmarks.cases.scenarios import mean_distinct
from benchmarks.harness.tables import TableRef, sorted_chunk, write_table

LARGE = (2_000_000, 1_000, 256, 200)  # rows, labels, batch, batches measured
SMALL = (40_000, 10, 64, None)


@dataclass(frozen=True)
class SortedTables:
    """The two label-sorted tables."""

    large: TableRef
    small: TableRef


def write_sorted(folder: str, *, large_rows: int = LARGE[0]) -> SortedTables:
    """Write both tables (16 fragments each) into ``folder``."""
    large = write_table(
        folder, "sorted_large", rows=large_rows, fragments=16, chunk=sorted_chunk(large_rows, LARGE[1])
    )
    small = write_table(
        folder, "sorted_small", rows=SMALL[0], fragments=16, chunk=sorted_chunk(SMALL[0], SMALL[1])
    )
    return SortedTables(large, small)


def _ratio(labels: np.ndarray, table: TableRef, count: int, batch: int) -> float:
    every = np.arange(table.rows, dtype=np.int64) * count // table.rows
    uniform = np.random.default_rng(0).permutation(every)[: len(labels)]
    return mean_distinct(labels, batch) / mean_distinct(uniform, batch)


Labels = Callable[[TableRef, int, int], Iterator[Any]]
"""``labels(table, splits, batch)``: batches (or samples) whose labels are read in order."""


def _collect(batches: Iterator[Any], limit: int | None) -> np.ndarray:
    chosen = batches if limit is None else itertools.islice(batches, limit)
    parts = [np.atleast_1d(labels_of(batch)) for batch in chosen]
    close = getattr(batches, "close", None)
    if close is not None:
        close()
    return np.concatenate(parts).astype(np.int64)


def ratios(labels: Labels, tables: SortedTables, *, splits: bool = True) -> dict[str, float]:
    """Mixing ratios: ``2M`` (1 split) and ``40k`` (the worse of 1 and 4 splits)."""
    _, count, batch, limit = LARGE
    large = _ratio(_collect(labels(tables.large, 1, batch), limit), tables.large, count, batch)
    small = []
    for split_count in (1, 4) if splits else (1,):
        seen = _collect(labels(tables.small, split_count, SMALL[2]), None)
        small.append(_ratio(seen, tables.small, SMALL[1], SMALL[2]))
    return {"2M": large, "40k": min(small)}


def ours_labels(block_rows: int, buffer_rows: int) -> Labels:
    """Ours with these plan settings, in loader batches."""

    def labels(table: TableRef, splits: int, batch: int) -> Iterator[Any]:
        from streaming import StreamingDataLoader, StreamingDataset

        dataset = StreamingDataset(
            table.uri,
            num_splits=splits,
            columns=["label"],
            block_rows=block_rows,
            shuffle_buffer_size=buffer_rows,
        )
        return iter(StreamingDataLoader(dataset, batch_size=batch))

    return labels


def peer_labels(table: TableRef, splits: int, batch: int) -> Iterator[Any]:
    """The peer's shuffled loader."""
    from lancedb.streaming import StreamingDataLoader, StreamingDataset

    dataset = StreamingDataset(table.open(), num_splits=splits, shuffle=True, columns=["label"])
    return iter(StreamingDataLoader(dataset, batch_size=batch))


def lance_torch_labels(sampler_name: str) -> Labels:
    """``lance.torch``'s ``LanceDataset`` with a randomized sampler."""

    def labels(table: TableRef, splits: int, batch: int) -> Iterator[Any]:
        import lance.sampler
        from lance.torch.data import LanceDataset

        sampler = getattr(lance.sampler, sampler_name)(rank=0, world_size=1, randomize=True)
        return iter(LanceDataset(table.uri, batch_size=batch, columns=["label"], sampler=sampler))

    return labels


def scan_labels(table: TableRef, splits: int, batch: int) -> Iterator[Any]:
    """The raw scan in batches of ``batch`` rows: storage order."""
    import lance

    return iter(lance.dataset(table.uri).to_batches(columns=["label"], batch_size=batch))
