"""Arrow to samples: each column converted once per window, rows built on demand.

Numeric and bool columns become numpy arrays (a row's value is a numpy scalar),
fixed-size lists become 2-D (or deeper) numpy arrays (a row's value is an array),
variable-length lists become one numpy array per row, strings and binaries become
``str``/``bytes``. Columns with nulls or other types fall back to Python values.
Reordering copies, so the numpy data handed out is freshly allocated and writable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

Sample = dict[str, Any]


def _is_plain_numeric(type_: pa.DataType) -> bool:
    return bool(pa.types.is_integer(type_) or pa.types.is_floating(type_) or pa.types.is_boolean(type_))


def _fixed_shape(array: pa.Array) -> tuple[pa.Array, list[int]]:
    shape = []
    while pa.types.is_fixed_size_list(array.type) and array.null_count == 0:
        shape.append(array.type.list_size)
        array = array.flatten()
    return array, shape


def _convert(array: pa.Array) -> Sequence[Any]:
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
                return np.split(values, offsets[1:-1] - offsets[0])
    return array.to_pylist()


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
        fields = ", ".join(f"{name!r}: {value}" for name, value in zip(key, values))
        targets = "".join(f"{value}, " for value in values)
        code = f"lambda columns: [{{{fields}}} for {targets} in zip(*columns)]"
        builder = eval(code, {"__builtins__": {"zip": zip}})  # noqa: S307 - keys are repr()'d literals
        _BUILDERS[key] = builder
    return builder


class Rows:
    """Rows of one window in yield order, as columns converted once."""

    def __init__(self, names: Sequence[str], columns: Sequence[Sequence[Any]]) -> None:
        self.names = list(names)
        self.columns = list(columns)
        self.length = len(columns[0]) if columns else 0
        self._build = _row_builder(self.names)

    @classmethod
    def gather(cls, table: pa.Table, orders: Sequence[np.ndarray]) -> list[Rows]:
        """Convert ``table`` once and return its rows in each of ``orders``."""
        names = table.column_names
        arrays = [table.column(i).combine_chunks() for i in range(table.num_columns)]
        converted = [_convert(array) for array in arrays]
        return [cls(names, [_reorder(column, order) for column in converted]) for order in orders]

    def __len__(self) -> int:
        return self.length

    def samples(self, start: int, stop: int) -> list[Sample]:
        """Row dicts for rows [start, stop)."""
        return self._build([column[start:stop] for column in self.columns])


def _reorder(column: Sequence[Any], order: np.ndarray) -> Sequence[Any]:
    if isinstance(column, np.ndarray):
        return column[order]
    return [column[i] for i in order.tolist()]
