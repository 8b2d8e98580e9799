"""Strings and binaries packed into one byte array: offsets, which are present, the values.

A worker sends a share's numeric columns through its shared-memory slot; its string
and binary columns (``rows.ByteValues``) go there too, packed: ``count + 1`` int64
offsets, then (for a column with nulls) one bit a value saying which are present, then
the values' bytes one after another, copied straight from the read. The share then holds
a ``Spans`` for the column, and the trainer unpacks the slot's array into the ``str`` /
``bytes`` values (``None`` for a null) that the pipe would have carried, copying each
value once. Over the pipe the same values were made Python objects, pickled, written,
read and unpickled. A share that finds no slot carries its packed array in its ``Spans``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from .rows import ByteValues

__all__ = ["Spans", "carried", "pack", "packable", "pieces", "shared", "size", "unpack"]

Pieces = Sequence[tuple[ByteValues, np.ndarray]]
"""A column's rows in order: (read column, rows of it) for each piece."""

_OFFSET = np.dtype(np.int64)


@dataclass(frozen=True)
class Spans:
    """In a share, for a column packed into the slot array of the same name: how many
    values it holds, whether they are strings and whether the array says which are null.
    ``array`` is the packed array itself where it travels with the share instead (no
    slot: a numpy array in the pipe, or a tensor torch sends through shared memory)."""

    count: int
    text: bool
    nulls: bool = False
    array: Any = field(default=None, compare=False, repr=False)

    @property
    def nbytes(self) -> int:
        """Bytes of the packed array travelling with the share (0 for one in a slot)."""
        return 0 if self.array is None else int(self.array.nbytes)


def pieces(parts: Sequence[Any]) -> list[tuple[ByteValues, np.ndarray]] | None:
    """A column's parts of a batch as pieces to pack, when all are strings or all binaries:
    rows of a read (an ``assemble`` part gathering ``indices`` of a ``ByteValues`` column), or
    lists of ``str`` / ``bytes`` / ``None`` (gathered already: a lagged resume's, a mixture's),
    made Arrow here. ``None``: not such a column."""
    read = [part for part in parts if isinstance(getattr(part, "column", None), ByteValues)]
    lists = [part for part in parts if type(part) is list]
    if not parts or len(read) + len(lists) != len(parts) or len({part.column.text for part in read}) > 1:
        return None
    kind = (str if read[0].column.text else bytes) if read else _first_kind(lists)
    if lists and (
        kind is None or any(type(value) not in (kind, type(None)) for part in lists for value in part)
    ):
        return None
    return [
        (part.column, part.indices)
        if type(part) is not list
        else (ByteValues(pa.chunked_array([pa.array(part, _KINDS[kind or str])])), np.arange(len(part)))
        for part in parts
    ]


_KINDS: dict[type, pa.DataType] = {str: pa.large_string(), bytes: pa.large_binary()}


def _first_kind(lists: list[list[Any]]) -> type | None:
    """``str`` or ``bytes``: the type of the first value that is not ``None``."""
    first = next((value for part in lists for value in part if value is not None), None)
    return type(first) if type(first) in _KINDS else None


def packable(columns: dict[str, list[Any]]) -> frozenset[str]:
    """The columns of a batch's parts that ``pieces`` packs: their bytes vary by batch."""
    return frozenset(name for name, parts in columns.items() if pieces(parts) is not None)


def shared(value: Any) -> Any:
    """``value``, or of a ``Spans`` carrying a numpy array, one carrying it as a tensor (torch
    sends it through shared memory, not the pipe)."""
    if isinstance(value, Spans) and isinstance(value.array, np.ndarray):
        import torch  # here: the command line plans tables without torch

        return dataclasses.replace(value, array=torch.from_numpy(value.array))
    return value


def _bitmap_bytes(count: int) -> int:
    return -(-count // 8)


def _nulls(pieces: Pieces) -> bool:
    return any(column.nulls for column, _ in pieces)


def size(pieces: Pieces) -> int:
    """Bytes ``pack`` writes for ``pieces``: the offsets, the present bits and every value."""
    count = sum(len(rows) for _, rows in pieces)
    values = sum(int(column.extents(rows)[2].sum()) for column, rows in pieces)
    return _OFFSET.itemsize * (count + 1) + (_bitmap_bytes(count) if _nulls(pieces) else 0) + values


def pack(pieces: Pieces, target: np.ndarray) -> Spans:
    """Write ``pieces`` into ``target`` (uint8, of ``size(pieces)`` bytes)."""
    count = sum(len(rows) for _, rows in pieces)
    nulls = _nulls(pieces)
    head = _OFFSET.itemsize * (count + 1)
    bits = _bitmap_bytes(count) if nulls else 0
    offsets = target[:head].view(_OFFSET)
    data = target[head + bits :]
    offsets[0] = position = row = 0
    present: list[np.ndarray] = []
    for column, rows in pieces:
        chunks, starts, lengths = column.extents(rows)
        ends = position + np.cumsum(lengths)
        offsets[row + 1 : row + 1 + len(rows)] = ends
        if column.wide:  # one copy a value: no index as large as the values
            for chunk, start, length, end in zip(
                chunks.tolist(), starts.tolist(), lengths.tolist(), ends.tolist(), strict=True
            ):
                data[end - length : end] = column.data(chunk)[start : start + length]
        else:
            _copy_narrow(column, chunks, starts, lengths, data[position:])
        if nulls:
            valid = column.valid(rows)
            present.append(np.ones(len(rows), dtype=bool) if valid is None else valid)
        position = int(ends[-1]) if len(rows) else position
        row += len(rows)
    if nulls:
        target[head : head + bits] = np.packbits(np.concatenate(present), bitorder="little")
    if position + head + bits != len(target):
        raise ValueError(f"packed {position + head + bits} bytes into an array of {len(target)}")
    return Spans(count=count, text=bool(pieces) and pieces[0][0].text, nulls=nulls)


def carried(pieces: Pieces) -> Spans:
    """``pieces`` packed into a new array that the ``Spans`` carries (a share without a slot)."""
    array = np.empty(size(pieces), dtype=np.uint8)
    return dataclasses.replace(pack(pieces, array), array=array)


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The positions [start, start + length) of each (start, length), one after another."""
    before = np.cumsum(lengths) - lengths
    return np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(starts - before, lengths)


def _copy_narrow(
    column: ByteValues, chunks: np.ndarray, starts: np.ndarray, lengths: np.ndarray, data: np.ndarray
) -> None:
    """Narrow values one after another at the start of ``data``: each chunk's at once."""
    present = np.unique(chunks).tolist()
    if len(present) == 1:
        total = int(lengths.sum())
        np.take(column.data(present[0]), _ranges(starts, lengths), out=data[:total])
        return
    places = np.cumsum(lengths) - lengths
    for chunk in present:
        mine = chunks == chunk
        data[_ranges(places[mine], lengths[mine])] = column.data(chunk)[_ranges(starts[mine], lengths[mine])]


def unpack(array: np.ndarray, spans: Spans) -> list[Any]:
    """The values ``pack`` wrote into ``array``, each copied out (``array`` may then be reused)."""
    head = _OFFSET.itemsize * (spans.count + 1)
    bits = _bitmap_bytes(spans.count) if spans.nulls else 0
    buffers = [
        pa.py_buffer(array[head : head + bits]) if spans.nulls else None,
        pa.py_buffer(array[:head]),
        pa.py_buffer(array[head + bits :]),
    ]
    kind = pa.large_string() if spans.text else pa.large_binary()
    values: list[Any] = pa.Array.from_buffers(kind, spans.count, buffers).to_pylist()
    return values
