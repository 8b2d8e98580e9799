"""G16: transforms are lazy and bounded, run on ``transform_parallelism`` threads,
and give the same samples, order and resume positions as reading without one."""

from __future__ import annotations

import random
import threading
import warnings

import numpy
import pyarrow as pa
import pytest
import torch

from streaming import SeededTransformWarning, StreamingDataLoader, StreamingDataset

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


class Noise:
    """A picklable augmentation: one random draw per row from the row's own generator."""

    def __call__(self, batch: pa.RecordBatch, rngs) -> list[dict[str, int]]:
        return [
            {"id": row_id, "noise": int(rng.integers(1 << 62))}
            for row_id, rng in zip(batch.column("id").to_pylist(), rngs, strict=True)
        ]


def noise_of(batches) -> dict[int, int]:
    return {int(i): int(n) for batch in batches for i, n in zip(batch["id"], batch["noise"], strict=True)}


@pytest.mark.parametrize("workers", [0, 2])
def test_transform_rngs_draw_the_same_on_every_topology_batch_size_and_resume(small_uri, workers):
    """``transform_rng=True``: each row's generator is seeded from (seed, epoch, split,
    position), so its draws do not depend on ranks, workers, read_batch_size or a
    resume; another epoch draws anew."""
    settings = {"num_splits": 4, "block_rows": 4, "shuffle_buffer_size": 32, "shuffle_seed": 2}

    def draws(*, epoch=0, batch_rows=64, world_size=1, state=None):
        result = {}
        for rank in range(world_size):
            data = StreamingDataset(
                small_uri,
                **settings,
                epoch=epoch,
                rank=rank,
                world_size=world_size,
                read_batch_size=batch_rows,
                transform=Noise(),
                transform_rng=True,
            )
            if state is not None:
                data.load_state_dict(state)
            result.update(
                noise_of(StreamingDataLoader(data, batch_size=4, num_workers=workers // world_size))
            )
        return result

    one = draws()
    assert len(one) == 120 and len(set(one.values())) == len(one)
    assert draws(batch_rows=3, world_size=2) == one
    first = StreamingDataset(small_uri, **settings, transform=Noise(), transform_rng=True)
    iterator = iter(first)
    for _ in range(50):
        next(iterator)
    state = first.state_dict()
    iterator.close()
    rest = draws(batch_rows=7, state=state)
    assert rest == {row: one[row] for row in rest} and len(rest) == 120 - 50
    other = draws(epoch=1)
    assert set(other) & set(one) and all(other[row] != one[row] for row in set(other) & set(one))


def test_transform_rng_needs_a_transform(small_uri):
    with pytest.raises(ValueError, match=r"transform_rng=True needs a transform="):
        StreamingDataset(small_uri, transform_rng=True)


def seed_globals(worker_id: int) -> None:
    """A ``worker_init_fn`` as torch's docs teach: seed the global generators per worker."""
    numpy.random.seed(1000 + worker_id)
    random.seed(1000 + worker_id)
    torch.manual_seed(1000 + worker_id)


def leave_generators_alone(worker_id: int) -> None:
    """A ``worker_init_fn`` that sets up something else (here: nothing) and seeds nothing."""


def global_noise(batch: pa.RecordBatch) -> list[dict[str, int]]:
    """A transform drawing from numpy's global generator (not reproducible on several threads)."""
    return [{"id": i, "noise": int(numpy.random.randint(1 << 30))} for i in batch.column("id").to_pylist()]


def noise_with(data: StreamingDataset, worker_init_fn) -> dict[int, int]:
    return noise_of(StreamingDataLoader(data, batch_size=4, num_workers=2, worker_init_fn=worker_init_fn))


def test_a_seeding_worker_init_fn_with_several_transform_threads_warns(small_uri):
    data = StreamingDataset(small_uri, num_splits=4, transform=global_noise, transform_parallelism=2)
    with pytest.warns(SeededTransformWarning) as caught:
        assert len(noise_with(data, seed_globals)) == 120
    message = str(caught[0].message)
    assert "worker_init_fn test_transforms.seed_globals seeded the global random generators" in message
    assert "test_transforms.global_noise runs on 2 threads" in message
    assert "Pass transform_rng=True" in message and "or transform_parallelism=1" in message


@pytest.mark.parametrize(
    ("transform", "settings", "worker_init_fn"),
    [
        (global_noise, {"transform_parallelism": 1}, seed_globals),  # one thread: draws in row order
        (Noise(), {"transform_parallelism": 2, "transform_rng": True}, seed_globals),
        (global_noise, {"transform_parallelism": 2}, leave_generators_alone),
    ],
    ids=["one-thread", "transform_rng", "not-seeding"],
)
def test_no_seeding_warning_when_the_draws_are_reproducible_or_nothing_was_seeded(
    small_uri, transform, settings, worker_init_fn
):
    def run() -> dict[int, int]:
        data = StreamingDataset(small_uri, num_splits=4, transform=transform, **settings)
        return noise_with(data, worker_init_fn)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        first = run()
    if worker_init_fn is seed_globals:  # and so reproducible
        assert run() == first
