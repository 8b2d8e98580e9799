"""Live statistics, read in the trainer's process, with and without worker processes."""

from __future__ import annotations

import gc
import json

import pyarrow as pa
import pytest

from streaming import StreamingDataLoader, StreamingDataset
from streaming.stats import Counters

from helpers import FailOn, make_table


def double(batch: pa.RecordBatch):
    return [{"id": row["id"], "twice": 2 * row["id"]} for row in batch.to_pylist()]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("transform", [None, double])
def test_stats_match_what_was_delivered(tmp_path, workers, transform):
    uri = make_table(tmp_path / "t.lance", [50, 40, 30], deleted=[1, 2])
    data = StreamingDataset(uri, num_splits=4, block_rows=4, shuffle_buffer_size=32, transform=transform)
    assert data.stats()["rows_read"] == 0
    loader = StreamingDataLoader(data, batch_size=4, num_workers=workers)
    iterator = iter(loader)
    delivered = sum(len(next(iterator)["id"]) for _ in range(2 * max(workers, 1)))
    middle = data.stats()
    assert middle["rows_delivered"] == delivered == sum(data.state_dict()["samples_consumed_per_split"])
    delivered += sum(len(batch["id"]) for batch in iterator)
    final = data.stats()
    assert final["rows_delivered"] == delivered == 4 * data.split_length
    assert final["rows_skipped"] == 0
    assert final["rows_read"] >= delivered and final["bytes_read"] > 0 and final["windows_read"] > 0
    assert final["read_seconds"] > 0
    assert (final["transform_seconds"] > 0) == (transform is not None)
    assert json.loads(json.dumps(final)) == final


PEER_ATTRIBUTES = (
    "bytes_loaded",
    "consumed_rows",
    "fetch_time",
    "prefetch_queue_depth",
    "raw_queue_depth",
    "rows_skipped",
    "transform_time",
    "unscanned_rows",
)


@pytest.mark.parametrize("workers", [0, 2])
def test_the_peer_attributes_count_what_was_read_and_delivered(tmp_path, workers):
    """Drop-in: the eight observability attributes of ``lancedb.streaming`` are 0
    before iteration, read-only, and agree with what was delivered after, with
    the figures of worker processes summed in."""
    uri = make_table(tmp_path / "t.lance", [50, 40, 30], deleted=[1, 2])
    data = StreamingDataset(
        uri,
        num_splits=4,
        block_rows=4,
        shuffle_buffer_size=32,
        transform=FailOn(7),
        on_transform_error="skip",
    )
    assert {name: getattr(data, name) for name in PEER_ATTRIBUTES} == dict.fromkeys(PEER_ATTRIBUTES, 0)
    with pytest.raises(AttributeError):
        data.bytes_loaded = 1
    loader = StreamingDataLoader(data, batch_size=4, num_workers=workers)
    iterator = iter(loader)
    delivered = len(next(iterator)["id"])
    assert data.consumed_rows <= delivered and data.bytes_loaded > 0 and data.fetch_time > 0
    delivered += sum(len(batch["id"]) for batch in iterator)
    assert data.consumed_rows == delivered == 4 * data.split_length - 1  # row 7 was dropped
    assert data.rows_skipped == 1 == data.stats()["rows_skipped"]
    assert data.bytes_loaded == data.stats()["bytes_read"] and data.transform_time > 0
    assert data.unscanned_rows == 0
    assert data.raw_queue_depth >= 0 and data.prefetch_queue_depth >= 0


@pytest.mark.parametrize("transform", [None, double])
def test_the_queue_attributes_describe_the_running_iterator(tmp_path, transform):
    """Drop-in: while an iterator is suspended mid-epoch, rows not yet requested,
    waiting for the transform and ready add up to at most what is left; 0 after."""
    uri = make_table(tmp_path / "t.lance", [400, 400])
    data = StreamingDataset(
        uri, num_splits=2, block_rows=8, shuffle_buffer_size=64, read_batch_size=8, transform=transform
    )
    iterator = iter(data)
    for _ in range(100):  # 50 of each split's 400: inside the second window of 32
        next(iterator)
    held = data.unscanned_rows + data.raw_queue_depth + data.prefetch_queue_depth
    assert 0 < data.unscanned_rows < 700 and held <= 700
    if transform is not None:  # the rest of the current windows is raw or transformed ahead
        assert data.raw_queue_depth + data.prefetch_queue_depth >= 2 * (64 - 56)
    else:  # rows are converted when read: none ever waits for a transform
        assert data.raw_queue_depth == 0
    iterator.close()
    assert data.raw_queue_depth == data.prefetch_queue_depth == data.unscanned_rows == 0


def test_worker_queue_figures_drop_to_zero_when_their_iterator_is_gone(tmp_path):
    """With workers, the queue attributes come from each worker's last report; once
    the loader's iterator is dropped nothing is queued, and they read 0 (totals stay)."""
    uri = make_table(tmp_path / "t.lance", [400, 400])
    data = StreamingDataset(uri, num_splits=4, block_rows=8, shuffle_buffer_size=64, transform=double)
    iterator = iter(StreamingDataLoader(data, batch_size=4, num_workers=2))
    for _ in range(4):
        next(iterator)
    assert data.unscanned_rows > 0
    loaded = data.bytes_loaded
    del iterator
    gc.collect()
    assert data.raw_queue_depth == data.prefetch_queue_depth == data.unscanned_rows == 0
    assert data.bytes_loaded == loaded > 0


def test_throttled_counters_reuse_recent_gauges_and_keep_totals_current():
    """A worker's counters (throttled) read the gauges at most once per interval; the
    totals are current in every report, and a new iterator's gauges are read at once."""
    reads = []

    def gauges():
        reads.append(len(reads))
        return {"read_ahead": len(reads), "raw_rows": 0, "ready_rows": 0, "unscanned_rows": 0}

    counters = Counters()
    counters.watch(gauges)
    assert [counters.as_dict()["read_ahead"] for _ in range(3)] == [1, 2, 3]  # unthrottled
    counters.throttle(3600.0)
    first = counters.as_dict()
    counters.add(rows=5)
    second = counters.as_dict()
    assert first["read_ahead"] == second["read_ahead"] == 4 and len(reads) == 4
    assert second["rows_read"] == first["rows_read"] + 5
    counters.watch(gauges)  # a new iterator: its gauges, not the old ones
    assert counters.as_dict()["read_ahead"] == 5
    counters.watch(None)
    assert counters.as_dict()["read_ahead"] == 0
