"""Blob columns: large binaries Lance stores out of line, read as bytes or lazy handles.

A column is a blob column when its field is Lance's blob type (``lance.blob.v2``,
what a ``large_binary`` field with ``lance-encoding:blob`` metadata becomes in file
format 2.2) or a ``large_binary`` field carrying that metadata (formats 2.0, 2.1).
A plain Lance read of such a column returns descriptors, and a take that mixes it
with other columns fails in Lance's decoder, so a read with blob columns goes
through here: the other columns with the usual per-fragment takes, each blob
column with batched Lance blob reads of the window's rows (rows addressed by their
index among the snapshot's live rows, which a pinned version never changes).

``blobs="bytes"`` gives each row's bytes (``None`` for a null blob), the same
values the same bytes stored as a plain ``large_binary`` column would give.
``blobs="handles"`` gives a ``BlobHandle`` per row: a small picklable value that
opens a seekable file-like ``lance.BlobFile`` in whichever process calls
``open()``, reading only the ranges that are read.

Refused at construction (``TypeError`` naming the column, its type and the fix):
a blob field nested in a struct or list (Lance cannot read it), and a blob column
with ``pack_sequences``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from ..tables import source
from ..tables.table import Table
from . import blobhandle
from .blobhandle import HandleType

__all__ = [
    "BLOB_MODES",
    "BlobRead",
    "blob_columns",
    "check_columns",
    "read_rows",
    "row_bytes",
]

BLOB_MODES = ("bytes", "handles")
"""What a sample holds for a blob column: its bytes, or a ``BlobHandle``."""

_BLOB_EXTENSION = "lance.blob.v2"
_BLOB_METADATA = (b"lance-encoding:blob", b"true")
PART_ROWS = 64
"""Blobs one thread opens and reads at once (local tables)."""
_SAMPLE_ROWS = 1_024
"""Blob descriptors read to estimate a blob column's mean size."""
_MAX_STARTS = 8
_STARTS: dict[tuple[str, int, int], dict[int, int]] = {}
_LOCK = threading.Lock()


@dataclass(frozen=True)
class BlobRead:
    """How a read delivers blob columns: which columns are blobs, and as what."""

    columns: tuple[str, ...]
    handles: bool = False


def _is_blob(field: pa.Field) -> bool:
    if isinstance(field.type, pa.BaseExtensionType) and field.type.extension_name == _BLOB_EXTENSION:
        return True
    metadata = field.metadata or {}
    return bool(metadata.get(_BLOB_METADATA[0]) == _BLOB_METADATA[1])


def _nested_blob(type_: pa.DataType) -> bool:
    """True when a blob field sits anywhere inside ``type_`` (a struct or list of them)."""
    if isinstance(type_, pa.BaseExtensionType):
        return False
    children = [type_.field(i) for i in range(type_.num_fields)]
    return any(_is_blob(child) or _nested_blob(child.type) for child in children)


def blob_columns(dataset: Table, columns: Sequence[str]) -> tuple[str, ...]:
    """The blob columns among ``columns`` of the snapshot, in the order given."""
    schema = dataset.schema
    return tuple(name for name in columns if _is_blob(schema.field(name)))


def check_columns(
    snapshot: source.Snapshot, dataset: Table, columns: Sequence[str], *, mode: str, packing: bool
) -> BlobRead | None:
    """How to read the blob columns of ``columns``; ``None`` when there are none.

    Also makes ``snapshot`` the one this process's ``BlobHandle``s of it open (with
    its storage options).

    Raises:
        TypeError: a column holds blob fields inside a struct or list, a blob column
            is to be packed or read from a remote LanceDB table; the message names the
            column, its type and the fix.
    """
    schema = dataset.schema
    for name in columns:
        if _nested_blob(schema.field(name).type):
            raise TypeError(
                f"column {name!r} has type {schema.field(name).type} with a blob field inside it, which "
                "Lance cannot read back; store each blob as a top-level column (a large_binary field "
                "with lance-encoding:blob metadata), or leave this column out with columns=[...]"
            )
    found = blob_columns(dataset, columns)
    if not found:
        return None
    if not dataset.reads_blobs:
        raise TypeError(
            f"column {found[0]!r} of the remote table {snapshot.uri} is a blob column "
            f"({schema.field(found[0]).type}), and blob bytes are not read through a LanceDB server "
            "yet; leave it out with columns=[...], or read the table's Lance dataset directly "
            "(its URI and storage_options)"
        )
    if packing:
        raise TypeError(
            f"pack_sequences packs a column of token ids, but column {found[0]!r} is a blob column "
            f"({schema.field(found[0]).type}); pack a list-of-integers column, with columns=[<token column>]"
        )
    blobhandle.remember(snapshot, replace=True)
    return BlobRead(found, handles=mode == "handles")


def row_bytes(dataset: Table, columns: Sequence[str] | None) -> float | None:
    """Bytes a row of ``columns`` takes, blobs included (``None``: not known).

    ``source.row_bytes`` sizes the other columns; each blob column adds the mean
    size of its first ``_SAMPLE_ROWS`` blobs (from their descriptors, without
    reading a blob), since blobs stored in files of their own are in no data file.
    """
    names = [name for name in columns or dataset.schema.names if name in dataset.schema.names]
    found = blob_columns(dataset, names)
    base = source.row_bytes(dataset, [name for name in names if name not in found])
    if not found:
        return base
    total = base or 0.0
    for name in found:
        descriptors = dataset.to_table(columns=[name], limit=_SAMPLE_ROWS).column(name)
        sizes = pa.chunked_array(
            [chunk.field("size") for chunk in descriptors.chunks], pa.uint64()
        ).fill_null(0)
        total += float(np.mean(sizes.to_numpy())) if len(sizes) else 0.0
    return total


def _starts(dataset: Table, snapshot: source.Snapshot) -> dict[int, int]:
    """Each fragment's first index among the snapshot's live rows (storage order)."""
    key = (snapshot.uri, snapshot.version, os.getpid())
    with _LOCK:
        starts = _STARTS.get(key)
        if starts is None:
            ids, rows = source.fragment_rows(dataset)
            ends = np.cumsum(rows, dtype=np.int64)
            starts = {
                fragment: int(end) - count for fragment, end, count in zip(ids, ends, rows, strict=True)
            }
            _STARTS[key] = starts
        return starts


def _indices(
    starts: dict[int, int],
    pieces: Sequence[tuple[int, np.ndarray]],
    filter_index: source.FilterIndex | None,
) -> np.ndarray:
    parts = []
    for fragment_id, planned in pieces:
        offsets = planned if filter_index is None else filter_index.live_offsets(fragment_id, planned)
        parts.append(np.asarray(offsets, dtype=np.int64) + starts[int(fragment_id)])
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _read_blobs(dataset: Table, column: str, indices: np.ndarray, executor: Executor | None) -> list[Any]:
    """The bytes (or None) of the blobs at ``indices``, in order.

    One batched Lance read (``read_blobs``, which merges neighbouring blobs into fewer
    requests) of all of them, or with ``executor`` (a local table's reads) one of each
    part of ``PART_ROWS`` blobs, several at once on its threads: measured about twice
    as fast on local disk. One call per part, not one per blob: each call waits for
    the GIL once, so threads that transform meanwhile slow it down little.
    """
    selected = pa.array(indices, pa.uint64())

    def part(start: int, stop: int) -> list[Any]:
        found = dataset.read_blobs(column, indices=selected[start:stop], preserve_order=True)
        return [data for _, data in found]

    if executor is None:
        return part(0, len(indices))
    starts = range(0, len(indices), PART_ROWS)
    parts = executor.map(lambda start: part(start, start + PART_ROWS), starts)
    return [value for values in parts for value in values]


def _bytes_column(
    dataset: Table, column: str, indices: np.ndarray, executor: Executor | None
) -> pa.Array | pa.ChunkedArray:
    """The blobs at ``indices`` as ``large_binary``: without nulls, one chunk per blob over
    the very bytes Lance read (no copy); else one array, copied once into a single data
    buffer (a builder appending value by value would grow it again and again)."""
    if len(indices) == 0:
        return pa.array([], pa.large_binary())
    values = _read_blobs(dataset, column, indices, executor)
    if None not in values:
        return pa.chunked_array([_one(value) for value in values], pa.large_binary())
    lengths = np.fromiter((0 if v is None else len(v) for v in values), dtype=np.int64, count=len(values))
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    nulls = values.count(None)
    validity = pa.array([v is not None for v in values]).buffers()[1] if nulls else None
    data = pa.py_buffer(b"".join([v for v in values if v is not None]))
    buffers = [validity, pa.py_buffer(offsets), data]
    return pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(values), buffers, null_count=nulls)


def _one(value: bytes) -> pa.Array:
    """A one-value ``large_binary`` array over ``value``'s own memory."""
    offsets = pa.py_buffer(np.array([0, len(value)], dtype=np.int64))
    return pa.LargeBinaryArray.from_buffers(pa.large_binary(), 1, [None, offsets, pa.py_buffer(value)])


def _handle_column(dataset: Table, snapshot: source.Snapshot, column: str, indices: np.ndarray) -> pa.Array:
    files = dataset.take_blobs(column, indices=pa.array(indices, pa.uint64())) if len(indices) else []
    valid = [blob is not None for blob in files]
    storage = pa.StructArray.from_arrays(
        [
            pa.array(indices, pa.uint64()),
            pa.array([blob.size() if blob is not None else 0 for blob in files], pa.uint64()),
        ],
        names=["index", "size"],
        mask=pa.array([not ok for ok in valid], pa.bool_()),
    )
    return pa.ExtensionArray.from_storage(HandleType(snapshot.uri, snapshot.version, column), storage)


def read_rows(
    snapshot: source.Snapshot,
    reader: Table,
    pieces: Sequence[tuple[int, np.ndarray]],
    *,
    columns: Sequence[str],
    blobs: BlobRead,
    filter_index: source.FilterIndex | None,
    executor: Executor | None = None,
    take_rows: int = 0,
) -> pa.Table:
    """``source.read_rows`` for a read with blob columns: the same rows, in the same order.

    The other columns are read by ``source.read_rows`` through ``reader`` (the local
    cache, when there is one); each blob column's rows from the snapshot itself: on
    ``executor``'s threads when ``take_rows`` > 0 (a local table's profile), else in
    one batched Lance read (see ``_read_blobs``).
    """
    blobhandle.remember(snapshot, replace=False)
    dataset = source.open_snapshot(snapshot)
    indices = _indices(_starts(dataset, snapshot), pieces, filter_index)
    plain = [name for name in columns if name not in blobs.columns]
    arrays: dict[str, pa.Array | pa.ChunkedArray] = {}
    if plain:
        table = source.read_rows(
            reader, pieces, columns=plain, filter_index=filter_index, executor=executor, take_rows=take_rows
        )
        arrays.update((name, table.column(name)) for name in plain)
    for name in blobs.columns:
        if blobs.handles:
            arrays[name] = _handle_column(dataset, snapshot, name, indices)
        else:
            arrays[name] = _bytes_column(dataset, name, indices, executor if take_rows > 0 else None)
    return pa.table({name: arrays[name] for name in columns})
