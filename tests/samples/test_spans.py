"""Wide strings and binaries packed into one byte array and back (samples/spans.py)."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streaming.samples import spans
from streaming.samples.rows import WIDE_VALUE_BYTES, WideValues

TYPES = {
    "binary": pa.binary(),
    "large_binary": pa.large_binary(),
    "string": pa.string(),
    "large_string": pa.large_string(),
}


def column_of(values: list, type_: pa.DataType, cuts: list[int], *, sliced: int) -> WideValues:
    """``values`` in chunks cut at ``cuts``, each chunk a slice of a larger array (Arrow's
    offsets then start past zero)."""
    bounds = [0, *sorted({cut for cut in cuts if cut <= len(values)}), len(values)]
    chunks = []
    for low, high in itertools.pairwise(bounds):
        padded = [values[0]] * sliced + values[low:high] + [values[0]]
        chunks.append(pa.array(padded, type_).slice(sliced, high - low))
    return WideValues(pa.chunked_array(chunks, type_))


@given(
    kind=st.sampled_from(sorted(TYPES)),
    sizes=st.lists(st.integers(0, 2 * WIDE_VALUE_BYTES), min_size=1, max_size=30),
    cuts=st.lists(st.integers(0, 30), max_size=4),
    sliced=st.integers(0, 3),
    data=st.data(),
)
def test_packed_values_unpack_to_the_values_gathered(kind, sizes, cuts, sliced, data):
    """Pieces of one or more read columns, packed into an array of ``size`` bytes, come
    back as the values ``WideValues.take`` gives, in order, as bytes or str."""
    text = "string" in kind
    values = [
        ("é" if text else b"\xff") * (size // 2) + (str(i) if text else bytes([i]))
        for i, size in enumerate(sizes)
    ]
    column = column_of(values, TYPES[kind], cuts, sliced=sliced)
    pieces = [
        (column, np.array(rows, dtype=np.int64))
        for rows in data.draw(
            st.lists(st.lists(st.integers(0, len(values) - 1), max_size=12), min_size=1, max_size=3)
        )
    ]
    target = np.full(spans.size(pieces), 7, dtype=np.uint8)
    marker = spans.pack(pieces, target)
    expected = [value for piece, rows in pieces for value in piece.take(rows)]
    assert marker == spans.Spans(count=len(expected), text=text)
    unpacked = spans.unpack(target, marker)
    assert unpacked == expected and all(type(value) is type(values[0]) for value in unpacked)
    target[:] = 0  # the unpacked values are copies
    assert unpacked == expected


def test_a_target_of_another_size_is_refused():
    column = column_of([b"x" * WIDE_VALUE_BYTES] * 3, pa.binary(), [], sliced=0)
    pieces = [(column, np.array([0, 2]))]
    with pytest.raises(ValueError, match="packed"):
        spans.pack(pieces, np.zeros(spans.size(pieces) + 1, dtype=np.uint8))


def test_columns_with_nulls_are_not_packable():
    assert not WideValues(pa.chunked_array([pa.array([b"x" * WIDE_VALUE_BYTES, None])])).packable
    assert WideValues(pa.chunked_array([pa.array([b"x" * WIDE_VALUE_BYTES])])).packable
