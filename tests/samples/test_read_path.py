"""The read path (source.read_rows, rows, assemble): fast paths give the plain results."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import lance
import numpy as np
import pyarrow as pa
import pytest
import torch
from torch.utils.data import default_collate

from streaming import StreamingDataLoader, StreamingDataset
from streaming.samples.rows import Rows
from streaming.tables import source

from helpers import json_roundtrip, make_table


def _chunked_table() -> pa.Table:
    """Three chunks (as a read of three fragments gives) of every converted kind."""
    parts = []
    for start in (0, 5, 12):
        ids = np.arange(start, start + (5 if start < 12 else 4), dtype=np.int64)
        vectors = pa.array(np.repeat(ids, 3).astype(np.float32))
        parts.append(
            pa.table(
                {
                    "id": ids,
                    "flag": ids % 2 == 0,
                    "vec": pa.FixedSizeListArray.from_arrays(vectors, 3),
                    "pair": pa.array([[int(i), int(i) + 1] for i in ids], pa.list_(pa.int64())),
                    "text": pa.array([f"t{i}" for i in ids]),
                    "maybe": pa.array([None if i % 4 == 0 else int(i) for i in ids], pa.int64()),
                }
            )
        )
    return pa.concat_tables(parts)


def _plain_samples(table: pa.Table, order: np.ndarray) -> list[dict]:
    """Reference: the rows of ``table`` at ``order`` as Python values."""
    rows = table.to_pylist()
    return [rows[i] for i in order.tolist()]


def _as_python(value):
    return value.tolist() if isinstance(value, np.ndarray | np.generic) else value


def test_rows_gather_each_order_of_a_chunked_table():
    table = _chunked_table()
    assert table.column("id").num_chunks == 3
    rng = np.random.default_rng(0)
    orders = [rng.permutation(table.num_rows)[:9], rng.permutation(table.num_rows)]
    windows = Rows.gather(table, orders)
    for window, order in zip(windows, orders):
        assert len(window) == len(order)
        expected = _plain_samples(table, order)
        got = window.samples(0, len(window))
        assert [{k: _as_python(v) for k, v in row.items()} for row in got] == expected
        assert isinstance(got[0]["id"], np.int64) and got[0]["vec"].shape == (3,)
        assert got[0]["vec"].flags.writeable, "handed-out arrays are fresh copies"
        # columns: whole columns in yield order, sliceable, the same values again
        assert [_as_python(v) for v in window.columns[0][2:5]] == [row["id"] for row in expected[2:5]]
        assert [_as_python(row["id"]) for row in window.samples(3, 5)] == [r["id"] for r in expected[3:5]]
    assert windows[0].storage is windows[1].storage, "one conversion shared by the windows of a read"


@pytest.mark.parametrize("take_rows", [64, 0])  # large pieces cut into several takes; one per fragment
@pytest.mark.parametrize("filtered", [False, True])
def test_parallel_takes_read_what_serial_takes_read(tmp_path, filtered, take_rows):
    uri = make_table(tmp_path / "t.lance", [300, 7, 260], deleted=[3, 4, 5, 301, 400])
    dataset = lance.dataset(uri)
    index = source.build_filter_index(dataset, "id % 3 = 0") if filtered else None
    ids, counts = source.fragment_rows(dataset)
    if index is not None:
        ids, counts = index.ids.tolist(), index.counts()
    rng = np.random.default_rng(1)
    pieces = [
        (fragment, np.sort(rng.choice(count, size=count * 2 // 3, replace=False)))
        for fragment, count in zip(ids, counts)
        if count
    ]
    columns = ["id", "vec", "text"]
    serial = source.read_rows(dataset, pieces, columns=columns, filter_index=index)
    with ThreadPoolExecutor(3) as executor:
        parallel = source.read_rows(
            dataset,
            pieces,
            columns=columns,
            filter_index=index,
            executor=executor,
            take_rows=take_rows,
        )
    assert parallel.equals(serial)
    assert serial.num_rows == sum(len(offsets) for _, offsets in pieces)


def test_takes_are_cut_into_near_equal_parts_none_longer_than_take_rows():
    offsets = np.arange(10, 210)
    parts = source._cut_pieces([(4, offsets), (9, np.arange(3))], 64)
    assert [len(planned) for _, planned in parts] == [50, 50, 50, 50, 3]
    assert [fragment for fragment, _ in parts] == [4, 4, 4, 4, 9]
    assert np.array_equal(np.concatenate([planned for _, planned in parts[:4]]), offsets)


def test_a_failing_take_raises_from_the_read_and_leaves_no_take_running(tmp_path):
    uri = make_table(tmp_path / "t.lance", [300, 260], deleted=[])
    dataset = lance.dataset(uri)
    pieces = [(fragment, np.arange(count)) for fragment, count in zip(*source.fragment_rows(dataset))]
    with ThreadPoolExecutor(2) as executor:
        with pytest.raises(Exception, match="nope"):
            source.read_rows(
                dataset,
                pieces,
                columns=["id", "nope"],
                filter_index=None,
                executor=executor,
                take_rows=64,
            )
        # the pool is free again: a read after the failure completes
        table = source.read_rows(
            dataset, pieces, columns=["id"], filter_index=None, executor=executor, take_rows=64
        )
    assert (
        table.column("id").to_pylist()
        == source.read_rows(dataset, pieces, columns=["id"], filter_index=None).column("id").to_pylist()
    )


@pytest.mark.parametrize("workers", [0, 3])
def test_loader_batches_equal_default_collate_when_splits_are_at_different_windows(tmp_path, workers):
    """After a lagged resume the splits' windows come from different reads (the slow path);
    with workers, shares that straddle two reads are gathered into their slots part by part."""
    uri = make_table(tmp_path / "t.lance", [40, 33, 50], deleted=[7, 90])

    def make() -> StreamingDataset:
        return StreamingDataset(uri, num_splits=3, block_rows=4, shuffle_buffer_size=24)

    state = json_roundtrip(make().state_dict())
    state["samples_consumed_per_split"] = [0, 9, 21]
    state["positions_consumed_per_split"] = [0, 9, 21]
    per_row, fast = make(), make()
    per_row.load_state_dict(state)
    fast.load_state_dict(state)
    rows = list(per_row)
    batches = list(StreamingDataLoader(fast, batch_size=5, num_workers=workers))
    expected = [default_collate(rows[i : i + 5]) for i in range(0, len(rows), 5)]
    assert len(batches) == len(expected)
    for index, (mine, plain) in enumerate(zip(batches, expected)):
        for key in ("id", "label", "vec"):
            assert torch.equal(mine[key], plain[key]), (index, key)
        assert mine["text"] == plain["text"], index
