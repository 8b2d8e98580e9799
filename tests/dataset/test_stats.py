"""Live statistics, read in the trainer's process, with and without worker processes."""

from __future__ import annotations

import gc
import itertools
import json

import pyarrow as pa
import pytest

from streaming import StreamingDataLoader, StreamingDataset
from streaming.core.stats import Counters
from streaming.dataset.host import source_engine

from helpers import FailOn, make_table
from mixtures import GLOBAL_BATCH, make_tables, mixture


def double(batch: pa.RecordBatch):
    return [{"id": row["id"], "twice": 2 * row["id"]} for row in batch.to_pylist()]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("transform", [None, double])
def test_stats_match_what_was_delivered(tmp_path, workers, transform):
    uri = make_table(tmp_path / "t.lance", [50, 40, 30], deleted=[1, 2])
    data = StreamingDataset(uri, num_splits=4, block_rows=4, shuffle_buffer_size=32, transform=transform)
    assert data.stats()["rows_read"] == 0
    # head_start=False: the workers deliver from the first batch, so their figures show at once
    loader = StreamingDataLoader(data, batch_size=4, num_workers=workers, head_start=False)
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
    assert (final["convert_seconds"] > 0) == (transform is None)
    assert json.loads(json.dumps(final)) == final
    # the loop's waits: one per batch handed over, the first one (start-up) apart
    assert final["wait_batches"] == -(-delivered // 4) and middle["wait_batches"] == 2 * max(workers, 1)
    assert 0 < final["wait_first_seconds"] < final["wait_seconds"]
    quantiles = [final[f"wait_{name}_seconds"] for name in ("p50", "p95", "p99", "longest")]
    assert quantiles[0] > 0 and quantiles == sorted(quantiles) and quantiles[-1] < final["wait_seconds"]
    per_worker = sorted(name for name in final if name.startswith("wait_worker_"))
    assert per_worker == [f"wait_worker_{worker}_seconds" for worker in range(workers)]
    assert sum(final[name] for name in per_worker) <= final["wait_seconds"]


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


@pytest.mark.parametrize("transform", [None, double])
def test_the_peer_attributes_mean_what_they_mean_in_the_peer(tmp_path, transform):
    """Drop-in: ``prefetch_queue_depth`` counts the rows ready to yield, including
    those the iterator took out of their windows, and ``transform_time`` times the
    transform stage, which without a transform is the Arrow-to-sample conversion."""
    uri = make_table(tmp_path / "t.lance", [120])
    data = StreamingDataset(uri, num_splits=12, transform=transform)
    iterator = iter(data)
    next(iterator)  # every split's 10 rows are taken out of their windows at once
    assert data.prefetch_queue_depth > 0
    rest = list(iterator)
    assert len(rest) == 119 and data.prefetch_queue_depth == 0
    assert data.transform_time > 0 and data.fetch_time > 0


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


def _walked_gauges(readers) -> dict[str, int]:
    """The gauges as a walk of every current window and scheduled read finds them
    (what ``SplitReaders`` computed on each read before it kept running counts)."""
    from streaming.samples.transformed import TransformedRows

    raw = ready = 0
    for split, window in readers._current.items():
        position = readers.positions[split] - readers._current_start[split]
        if isinstance(window, TransformedRows):
            waiting, done = window.waiting(position)
            raw, ready = raw + waiting, ready + done
        else:
            ready += max(0, len(window) - position)
    for key, future in readers._scheduled.items():
        if future.done() and not future.cancelled() and future.exception() is None:
            rows = len(future.result()[key])
            raw, ready = (raw + rows, ready) if readers._transformer is not None else (raw, ready + rows)
    unscanned = sum(
        max(0, readers._length - ahead * readers._window_rows) for ahead in readers._ahead.values()
    )
    return {
        "read_ahead": len(readers._scheduled),
        "raw_rows": raw,
        "ready_rows": ready,
        "unscanned_rows": unscanned,
    }


@pytest.mark.parametrize("transform", [None, double])
def test_running_gauges_equal_a_walk_of_every_window(tmp_path, transform):
    """At every step of reading (takes, skips, give-backs, new windows), the gauges kept
    as running counts equal those a walk of every window and read computes; with a
    transform, whose threads move rows from raw to ready meanwhile, their sum does."""
    from streaming.samples.reader import open_readers

    uri = make_table(tmp_path / "t.lance", [50, 40, 30], deleted=[1, 2])
    data = StreamingDataset(uri, num_splits=3, block_rows=4, shuffle_buffer_size=16, transform=transform)
    engine = source_engine(data)
    windows = engine.view_at(data.epoch).window_source(engine.options, Counters())
    with open_readers(windows, {0: 0, 1: 5, 2: 0}, io_threads=2) as readers:
        for step in range(400):
            split = step % 3
            if readers.remaining(split) == 0:
                continue
            if step % 7 == 0:
                readers.skip(split, 3)
            else:
                readers.take(split, 1 + step % 5)
                if step % 11 == 0:
                    readers.unread(split, 1)
            for future in list(readers._scheduled.values()):
                future.exception()  # waits for every read in flight: nothing lands between the looks
            gauges, walked = readers.gauges(), _walked_gauges(readers)
            if transform is not None:
                gauges["raw_rows"] += gauges.pop("ready_rows")
                walked["raw_rows"] += walked.pop("ready_rows")
            assert gauges == walked
        assert all(readers.remaining(split) == 0 for split in range(3))


@pytest.mark.parametrize(("workers", "persistent"), [(0, False), (2, False), (2, True)])
def test_mixture_stats_accumulate_across_epochs_in_every_mode(tmp_path, workers, persistent):
    """``StreamingMixture.stats()`` counts every row read since the mixture was built,
    for k=0, for workers started per epoch, and for persistent workers alike: each
    epoch adds about the rows it delivered."""
    mix = mixture(make_tables(tmp_path), stop="first_exhausted")
    loader = StreamingDataLoader(
        mix,
        batch_size=GLOBAL_BATCH,
        num_workers=workers,
        persistent_workers=persistent,
        timeout=120 if workers else 0,
    )
    totals, delivered = [0], []
    for epoch in range(2):
        loader.set_epoch(epoch)
        delivered.append(sum(len(batch["id"]) for batch in loader))
        totals.append(mix.stats()["rows_read"])
    added = [after - before for before, after in itertools.pairwise(totals)]
    for epoch, (rows, read) in enumerate(zip(delivered, added)):
        assert rows <= read <= 1.5 * rows, (
            f"epoch {epoch} delivered {rows} rows but stats()['rows_read'] grew by {read} "
            f"(totals {totals}, k={workers}, persistent_workers={persistent})"
        )
