"""Lance reads: fragment metadata, filter indexes, rows by fragment and offset.

Each function reads a ``Table`` (``tables/table.py``), whatever its kind (a
``lance.LanceDataset`` as it is, too). Opening tables and snapshots lives in
``tables/opening.py`` and version tags in ``tables/tags.py``; their names are importable
from here too, so the rest of the package asks this module what it asks of a table.
"""

from __future__ import annotations

import atexit
import itertools
import os
import shutil
import tempfile
from collections.abc import Sequence
from concurrent.futures import Executor
from typing import Any

import numpy as np
import pyarrow as pa

from ..core.profiles import PROFILES
from .opening import (
    Snapshot,
    check_fork_safety,
    handle_options,
    latest_version,
    mark_used,
    open_snapshot,
    open_table,
    table_uri,
)
from .table import Table
from .tags import protect, release, tag_name

__all__ = [
    "FilterIndex",
    "Snapshot",
    "build_filter_index",
    "check_fork_safety",
    "column_names",
    "fragment_rows",
    "handle_options",
    "is_integer_list",
    "latest_version",
    "list_lengths",
    "open_snapshot",
    "open_table",
    "protect",
    "read_rows",
    "release",
    "row_bytes",
    "table_uri",
    "tag_name",
]


_SAMPLE_ROWS = 16
"""Rows read to measure the width of columns whose size metadata cannot tell."""
_CHECK_ABOVE = 4 << 10
"""Bytes per row above which a data-file estimate for some of the columns is checked by a read."""


def row_bytes(dataset: Table, columns: Sequence[str] | None) -> float | None:
    """Bytes a row of ``columns`` (``None``: every column) takes; ``None`` when unknown.

    Exact when every column has a fixed width. Otherwise the data files' sizes over
    their rows (every column's), or, when the files' sizes are unknown (a LanceDB
    server's table) or say the rows are wide while only some columns are read, the
    mean of the first ``_SAMPLE_ROWS`` rows of ``columns`` as read: one small read,
    the same on every rank.
    """
    schema = dataset.schema
    everything = columns is None
    names = list(schema.names) if everything else [name for name in columns or () if name in schema.names]
    if not names:
        return None
    widths = [_fixed_width(schema.field(name).type) for name in names]
    if all(width is not None for width in widths):
        return float(sum(width for width in widths if width is not None)) or None
    estimate = _file_bytes_per_row(dataset)
    if estimate is not None and (estimate <= _CHECK_ABOVE or len(names) == len(schema.names)):
        return estimate
    return _first_rows_bytes(dataset, names) or estimate


def _file_bytes_per_row(dataset: Table) -> float | None:
    """The data files' bytes over their rows, from metadata; ``None`` when a size is unknown."""
    total_bytes = total_rows = 0
    for fragment in dataset.get_fragments():
        sizes = [file.file_size_bytes for file in fragment.data_files()]
        if any(size is None for size in sizes):
            return None
        total_bytes += sum(sizes)
        total_rows += int(fragment.physical_rows)
    return total_bytes / total_rows if total_rows else None


def _first_rows_bytes(dataset: Table, names: Sequence[str]) -> float | None:
    """Mean bytes of the first rows of ``names`` as read (``None`` for an empty table)."""
    table = dataset.to_table(columns=list(names), limit=_SAMPLE_ROWS)
    return table.nbytes / table.num_rows if table.num_rows else None


def _fixed_width(type_: pa.DataType) -> int | None:
    """Bytes of one value of a fixed-width type (fixed-size lists included), else None."""
    count = 1
    while pa.types.is_fixed_size_list(type_):
        count *= type_.list_size
        type_ = type_.value_type
    try:
        bits = type_.bit_width
    except ValueError:
        return None
    return max(1, bits * count // 8)


def column_names(dataset: Table) -> list[str]:
    """Every column of the snapshot, in schema order."""
    return list(dataset.schema.names)


def is_integer_list(dataset: Table, column: str) -> bool:
    """True when ``column`` holds lists of integers (token ids): variable or fixed size."""
    import pyarrow as pa

    kind = dataset.schema.field(column).type
    lists = pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)
    return lists and pa.types.is_integer(kind.value_type)


def list_lengths(dataset: Table, column: str, *, limit: int, filter: str | None) -> np.ndarray:  # noqa: A002
    """Lengths of the first ``limit`` lists of ``column`` (matching ``filter``), in storage order."""
    import pyarrow.compute as pc

    table = dataset.to_table(columns=[column], filter=filter, limit=limit)
    lengths = pc.list_value_length(table.column(column)).fill_null(0)
    return np.asarray(lengths.to_numpy(zero_copy_only=False), dtype=np.int64)


def fragment_rows(dataset: Table) -> tuple[list[int], list[int]]:
    """Fragment ids in storage order and their live row counts, from metadata only."""
    ids, rows = [], []
    for fragment in dataset.get_fragments():
        ids.append(int(fragment.fragment_id))
        rows.append(int(fragment.physical_rows) - int(fragment.num_deletions))
    return ids, rows


class FilterIndex:
    """Live-row offsets of the rows matching a filter, per fragment, stored compactly.

    ``offsets[starts[i]:starts[i + 1]]`` are the matching live offsets of fragment
    ``ids[i]``, ascending (4 bytes a matching row). Pickling writes the arrays to
    a temporary folder once and sends only its path; the receiving process
    memory-maps them instead of copying or rebuilding them. The folder is removed
    when the process that wrote it exits.
    """

    _FIELDS = ("ids", "starts", "offsets")

    def __init__(self, ids: np.ndarray, starts: np.ndarray, offsets: np.ndarray) -> None:
        self.ids, self.starts, self.offsets = ids, starts, offsets
        self._folder: str | None = None

    def counts(self) -> list[int]:
        """Matching rows per fragment, in the order of ``ids``."""
        return np.diff(self.starts).tolist()

    def live_offsets(self, fragment_id: int, planned: np.ndarray) -> np.ndarray:
        """Map indices among a fragment's matching rows to its live-row offsets."""
        index = int(np.searchsorted(self.ids, fragment_id))
        result: np.ndarray = self.offsets[self.starts[index] + planned]
        return result

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        if self._folder is None:
            folder = tempfile.mkdtemp(prefix="lance-streaming-filter-")
            atexit.register(shutil.rmtree, folder, True)
            for name in self._FIELDS:
                np.save(os.path.join(folder, f"{name}.npy"), getattr(self, name))
            self._folder = folder
        return (_map_filter_index, (self._folder,))


def _map_filter_index(folder: str) -> FilterIndex:
    arrays = [np.load(os.path.join(folder, f"{name}.npy"), mmap_mode="r") for name in FilterIndex._FIELDS]
    index = FilterIndex(*arrays)
    index._folder = folder
    return index


def build_filter_index(dataset: Table, predicate: str) -> FilterIndex:
    """Find the live offsets of every row matching ``predicate`` with one scan."""
    mark_used()
    try:
        matched = dataset.scanner(filter=predicate, columns=[], with_row_address=True).to_table()
    except Exception as error:  # Lance raises several types for a bad predicate
        raise ValueError(
            f"filter={predicate!r} could not be applied to table {dataset.uri!r}: {error}; "
            "pass an SQL predicate over the table's columns"
        ) from None
    addresses = np.sort(matched.column("_rowaddr").to_numpy().astype(np.uint64))
    fragments = (addresses >> np.uint64(32)).astype(np.int64)
    physical = (addresses & np.uint64(0xFFFFFFFF)).astype(np.int64)
    ids, _ = fragment_rows(dataset)
    ordered_ids = np.array(sorted(ids), dtype=np.int64)
    starts = np.searchsorted(fragments, ordered_ids, side="left")
    starts = np.append(starts, len(fragments)).astype(np.int64)
    offsets = physical.copy()
    for index, fragment_id in enumerate(ordered_ids):
        lo, hi = int(starts[index]), int(starts[index + 1])
        fragment = dataset.get_fragment(int(fragment_id))
        if hi > lo and int(fragment.num_deletions) > 0:
            offsets[lo:hi] = np.searchsorted(_live_physical(fragment), physical[lo:hi])
    return FilterIndex(ids=ordered_ids, starts=starts, offsets=offsets.astype(np.uint32))


def _live_physical(fragment: Any) -> np.ndarray:
    table = fragment.scanner(columns=[], with_row_address=True).to_table()
    addresses = table.column("_rowaddr").to_numpy().astype(np.uint64)
    result: np.ndarray = np.sort((addresses & np.uint64(0xFFFFFFFF)).astype(np.int64))
    return result


def read_rows(
    dataset: Table,
    pieces: Sequence[tuple[int, np.ndarray]],
    *,
    columns: Sequence[str],
    filter_index: FilterIndex | None,
    executor: Executor | None = None,
    take_rows: int = PROFILES["local"].take_rows,
) -> pa.Table:
    """Read ``pieces`` (fragment id, ascending planned offsets) and concatenate them.

    One ``take`` per fragment (Lance reads runs of consecutive offsets as ranges).
    With ``executor`` pieces longer than ``take_rows`` offsets (unless 0) are cut
    into consecutive parts of about equal size, one take each, and the takes run on
    its threads, several at once: a take releases the GIL while Lance reads, so they
    overlap each other and the trainer. Either way the rows come back in the order
    of ``pieces``.
    """
    names = list(columns)

    def take(piece: tuple[int, np.ndarray]) -> pa.Table:
        fragment_id, planned = piece
        offsets = planned if filter_index is None else filter_index.live_offsets(fragment_id, planned)
        fragment = dataset.get_fragment(int(fragment_id))
        return fragment.take(np.asarray(offsets, dtype=np.int64), columns=names)

    if executor is None:
        tables = [take(piece) for piece in pieces]
    else:
        tables = list(executor.map(take, _cut_pieces(pieces, take_rows)))
    if len(tables) == 1:
        return tables[0]
    return pa.concat_tables(tables)


def _cut_pieces(pieces: Sequence[tuple[int, np.ndarray]], take_rows: int) -> list[tuple[int, np.ndarray]]:
    """``pieces`` with any longer than ``take_rows`` offsets cut into consecutive parts
    of about equal size (no short tail take), none longer than ``take_rows``."""
    if take_rows <= 0:
        return list(pieces)
    result = []
    for fragment_id, planned in pieces:
        parts = max(1, -(-len(planned) // take_rows))
        bounds = np.linspace(0, len(planned), parts + 1).round().astype(np.int64).tolist()
        for start, stop in itertools.pairwise(bounds):
            result.append((fragment_id, planned[start:stop]))
    return result
