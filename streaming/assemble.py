"""Vectorised batch assembly: the batch ``default_collate`` would build, without row dicts.

Inside a ``StreamingDataLoader`` with the default collate function and no
``transform``, the dataset yields references ``(rows, index)`` into the windows it
read instead of per-row dicts. ``assemble`` gathers each column for the whole batch
with numpy and converts it once. Numeric columns become tensors directly; every
other column is handed to ``default_collate`` as the list of values the per-row
path would have given it, so the result is identical to
``default_collate([row dicts])`` by construction.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter
from typing import Any

import numpy as np
import torch
from torch.utils.data import default_collate

from .rows import Rows

_VECTOR_KINDS = frozenset("biuf")  # bool, signed, unsigned, float: torch.as_tensor takes them as is
_UNSUPPORTED = frozenset({np.dtype(np.uint16), np.dtype(np.uint32), np.dtype(np.uint64)})


def _groups(refs: Sequence[tuple[Rows, int]]) -> list[tuple[Rows, np.ndarray, np.ndarray]]:
    """(rows, positions in the batch, indices in rows) for each window in the batch."""
    owners = list(map(itemgetter(0), refs))
    keys = np.fromiter(map(id, owners), dtype=np.uint64, count=len(refs))
    indices = np.fromiter(map(itemgetter(1), refs), dtype=np.int64, count=len(refs))
    unique, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    if len(unique) == 1:
        return [(owners[0], np.arange(len(refs)), indices)]
    order = np.argsort(inverse, kind="stable")
    cuts = np.cumsum(np.bincount(inverse, minlength=len(unique)))[:-1]
    return [
        (owners[int(first[group])], positions, indices[positions])
        for group, positions in enumerate(np.split(order, cuts))
    ]


def _vectorisable(column: Any) -> bool:
    return (
        isinstance(column, np.ndarray)
        and column.dtype.kind in _VECTOR_KINDS
        and column.dtype not in _UNSUPPORTED
        and column.dtype.isnative
    )


def _gather(groups: list[tuple[Rows, np.ndarray, np.ndarray]], column: int, size: int, as_numpy: bool) -> Any:
    arrays = [rows.columns[column] for rows, _, _ in groups]
    if all(_vectorisable(array) for array in arrays):
        first: np.ndarray = arrays[0]  # type: ignore[assignment]
        out = np.empty((size, *first.shape[1:]), dtype=first.dtype)
        for array, (_, positions, indices) in zip(arrays, groups):
            out[positions] = array[indices]  # type: ignore[call-overload]
        return out if as_numpy else torch.from_numpy(out)
    values: list[Any] = [None] * size
    for rows, positions, indices in groups:
        source = rows.columns[column]
        for position, index in zip(positions.tolist(), indices.tolist()):
            values[position] = source[index]
    try:
        return default_collate(values)
    except (TypeError, RuntimeError) as error:
        raise TypeError(_unbatchable(groups[0][0].names[column], values, error)) from error


def _unbatchable(name: str, values: list[Any], error: Exception) -> str:
    """Why column ``name`` cannot be batched, and what to do instead."""
    if any(value is None for value in values):
        return (
            f"column {name!r} has nulls, which default_collate cannot batch; skip them with "
            f"filter='{name} IS NOT NULL', or fill them in a transform= or a collate_fn="
        )
    kinds = sorted({type(value).__name__ for value in values})
    return (
        f"column {name!r} holds values default_collate cannot batch ({', '.join(kinds)}: {error}); "
        "convert them with transform= (called with each pyarrow.RecordBatch), pass a collate_fn=, "
        "or leave the column out with columns="
    )


def assemble(refs: Sequence[tuple[Rows, int]], *, as_numpy: bool = False) -> dict[str, Any]:
    """The batch ``default_collate`` would make from the referenced rows' dicts.

    With ``as_numpy``, numeric columns stay numpy arrays (``to_tensors`` finishes
    them): a worker process sends small arrays through its result pipe several
    times faster than tensors through shared memory.
    """
    groups = _groups(refs)
    names = groups[0][0].names
    return {name: _gather(groups, column, len(refs), as_numpy) for column, name in enumerate(names)}


def to_tensors(batch: dict[str, Any]) -> dict[str, Any]:
    """Turn the numpy columns of an ``assemble(..., as_numpy=True)`` batch into tensors."""
    return {
        key: torch.from_numpy(value) if isinstance(value, np.ndarray) else value
        for key, value in batch.items()
    }
