"""Strings and binaries packed into one byte array and back (samples/spans.py)."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streaming.samples import spans
from streaming.samples.rows import WIDE_VALUE_BYTES, ByteValues

TYPES = {
    "binary": pa.binary(),
    "large_binary": pa.large_binary(),
    "string": pa.string(),
    "large_string": pa.large_string(),
}


def column_of(values: list, type_: pa.DataType, cuts: list[int], *, sliced: int) -> ByteValues:
    """``values`` in chunks cut at ``cuts``, each chunk a slice of a larger array (Arrow's
    offsets then start past zero)."""
    bounds = [0, *sorted({cut for cut in cuts if cut <= len(values)}), len(values)]
    chunks = []
    for low, high in itertools.pairwise(bounds):
        padded = [values[0]] * sliced + values[low:high] + [values[0]]
        chunks.append(pa.array(padded, type_).slice(sliced, high - low))
    return ByteValues(pa.chunked_array(chunks, type_))


@given(
    kind=st.sampled_from(sorted(TYPES)),
    sizes=st.lists(st.integers(0, 40) | st.integers(0, 2 * WIDE_VALUE_BYTES), min_size=1, max_size=30),
    nulls=st.sets(st.integers(1, 29), max_size=5),
    cuts=st.lists(st.integers(0, 30), max_size=4),
    sliced=st.integers(0, 3),
    data=st.data(),
)
def test_packed_values_unpack_to_the_values_gathered(kind, sizes, nulls, cuts, sliced, data):
    """Pieces of one or more read columns (narrow or wide values, empty ones, nulls), packed
    into an array of ``size`` bytes, come back as the values ``ByteValues.take`` gives, in
    order, as bytes or str (``None`` for a null)."""
    text = "string" in kind
    values = [
        None if i in nulls else ("é" if text else b"\xff") * (size // 2) + (str(i) if text else bytes([i]))
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
    assert marker == spans.Spans(count=len(expected), text=text, nulls=column.nulls)
    unpacked = spans.unpack(target, marker)
    assert unpacked == expected
    assert all(type(value) is (str if text else bytes) for value in unpacked if value is not None)
    target[:] = 0  # the unpacked values are copies
    assert unpacked == expected


def test_a_target_of_another_size_is_refused():
    column = column_of([b"x" * WIDE_VALUE_BYTES] * 3, pa.binary(), [], sliced=0)
    pieces = [(column, np.array([0, 2]))]
    with pytest.raises(ValueError, match="packed"):
        spans.pack(pieces, np.zeros(spans.size(pieces) + 1, dtype=np.uint8))


def test_a_null_whose_offsets_span_bytes_packs_as_none_and_no_bytes():
    """Arrow lets a null's offsets span bytes (undefined values): they are not copied."""
    data = pa.py_buffer(b"abXYcd")
    offsets = pa.py_buffer(np.array([0, 2, 4, 6], dtype=np.int32).tobytes())
    validity = pa.py_buffer(np.packbits([True, False, True], bitorder="little").tobytes())
    array = pa.Array.from_buffers(pa.string(), 3, [validity, offsets, data])
    pieces = [(ByteValues(pa.chunked_array([array])), np.array([2, 1, 0]))]
    target = np.zeros(spans.size(pieces), dtype=np.uint8)
    assert spans.size(pieces) == 8 * 4 + 1 + 4
    assert spans.unpack(target, spans.pack(pieces, target)) == ["cd", None, "ab"]


def test_lists_gathered_already_pack_when_all_are_strings_or_all_binaries():
    """A lagged resume's or a mixture's parts are lists of values: packed alike, or not at all."""
    texts = [["a", None, ""], [None], ["ünï"]]
    found = spans.pieces(texts)
    assert found is not None
    target = np.zeros(spans.size(found), dtype=np.uint8)
    assert spans.unpack(target, spans.pack(found, target)) == ["a", None, "", None, "ünï"]
    assert spans.pieces([[b"x", None], [b""]]) is not None
    assert spans.pieces([["a"], [b"x"]]) is None, "strings and bytes do not make one column"
    assert spans.pieces([[None, None]]) is None, "no value says which"
    assert spans.pieces([[1, 2]]) is None and spans.pieces([np.arange(3)]) is None
