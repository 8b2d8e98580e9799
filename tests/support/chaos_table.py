"""Random Lance tables for the chaos campaign, and the mutations made between runs."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa

from streaming import StreamingDataset

FILTERS = ("label != 3", "id % 4 != 1")
MUTATIONS = ("append", "delete", "overwrite", "add_column", "compact")


def rows(start: int, count: int, *, extra: bool = False) -> pa.Table:
    """Rows with unique ids start..start+count-1 (and the added column once it exists)."""
    ids = np.arange(start, start + count, dtype=np.int64)
    columns = {"id": ids, "label": (ids % 7).astype(np.int32)}
    if extra:
        columns["twice"] = ids * 2
    return pa.table(columns)


def random_table(path: Path, rng: np.random.Generator) -> str:
    """Several fragments of random sizes, and some deleted rows; returns the URI."""
    uri = str(path)
    sizes = rng.integers(4, 70, size=int(rng.integers(2, 6)))
    start = 0
    for index, size in enumerate(sizes):
        lance.write_dataset(rows(start, int(size)), uri, mode="create" if index == 0 else "append")
        start += int(size)
    deleted = rng.choice(start, size=int(rng.integers(0, start // 8 + 1)), replace=False)
    if len(deleted):
        lance.dataset(uri).delete(f"id IN ({', '.join(str(int(i)) for i in sorted(deleted))})")
    return uri


def mutate(uri: str, rng: np.random.Generator) -> str:
    """Change the table in one random way; returns the mutation's name."""
    kind = MUTATIONS[int(rng.integers(len(MUTATIONS)))]
    dataset = lance.dataset(uri)
    extra = "twice" in dataset.schema.names
    top = int(dataset.to_table(columns=["id"]).column("id").to_numpy().max(initial=0)) + 1
    if kind == "append":
        lance.write_dataset(rows(top, int(rng.integers(1, 40)), extra=extra), uri, mode="append")
    elif kind == "delete":
        dataset.delete(f"id % {int(rng.integers(2, 6))} = 0")
    elif kind == "overwrite":
        lance.write_dataset(rows(top, int(rng.integers(10, 60)), extra=extra), uri, mode="overwrite")
    elif kind == "add_column" and not extra:
        dataset.add_columns({"twice": "id * 2"})
    else:
        dataset.optimize.compact_files(target_rows_per_fragment=64)
        kind = "compact"
    return kind


def live_count(uri: str, version: int, where: str | None) -> tuple[int, set[int]]:
    """Live rows of a version matching ``where``, read with a plain Lance scan."""
    ids = lance.dataset(uri, version=version).to_table(columns=["id"], filter=where).column("id")
    return len(ids), set(ids.to_pylist())


def planned(table: Any, *, version: int, splits: int, seed: int, where: str | None) -> Counter[int]:
    """Every row the epoch plans, read by one uninterrupted rank through the public API (``table``:
    the URI, or the same table through a LanceDB server, whose plan is its own)."""
    dataset = StreamingDataset(
        table, version=version, num_splits=splits, shuffle_seed=seed, columns=["id"], filter=where
    )
    return Counter(int(sample["id"]) for sample in dataset)
