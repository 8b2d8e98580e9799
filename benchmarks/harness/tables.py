"""The benchmark tables: written with LanceDB, one fragment per ``add``, on local disk."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

VECTOR_DIM = 128
WIDE_LABELS = 1000

Chunk = Callable[[int, int], pa.Table]
"""``chunk(start, count)`` returns the rows with ids start .. start + count - 1."""


@dataclass(frozen=True)
class TableRef:
    """Where a benchmark table lives; picklable and JSON-friendly, holds no handle."""

    directory: str
    name: str
    rows: int
    fragments: int

    @property
    def uri(self) -> str:
        """The Lance dataset URI of the LanceDB table."""
        return f"{self.directory}/{self.name}.lance"

    def open(self) -> Any:
        """The LanceDB table (``lancedb.connect(directory).open_table(name)``)."""
        import lancedb

        return lancedb.connect(self.directory).open_table(self.name)

    def to_json(self) -> dict[str, Any]:
        """The fields as a dict, to hand to a probe subprocess."""
        return {
            "directory": self.directory,
            "name": self.name,
            "rows": self.rows,
            "fragments": self.fragments,
        }


def wide_chunk(start: int, count: int) -> pa.Table:
    """Rows of (id int64, label int32, vec float32[128]); vectors seeded by ``start``."""
    ids = np.arange(start, start + count, dtype=np.int64)
    rng = np.random.default_rng(start)
    vectors = rng.random((count, VECTOR_DIM), dtype=np.float32)
    vec = pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), VECTOR_DIM)
    return pa.table({"id": ids, "label": (ids % WIDE_LABELS).astype(np.int32), "vec": vec})


def narrow_chunk(start: int, count: int) -> pa.Table:
    """Rows of (id int64, label int32): 12 bytes a row."""
    ids = np.arange(start, start + count, dtype=np.int64)
    return pa.table({"id": ids, "label": (ids % WIDE_LABELS).astype(np.int32)})


def sorted_chunk(total: int, labels: int) -> Chunk:
    """A chunk function whose labels are sorted: row i has label i * labels // total."""

    def chunk(start: int, count: int) -> pa.Table:
        ids = np.arange(start, start + count, dtype=np.int64)
        return pa.table({"id": ids, "label": (ids * labels // total).astype(np.int32)})

    return chunk


def fragment_bounds(rows: int, fragments: int) -> Iterator[tuple[int, int]]:
    """(start, count) of each of ``fragments`` nearly equal fragments of ``rows`` rows."""
    if not 0 < fragments <= rows:
        raise ValueError(f"need 0 < fragments <= rows, got fragments={fragments}, rows={rows}")
    edges = np.linspace(0, rows, fragments + 1).astype(np.int64)
    for start, stop in zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True):
        yield start, stop - start


def write_table(
    directory: str,
    name: str,
    *,
    rows: int,
    fragments: int,
    chunk: Chunk,
    storage_options: dict[str, str] | None = None,
) -> TableRef:
    """Create a LanceDB table of ``rows`` rows in exactly ``fragments`` fragments.

    ``create_table`` writes the first fragment and each ``add`` one more, so the
    fragment count is what was asked (checked after writing). ``directory`` may be
    an object-store URI, opened with ``storage_options``.
    """
    import lancedb

    database = lancedb.connect(directory, storage_options=storage_options)
    table = None
    for start, count in fragment_bounds(rows, fragments):
        data = chunk(start, count)
        if table is None:
            table = database.create_table(name, data=data)
        else:
            table.add(data)
    assert table is not None
    written = len(table.to_lance().get_fragments())
    if written != fragments:
        raise RuntimeError(f"table {name} has {written} fragments, expected {fragments}")
    return TableRef(directory=directory, name=name, rows=rows, fragments=fragments)
