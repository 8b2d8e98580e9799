"""Strings and binaries stay Arrow until their rows are gathered (samples/rows.py)."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streaming.samples.rows import WIDE_VALUE_BYTES, ByteValues, Rows, gather


def _chunked(values: list[bytes | None], cuts: list[int]) -> pa.ChunkedArray:
    bounds = [0, *sorted(set(cuts)), len(values)]
    chunks = [pa.array(values[a:b], pa.binary()) for a, b in itertools.pairwise(bounds)]
    return pa.chunked_array(chunks, pa.binary())


@given(
    sizes=st.lists(st.integers(0, 64) | st.integers(0, 3 * WIDE_VALUE_BYTES), min_size=1, max_size=40),
    cuts=st.lists(st.integers(0, 40), max_size=5),
    data=st.data(),
)
def test_gathered_rows_are_the_values_at_those_indices(sizes, cuts, data):
    values: list[bytes | None] = [bytes([i % 251]) * size for i, size in enumerate(sizes)]
    if len(values) > 2:
        values[1] = None
    column = ByteValues(_chunked(values, [cut for cut in cuts if cut <= len(values)]))
    indices = np.array(data.draw(st.lists(st.integers(0, len(values) - 1), max_size=60)), dtype=np.int64)
    assert gather(column, indices) == [values[i] for i in indices.tolist()]


def test_an_index_past_the_read_is_refused():
    for width in (WIDE_VALUE_BYTES, 8):  # wide and narrow values
        column = ByteValues(_chunked([b"x" * width] * 3, [1]))
        with pytest.raises(IndexError, match=r"rows 0\.\.3 of a read of 3 rows"):
            column.take(np.array([0, 3]))


def test_a_read_of_images_or_text_is_copied_only_as_its_rows_are_gathered():
    """Wide and narrow values alike stay Arrow in the read's storage."""
    images = [bytes([i]) * 100_000 for i in range(8)]
    table = pa.table({"id": np.arange(8), "image": pa.array(images), "text": [f"t{i}" for i in range(8)]})
    order = np.array([5, 0, 7, 2, 1, 6, 3, 4])
    (window,) = Rows.gather(table, [order])
    image, text = window.storage.columns[1], window.storage.columns[2]
    assert isinstance(image, ByteValues) and isinstance(text, ByteValues)
    assert image.wide and not text.wide
    assert [row["image"] for row in window.samples(0, 8)] == [images[i] for i in order.tolist()]
    assert [row["text"] for row in window.samples(2, 4)] == ["t7", "t2"]
