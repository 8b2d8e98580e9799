"""G16: transforms are lazy and bounded, run on ``transform_parallelism`` threads,
and give the same samples, order and resume positions as reading without one."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from streaming import StreamingDataLoader, StreamingDataset

from helpers import check_resume_everywhere, ids_of, make_table, plain_transform, take


class Recorder:
    """A transform that counts the rows it was called on and its concurrent calls."""

    def __init__(self, barrier: threading.Barrier | None = None) -> None:
        self.rows = 0
        self.running = 0
        self.most = 0
        self.barrier = barrier
        self._lock = threading.Lock()

    def __call__(self, batch: pa.RecordBatch) -> list[dict[str, int]]:
        with self._lock:
            self.rows += batch.num_rows
            self.running += 1
            self.most = max(self.most, self.running)
            waiting = self.barrier
        try:
            if waiting is not None:
                waiting.wait()  # raises BrokenBarrierError unless enough calls run at once
            return plain_transform(batch)
        finally:
            with self._lock:
                self.running -= 1


@pytest.fixture
def big_uri(tmp_path) -> str:
    """4,000 rows in four fragments: one shuffle window holds all of them."""
    return make_table(tmp_path / "big.lance", [1000, 1000, 1000, 1000])


def test_the_first_sample_costs_one_batch_per_split_not_a_window(big_uri):
    """G16: with two splits and ``transform_queue_depth=1`` the first sample
    transforms one batch of each split, and the next samples only what they reach."""
    recorder = Recorder()
    data = StreamingDataset(
        big_uri, num_splits=2, read_batch_size=16, transform=recorder, transform_queue_depth=1
    )
    iterator = iter(data)
    next(iterator)
    assert recorder.rows == 2 * 16
    take(iterator, 2 * 40 - 1)  # 40 cycles: the third batch of each split is reached
    assert recorder.rows == 2 * 3 * 16
    iterator.close()


@pytest.mark.parametrize("depth", [1, 3])
def test_transforms_run_ahead_no_further_than_the_queue_depth(big_uri, depth):
    """G16: at most ``transform_queue_depth`` batches of a split are transformed at
    once, however many threads there are; rows transformed stay within that bound."""
    recorder = Recorder()
    data = StreamingDataset(
        big_uri,
        num_splits=1,
        read_batch_size=8,
        transform=recorder,
        transform_parallelism=4,
        transform_queue_depth=depth,
    )
    consumed = 0
    for _ in data:
        consumed += 1
        assert recorder.rows <= (consumed // 8 + depth) * 8
    assert recorder.most <= depth
    assert consumed == recorder.rows == 4000


def test_transforms_run_on_transform_parallelism_threads_at_once(big_uri):
    """G16: four transforms of one split run at the same time with
    ``transform_parallelism=4`` (each waits for the other three at a barrier)."""
    recorder = Recorder(threading.Barrier(4, timeout=60))
    data = StreamingDataset(
        big_uri, num_splits=1, read_batch_size=100, transform=recorder, transform_parallelism=4
    )
    assert len(ids_of(data)) == 4000
    assert recorder.most == 4


@pytest.mark.parametrize(
    ("batch_rows", "threads", "depth"), [(1, 1, 1), (7, 2, None), (64, None, 5), (5000, 3, 2)]
)
def test_transformed_samples_come_in_the_order_of_the_untransformed(small_uri, batch_rows, threads, depth):
    """G16: same samples in the same order whatever the batch size, threads and depth."""
    settings = {"num_splits": 4, "block_rows": 4, "shuffle_buffer_size": 32, "shuffle_seed": 3}
    expected = ids_of(StreamingDataset(small_uri, **settings))
    transformed = StreamingDataset(
        small_uri,
        **settings,
        read_batch_size=batch_rows,
        transform=plain_transform,
        transform_parallelism=threads,
        transform_queue_depth=depth,
    )
    assert ids_of(transformed) == expected


def test_a_transformed_epoch_resumes_exactly_from_every_position(small_uri):
    """G16 with G5: stopping after any sample of a lazily transformed epoch and
    resuming gives exactly the rest, with small batches crossing window edges."""
    settings = {"num_splits": 4, "block_rows": 4, "shuffle_buffer_size": 32, "read_batch_size": 5}
    check_resume_everywhere(
        lambda: StreamingDataset(small_uri, **settings, transform=plain_transform, transform_queue_depth=2)
    )


def test_workers_transform_lazily_and_commit_the_untransformed_positions(small_uri):
    """G16 with G6: with two workers, states after each batch equal those of an
    untransformed run."""
    settings = {"num_splits": 4, "block_rows": 4, "shuffle_buffer_size": 32, "read_batch_size": 5}

    def states(transform):
        data = StreamingDataset(small_uri, **settings, transform=transform)
        loader = StreamingDataLoader(data, batch_size=4, num_workers=2)
        return [([int(i) for i in batch["id"]], loader.state_dict()) for batch in loader]

    assert states(plain_transform) == states(None)
