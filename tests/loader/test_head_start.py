"""The first batches with workers come from the trainer while the workers start; at a batch
boundary after they are up, the workers continue from the position posted to them.

Each test lets the trainer draw its first batch, waits until the workers are up (a
condition polled with a deadline), and draws the rest from the workers: the batches and
the state after every batch are those of ``num_workers=0``, with real worker processes.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from streaming import StreamingDataLoader, StreamingDataset
from streaming.loader.headstart import HeadStart

from helpers import make_table, plain_transform

BATCH = 16


@pytest.fixture(scope="module")
def uri(tmp_path_factory):
    return make_table(tmp_path_factory.mktemp("head") / "t.lance", (400, 300), deleted=range(3, 700, 17))


def ids(batch) -> list[int]:
    return [int(sample["id"]) for sample in batch] if isinstance(batch, list) else batch["id"].tolist()


def run(loader, *, stop: int | None = None):
    """Batches and the state counts after each: the first drawn by the trainer, the rest
    after the workers are up (``stop``: only that many batches)."""
    iterator = iter(loader)
    first = next(iterator)
    batches, counts = [ids(first)], [loader.state_dict()["samples_consumed_per_split"]]
    ahead = iterator._shares  # the iterator's source of batches (a head start here)
    assert isinstance(ahead, HeadStart) and ahead.own, "the first batch was not the trainer's own"
    deadline = time.monotonic() + 120
    while not ahead.up():
        assert time.monotonic() < deadline, "the workers never came up"
        threading.Event().wait(0.02)
    for batch in iterator:
        batches.append(ids(batch))
        counts.append(loader.state_dict()["samples_consumed_per_split"])
        if stop is not None and len(batches) == stop:
            break
    if len(batches) > 1:
        assert not ahead.own, "the workers never took over"
    return batches, counts


def reference(make, **kwargs):
    loader = StreamingDataLoader(make(), batch_size=BATCH, **kwargs)
    batches, counts = [], []
    for batch in loader:
        batches.append(ids(batch))
        counts.append(loader.state_dict()["samples_consumed_per_split"])
    return batches, counts


@pytest.mark.parametrize(("workers", "context"), [(2, None), (3, "spawn")])
def test_the_workers_continue_where_the_trainer_stopped(uri, workers, context):
    def make():
        return StreamingDataset(uri, shuffle_seed=4)

    dataset = make()
    loader = StreamingDataLoader(
        dataset, batch_size=BATCH, num_workers=workers, multiprocessing_context=context
    )
    assert run(loader) == reference(make)
    assert dataset.stats()["rows_read"] >= dataset.stats()["rows_delivered"]


def test_a_collate_fn_of_the_users(uri):
    """Batches the user's function collates (samples, not columns) through the switch."""

    def make():
        return StreamingDataset(uri, num_splits=4, shuffle_seed=2)

    loader = StreamingDataLoader(make(), batch_size=BATCH, num_workers=3, collate_fn=list)
    assert run(loader) == reference(make, collate_fn=list)


def test_a_dataset_with_a_transform_starts_its_workers_first(uri):
    """A transform runs in the workers from the first batch: run in the trainer it would
    draw from the trainer's random generators as often as the start happened to take."""
    dataset = StreamingDataset(uri, num_splits=4, shuffle_seed=2, transform=plain_transform)
    iterator = iter(StreamingDataLoader(dataset, batch_size=BATCH, num_workers=2))
    next(iterator)
    assert not isinstance(iterator._shares, HeadStart)
    rest = [batch for batch in iterator]
    assert len(rest) == -(-4 * dataset.split_length // BATCH) - 1


def test_persistent_workers_take_over_then_serve_the_next_epoch(uri):
    def make():
        return StreamingDataset(uri, shuffle_seed=6)

    dataset = make()
    loader = StreamingDataLoader(dataset, batch_size=BATCH, num_workers=2, persistent_workers=True)
    first = run(loader)
    dataset.set_epoch(1)
    second = [ids(batch) for batch in loader]  # the kept workers, from the posted position
    expected = make()
    assert first == reference(lambda: expected)
    expected.set_epoch(1)
    assert second == reference(lambda: expected)[0]


def test_a_state_taken_after_the_switch_resumes_on_another_worker_count(uri):
    def make():
        return StreamingDataset(uri, shuffle_seed=9)

    whole, _ = reference(make)
    loader = StreamingDataLoader(make(), batch_size=BATCH, num_workers=2)
    seen, _ = run(loader, stop=12)
    resumed = make()
    resumed.load_state_dict(loader.state_dict())
    rest = [ids(batch) for batch in StreamingDataLoader(resumed, batch_size=BATCH, num_workers=3)]
    assert seen + rest == whole


def test_a_worker_that_died_during_the_head_start_is_named_and_iter_continues_exactly(uri):
    """Killed while the trainer draws the first batches: the switch meets it, the error names
    it (as for any dead worker), and ``iter()`` again delivers exactly the rest."""
    planned = reference(lambda: StreamingDataset(uri, shuffle_seed=4))[0]
    loader = StreamingDataLoader(StreamingDataset(uri, shuffle_seed=4), batch_size=BATCH, num_workers=2)
    iterator = iter(loader)
    seen = [ids(next(iterator))]
    victim = iterator._shares._workers[1]  # the started DataLoader iterator's worker processes
    os.kill(victim.pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while victim.is_alive():  # the death shows (a fork server reaps its children a moment later)
        assert time.monotonic() < deadline, "the killed worker still looks alive"
        threading.Event().wait(0.01)
    with pytest.raises(RuntimeError, match=rf"worker 1 \(pid {victim.pid}\) was killed by SIGKILL"):
        for batch in iterator:
            seen.append(ids(batch))
    rest = [ids(batch) for batch in loader]
    assert sorted(i for batch in seen + rest for i in batch) == sorted(i for batch in planned for i in batch)
    assert seen + rest == planned, "the batches after the restart are not those of an uninterrupted run"
