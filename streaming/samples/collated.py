"""A batch's pieces made into the batch ``default_collate`` would build, without row dicts.

``assemble`` cuts batches of interleaved rows as per-column pieces (``Gathered``:
rows of a read's storage column, not yet copied); ``finish`` copies each numeric
column's rows out of the read's storage with one gather per batch (the only copy
after the read is converted), or into a worker's shared-memory slot of ``layout``.
Numeric columns become tensors directly; every other column is handed to
``default_collate`` as the list of values the per-row path would give it, so the
result is identical to ``default_collate([row dicts])`` by construction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from . import spans
from .rows import gather

__all__ = ["Gathered", "collate_values", "finish", "layout", "to_tensors", "vectorisable"]

_VECTOR_KINDS = frozenset("biuf")  # bool, signed, unsigned, float: torch.as_tensor takes them as is
_UNSUPPORTED = frozenset({np.dtype(np.uint16), np.dtype(np.uint32), np.dtype(np.uint64)})


def vectorisable(column: Any) -> bool:
    """Whether ``column`` is a numpy array of a kind ``torch.as_tensor`` takes as it is."""
    return (
        isinstance(column, np.ndarray)
        and column.dtype.kind in _VECTOR_KINDS
        and column.dtype not in _UNSUPPORTED
        and column.dtype.isnative
    )


@dataclass(frozen=True)
class Gathered:
    """Rows ``indices`` of a storage column: copied only when the batch is finished."""

    column: Any
    indices: np.ndarray

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, part: slice) -> Gathered:
        return Gathered(self.column, self.indices[part])

    def values(self) -> Any:
        """The rows themselves, freshly gathered."""
        return gather(self.column, self.indices)


def layout(pieces: dict[str, list[Any]]) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    """The dtype and shape of each column ``finish`` makes a numpy array of, worked out
    without copying a row (so a worker can hand ``finish`` the arrays to fill)."""
    found: dict[str, tuple[np.dtype, tuple[int, ...]]] = {}
    for name, parts in pieces.items():
        packed = spans.pieces(parts)
        if packed is not None:  # packed: offsets, then the values (``spans``)
            found[name] = (np.dtype(np.uint8), (spans.size(packed),))
            continue
        columns = [part.column if isinstance(part, Gathered) else part for part in parts]
        first: Any = columns[0] if columns else None
        if not vectorisable(first):
            continue
        kind = (first.dtype, first.shape[1:])
        if all(
            column is first or (vectorisable(column) and (column.dtype, column.shape[1:]) == kind)
            for column in columns
        ):
            found[name] = (first.dtype, (sum(len(part) for part in parts), *kind[1]))
    return found


def finish(
    pieces: dict[str, list[Any]], *, as_numpy: bool = False, out: dict[str, np.ndarray] | None = None
) -> dict[str, Any]:
    """The batch ``default_collate`` would make of these rows' dicts.

    With ``as_numpy`` (a worker's share), numeric columns stay numpy arrays and string and
    binary columns are packed (``spans.Spans`` carrying the array), for the trainer to
    finish (``to_tensors``, ``spans.unpack``, ``collate_values``): a worker sends them
    through its shared-memory slots (``transfer``) or its result pipe, both several times
    faster than torch's one shared-memory file per tensor or pickling each value. ``out``
    holds arrays of ``layout`` to write into instead (a worker's slot); the batch then
    holds them, and a ``spans.Spans`` without its array for each column packed there.
    """
    import torch  # here, not at the top: planning a table (the command line) never imports torch

    batch: dict[str, Any] = {}
    for name, parts in pieces.items():
        packed = spans.pieces(parts) if as_numpy or out is not None else None
        if packed is not None:
            batch[name] = (
                spans.pack(packed, out[name]) if out is not None and name in out else spans.carried(packed)
            )
            continue
        if out is not None and name in out:
            batch[name] = _fill(parts, out[name])
            continue
        array = _gather_once(parts)
        if array is None:
            parts = [part.values() if isinstance(part, Gathered) else part for part in parts]
            if all(vectorisable(part) for part in parts):
                # a fresh, writable, contiguous copy, as default_collate gives
                array = np.array(parts[0]) if len(parts) == 1 else np.concatenate(parts)
        if array is not None:
            batch[name] = array if as_numpy else torch.from_numpy(array)
        else:
            batch[name] = collate_values(name, [value for part in parts for value in part])
    return batch


def collate_values(name: str, values: list[Any]) -> Any:
    """``default_collate`` of column ``name``'s values, in the batch's order (for strings and
    binaries the list itself); a ``TypeError`` naming the column and the fix when it fails."""
    from torch.utils.data import default_collate

    try:
        return default_collate(values)
    except (TypeError, RuntimeError) as error:
        raise TypeError(_unbatchable(name, values, error)) from error


def _gather_once(parts: list[Any]) -> np.ndarray | None:
    """One fresh array of a numeric column whose pieces all gather from one storage column."""
    first = parts[0]
    if not isinstance(first, Gathered) or not vectorisable(first.column):
        return None
    if not all(isinstance(part, Gathered) and part.column is first.column for part in parts):
        return None
    indices = first.indices if len(parts) == 1 else np.concatenate([part.indices for part in parts])
    result: np.ndarray = gather(first.column, indices)  # type: ignore[assignment]
    return result


def _fill(parts: list[Any], target: np.ndarray) -> np.ndarray:
    """Write a numeric column's parts into ``target`` (of their ``layout``), one after another."""
    first = parts[0]
    if isinstance(first, Gathered) and all(
        isinstance(p, Gathered) and p.column is first.column for p in parts
    ):
        indices = first.indices if len(parts) == 1 else np.concatenate([part.indices for part in parts])
        if len(indices) and not 0 <= int(indices.min()) <= int(indices.max()) < len(first.column):
            raise IndexError(f"rows {indices.min()}..{indices.max()} of a read of {len(first.column)} rows")
        # checked above, so "clip" never clips: it writes straight into target, where
        # "raise" would go through a buffer
        np.take(first.column, indices, axis=0, out=target, mode="clip")
        return target
    row = 0
    for part in parts:
        values = part.values() if isinstance(part, Gathered) else part
        target[row : row + len(values)] = values
        row += len(values)
    return target


def to_tensors(batch: dict[str, Any]) -> dict[str, Any]:
    """Turn the numpy columns of a ``finish(..., as_numpy=True)`` batch into tensors (a packed
    column's array too: torch then sends it through shared memory)."""
    import torch

    return {
        key: torch.from_numpy(value) if isinstance(value, np.ndarray) else spans.shared(value)
        for key, value in batch.items()
    }


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
