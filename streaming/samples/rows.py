"""Arrow to samples: each column converted once per read, rows gathered on demand.

Numeric and bool columns become numpy arrays (a row's value is a numpy scalar),
fixed-size lists become 2-D (or deeper) numpy arrays (a row's value is an array),
variable-length lists become one numpy array per row, strings and binaries stay as
read (``ByteValues``) and become ``str``/``bytes`` as their rows are gathered. Columns
with nulls or other types fall back to Python values.

The converted columns stay in storage order, shared by every window of one read;
a window only holds its gather order. Rows are gathered when they are handed
out (a chunk of row dicts, or a whole columnar batch), so each row is copied once,
and the numpy data handed out is freshly allocated and writable.

One idea in one module: how a read's columns become values; ``Rows`` and
``ByteValues`` share its conversion and gather rules, so they stay together.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = ["NOT_MINE", "ByteValues", "Column", "Rows", "Sample", "Storage", "gather"]

Sample = dict[str, Any]
Column = np.ndarray | list[Any]
"""A converted column: a numpy array (rows along the first axis) or a list of values."""


class _NotMine:
    """The type of ``NOT_MINE``."""

    def __repr__(self) -> str:
        return "NOT_MINE"


NOT_MINE = _NotMine()
"""Stands for a sample whose row another worker reads (a window of one ``Part``'s rows)."""


def _is_plain_numeric(type_: pa.DataType) -> bool:
    return bool(pa.types.is_integer(type_) or pa.types.is_floating(type_) or pa.types.is_boolean(type_))


def _fixed_shape(array: pa.Array) -> tuple[pa.Array, list[int]]:
    shape = []
    while pa.types.is_fixed_size_list(array.type) and array.null_count == 0:
        shape.append(array.type.list_size)
        array = array.flatten()
    return array, shape


def _convert(array: pa.Array) -> Column:
    """Convert one column; numpy results may share memory with Arrow (read-only)."""
    type_ = array.type
    if array.null_count == 0:
        if _is_plain_numeric(type_):
            return array.to_numpy(zero_copy_only=False)
        if pa.types.is_fixed_size_list(type_):
            flat, shape = _fixed_shape(array)
            if _is_plain_numeric(flat.type) and flat.null_count == 0:
                return flat.to_numpy(zero_copy_only=False).reshape(len(array), *shape)
        if (pa.types.is_list(type_) or pa.types.is_large_list(type_)) and _is_plain_numeric(type_.value_type):
            flat = array.flatten()
            if flat.null_count == 0:
                offsets = array.offsets.to_numpy()
                values = flat.to_numpy(zero_copy_only=False).copy()
                return list(np.split(values, offsets[1:-1] - offsets[0]))
    result: list[Any] = array.to_pylist()
    return result


def _column(chunked: pa.ChunkedArray) -> Column | ByteValues:
    """One converted column: a read has one chunk per fragment, joined by one copy.

    The copy goes through Arrow's memory pool (``combine_chunks``), which hands
    large buffers back after use; a numpy concatenation measured the same speed
    but left the process's peak RSS growing with the number of reads (glibc
    keeps freed large blocks). A single chunk is converted without a copy, and so
    are strings and binaries: they stay as read (``ByteValues``), each value copied
    out once, when its row is gathered.
    """
    if _python_values(chunked.type):
        return ByteValues(chunked)
    if chunked.num_chunks == 1:
        return _convert(chunked.chunk(0))
    return _convert(chunked.combine_chunks())


WIDE_VALUE_BYTES = 4 << 10
"""Strings and binaries at least this wide on average (images, audio) are copied out one
value at a time as their rows are gathered; narrower ones all at once, at the first gather
(``ByteValues.take``)."""


class ByteValues:
    """A column of strings or binaries (``large_`` ones too), kept as read; values copied
    out when gathered.

    Converting a whole read of images to ``bytes`` before its first batch would copy it
    all at once (and hold both copies); here each gathered wide value is copied once, when
    its batch is made (narrow ones, cheap to hold twice, are converted at the first gather).
    A worker packs the rows of its share from here into shared memory (``spans``) without
    making Python values at all.
    """

    def __init__(self, chunked: pa.ChunkedArray) -> None:
        self._type = chunked.type
        self._chunks = [chunk for chunk in chunked.chunks if len(chunk)]
        lengths = [len(chunk) for chunk in self._chunks]
        self._starts = np.cumsum([0, *lengths[:-1]], dtype=np.int64)
        self._length = sum(lengths)
        self._offset_cache: dict[int, np.ndarray] = {}
        self._valid_cache: dict[int, np.ndarray] = {}
        self._python: list[Any] | None = None
        self.wide = bool(self._length) and chunked.nbytes >= WIDE_VALUE_BYTES * self._length
        """Values of ``WIDE_VALUE_BYTES`` or more on average: copied out one at a time."""
        self.nulls = any(chunk.null_count for chunk in self._chunks)
        """Whether any value is null (``None`` when gathered)."""

    def __len__(self) -> int:
        return self._length

    @property
    def text(self) -> bool:
        """Whether the values are strings (else binaries)."""
        return bool(pa.types.is_string(self._type) or pa.types.is_large_string(self._type))

    def extents(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(chunk, first byte, byte length) of each value at ``indices`` in ``data(chunk)``;
        a null's length is 0."""
        rows = self._checked(indices)
        which, within = self._located(rows)
        starts = np.empty(len(rows), dtype=np.int64)
        stops = np.empty(len(rows), dtype=np.int64)
        for chunk in np.unique(which).tolist():
            mine = which == chunk
            offsets = self._offsets(chunk)
            starts[mine] = offsets[within[mine]]
            stops[mine] = offsets[within[mine] + 1]
        lengths = stops - starts
        valid = self.valid(indices)
        if valid is not None:
            lengths[~valid] = 0
        return which, starts, lengths

    def valid(self, indices: np.ndarray) -> np.ndarray | None:
        """Which values at ``indices`` are present (not null); ``None``: all of them."""
        if not self.nulls:
            return None
        rows = self._checked(indices)
        which, within = self._located(rows)
        found = np.ones(len(rows), dtype=bool)
        for chunk in np.unique(which).tolist():
            present = self._present(chunk)
            if present is not None:
                mine = which == chunk
                found[mine] = present[within[mine]]
        return found

    def _present(self, chunk: int) -> np.ndarray | None:
        """Chunk ``chunk``'s present values (made once, then kept); ``None``: no null."""
        if not self._chunks[chunk].null_count:
            return None
        found = self._valid_cache.get(chunk)
        if found is None:
            array = self._chunks[chunk].is_valid()
            found = self._valid_cache[chunk] = array.to_numpy(zero_copy_only=False)
        return found

    def data(self, chunk: int) -> np.ndarray:
        """Chunk ``chunk``'s value bytes, as read (no copy; read-only)."""
        array = self._chunks[chunk]
        return np.frombuffer(array.buffers()[2], dtype=np.uint8)

    def _offsets(self, chunk: int) -> np.ndarray:
        """Chunk ``chunk``'s value offsets into ``data(chunk)`` (made once, then kept)."""
        found = self._offset_cache.get(chunk)
        if found is None:
            array = self._chunks[chunk]
            large = pa.types.is_large_string(array.type) or pa.types.is_large_binary(array.type)
            offsets = np.frombuffer(array.buffers()[1], dtype=np.int64 if large else np.int32)
            found = self._offset_cache[chunk] = offsets[array.offset : array.offset + len(array) + 1].astype(
                np.int64
            )
        return found

    def _checked(self, indices: np.ndarray) -> np.ndarray:
        rows = np.asarray(indices, dtype=np.int64)
        if len(rows) and not 0 <= int(rows.min()) <= int(rows.max()) < self._length:
            raise IndexError(f"rows {rows.min()}..{rows.max()} of a read of {self._length} rows")
        return rows

    def _located(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(chunk, row within it) of each of ``rows``."""
        which = np.searchsorted(self._starts, rows, side="right") - 1
        return which, rows - self._starts[which]

    def take(self, indices: np.ndarray) -> list[Any]:
        """The values at ``indices``, as ``bytes`` / ``str`` (``None`` for a null)."""
        rows = self._checked(indices)
        if self.wide:
            which, within = self._located(rows)
            chunks = self._chunks  # one value at a time: each copied once
            return [chunks[c][i].as_py() for c, i in zip(which.tolist(), within.tolist(), strict=True)]
        values = self._values()
        return [values[i] for i in rows.tolist()]

    def _values(self) -> list[Any]:
        """Every value of a narrow column as ``str`` / ``bytes`` (made at the first ``take``,
        then kept: a worker that packs its rows never makes them)."""
        if self._python is None:
            values: list[Any] = []
            for chunk in self._chunks:
                values.extend(chunk.to_pylist())
            self._python = values
        return self._python


def _python_values(type_: pa.DataType) -> bool:
    """True for the types that convert to Python values (strings, binaries), never numpy."""
    return bool(
        pa.types.is_string(type_)
        or pa.types.is_large_string(type_)
        or pa.types.is_binary(type_)
        or pa.types.is_large_binary(type_)
    )


def gather(column: Column | ByteValues, indices: np.ndarray) -> Column:
    """``column``'s values at ``indices``: a fresh numpy array, or a list."""
    if isinstance(column, ByteValues):
        return column.take(indices)
    if isinstance(column, np.ndarray):
        if column.ndim > 1:
            return np.take(column, indices, axis=0)  # faster than fancy indexing for rows
        return column[indices]
    return [column[i] for i in indices.tolist()]


_BUILDERS: dict[tuple[str, ...], Callable[[Sequence[Sequence[Any]]], list[Sample]]] = {}


def _row_builder(names: Sequence[str]) -> Callable[[Sequence[Sequence[Any]]], list[Sample]]:
    """A function turning column slices into row dicts with the keys as literals.

    Generated once per column set (as ``collections.namedtuple`` does): a dict
    display with constant keys builds rows about twice as fast as ``dict(zip())``.
    """
    key = tuple(names)
    builder = _BUILDERS.get(key)
    if builder is None:
        values = [f"v{i}" for i in range(len(key))]
        fields = ", ".join(f"{name!r}: {value}" for name, value in zip(key, values, strict=True))
        targets = "".join(f"{value}, " for value in values)
        code = f"lambda columns: [{{{fields}}} for {targets} in zip(*columns)]"
        builder = eval(code, {"__builtins__": {"zip": zip}})  # noqa: S307 - keys are repr()'d literals
        _BUILDERS[key] = builder
    return builder


class Storage:
    """The converted columns of one read, in storage order, shared by its windows.

    Made of a table (``convert``), the columns are converted at their first use, by
    whoever gathers rows first (the consumer): a read ends as its takes land, so the
    next read starts that much sooner, and the conversion runs while it does.
    """

    def __init__(
        self,
        names: Sequence[str],
        columns: Sequence[Any] | None = None,
        *,
        table: pa.Table | None = None,
        converted: Callable[[float], None] | None = None,
    ) -> None:
        self.names = list(names)
        self._columns: list[Any] | None = None if columns is None else list(columns)
        self._table, self._converted = table, converted
        self._lock = threading.Lock()

    @classmethod
    def convert(cls, table: pa.Table, *, converted: Callable[[float], None] | None = None) -> Storage:
        """``table``'s columns, each converted once at the first use of ``columns``;
        ``converted(seconds)`` is told how long that took."""
        return cls(table.column_names, table=table, converted=converted)

    @property
    def columns(self) -> list[Any]:
        """Every converted column (converted now if this is their first use)."""
        if self._columns is None:
            with self._lock:
                if self._columns is None:
                    start, table = time.perf_counter(), self._table
                    assert table is not None
                    self._columns = [_column(table.column(i)) for i in range(table.num_columns)]
                    self._table = None  # only the converted columns are kept
                    if self._converted is not None:
                        self._converted(time.perf_counter() - start)
        return self._columns


class Rows:
    """Rows of one window in yield order.

    ``storage`` holds the converted columns (shared with the other windows of the
    same read) and ``order`` which of its rows come at each position.
    """

    def __init__(
        self, names: Sequence[str], *, storage: Storage, order: np.ndarray, parted: bool = False
    ) -> None:
        self.names = list(names)
        self.storage = storage
        self.order: np.ndarray = order
        self.length = len(order)
        self.parted = parted
        """Only one ``Part``'s rows were read: ``order`` holds ``NOT_READ`` for the others'."""
        self._columns: list[Any] | None = None
        self._build = _row_builder(self.names)

    @classmethod
    def gather(
        cls,
        table: pa.Table,
        orders: Sequence[np.ndarray],
        *,
        converted: Callable[[float], None] | None = None,
        parted: bool = False,
    ) -> list[Rows]:
        """``table``'s rows in each of ``orders`` (no copy yet; the columns are converted
        once, at their first use, and ``converted(seconds)`` told how long it took).
        ``parted``: the orders hold ``NOT_READ`` for rows another reader has."""
        storage = Storage.convert(table, converted=converted)
        return [
            cls(storage.names, storage=storage, order=np.asarray(order), parted=parted) for order in orders
        ]

    def __len__(self) -> int:
        return self.length

    @property
    def columns(self) -> list[Any]:
        """Every column in yield order (gathered on first use, then kept)."""
        if self._columns is None:
            self._columns = [self.column(index, 0, self.length) for index in range(len(self.names))]
        return self._columns

    def indices(self, start: int, stop: int) -> np.ndarray:
        """Rows of ``storage`` at positions [start, stop)."""
        result: np.ndarray = self.order[start:stop]
        return result

    def mine(self, start: int, stop: int) -> np.ndarray | None:
        """Which positions of [start, stop) were read here (``None``: all of them)."""
        return self.indices(start, stop) >= 0 if self.parted else None

    def column(self, index: int, start: int, stop: int) -> Any:
        """Column ``index`` at positions [start, stop), freshly gathered (or sliced); of a
        ``parted`` window, only the positions read here."""
        indices = self.indices(start, stop)
        if self.parted:
            return gather(self.storage.columns[index], indices[indices >= 0])
        if self._columns is not None:
            return self._columns[index][start:stop]
        return gather(self.storage.columns[index], indices)

    def samples(self, start: int, stop: int) -> list[Any]:
        """Row dicts for rows [start, stop); of a ``parted`` window, ``NOT_MINE`` for the
        rows another reader has."""
        built = self._build([self.column(index, start, stop) for index in range(len(self.names))])
        mine = self.mine(start, stop)
        if mine is None:
            return built
        result: list[Any] = [NOT_MINE] * (stop - start)
        for place, sample in zip(np.flatnonzero(mine).tolist(), built, strict=True):
            result[place] = sample
        return result
