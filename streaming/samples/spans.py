"""Wide strings and binaries packed into one byte array: offsets, then the values.

A worker sends a share's numeric columns through its shared-memory slot; a column of
images (``rows.WideValues``) goes there too, packed: ``count + 1`` int64 offsets, then
the values' bytes one after another. The share then holds a ``Spans`` for the column,
and the trainer unpacks the slot's array into the ``bytes`` (or ``str``) values the
pipe would have carried, copying each value once. Over the pipe the same values were
converted to ``bytes``, pickled, written, read and unpickled: five copies, not two.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .rows import WideValues

__all__ = ["Spans", "pack", "size", "unpack"]

Pieces = Sequence[tuple[WideValues, np.ndarray]]
"""A column's rows in order: (read column, rows of it) for each piece."""

_OFFSET = np.dtype(np.int64)


@dataclass(frozen=True)
class Spans:
    """In a share, for a column packed into the slot array of the same name: how many
    values it holds and whether they are strings."""

    count: int
    text: bool


def size(pieces: Pieces) -> int:
    """Bytes ``pack`` writes for ``pieces``: the offsets and every value."""
    count = sum(len(rows) for _, rows in pieces)
    values = sum(int(column.extents(rows)[2].sum()) for column, rows in pieces)
    return _OFFSET.itemsize * (count + 1) + values


def pack(pieces: Pieces, target: np.ndarray) -> Spans:
    """Write ``pieces`` into ``target`` (uint8, of ``size(pieces)`` bytes)."""
    count = sum(len(rows) for _, rows in pieces)
    head = _OFFSET.itemsize * (count + 1)
    offsets = target[:head].view(_OFFSET)
    data = target[head:]
    offsets[0] = position = row = 0
    for column, rows in pieces:
        chunks, starts, lengths = column.extents(rows)
        for chunk, start, length in zip(chunks.tolist(), starts.tolist(), lengths.tolist(), strict=True):
            data[position : position + length] = column.data(chunk)[start : start + length]
            position += length
            row += 1
            offsets[row] = position
    if position + head != len(target):
        raise ValueError(f"packed {position + head} bytes into an array of {len(target)}")
    return Spans(count=count, text=bool(pieces) and pieces[0][0].text)


def unpack(array: np.ndarray, spans: Spans) -> list[bytes] | list[str]:
    """The values ``pack`` wrote into ``array``, each copied out (``array`` may then be reused)."""
    head = _OFFSET.itemsize * (spans.count + 1)
    offsets = array[:head].view(_OFFSET).tolist()
    data = array[head:]
    if spans.text:
        return [data[low:high].tobytes().decode() for low, high in itertools.pairwise(offsets)]
    return [data[low:high].tobytes() for low, high in itertools.pairwise(offsets)]
