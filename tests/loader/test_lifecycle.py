"""Real training loops (G8, G13, G14): break, re-iterate, step limits, two iterators, env.

Every loop here is written the way a user writes it, against real worker processes
started with the loader's default method (forkserver) and with spawn.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
import torch
from torch.utils.data import DataLoader

from streaming import StreamingDataLoader, StreamingDataset

from helpers import FailOn, ids_of, json_roundtrip, make_table, plain_transform

NUM_SPLITS = 4
BATCH = 8
CONTEXTS = [None, "spawn"]  # None: the loader's default, forkserver


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    """202 live rows: L = 50, two surplus rows; 25 batches of 8 with k=0, 26 with k=2."""
    return make_table(tmp_path_factory.mktemp("lifecycle") / "t.lance", [70, 64, 70], deleted=[3, 90])


def dataset(uri: str, **kwargs) -> StreamingDataset:
    kwargs.setdefault("num_splits", NUM_SPLITS)
    kwargs.setdefault("shuffle_seed", 11)
    kwargs.setdefault("block_rows", 4)
    kwargs.setdefault("shuffle_buffer_size", 64)
    return StreamingDataset(uri, **kwargs)


def loader(data: StreamingDataset, workers: int, context=None, **kwargs) -> StreamingDataLoader:
    kwargs.setdefault("batch_size", BATCH)
    if workers:
        kwargs.setdefault("timeout", 120)
        kwargs["multiprocessing_context"] = context
    return StreamingDataLoader(data, num_workers=workers, **kwargs)


def ids(batch) -> list[int]:
    return batch["id"].tolist()


def planned(uri: str, epoch: int = 0) -> Counter:
    return Counter(ids_of(dataset(uri, epoch=epoch)))


def whole_epoch(uri: str, workers: int, epoch: int = 0) -> list[list[int]]:
    """The batches of an uninterrupted epoch."""
    return [ids(batch) for batch in loader(dataset(uri, epoch=epoch), workers)]


@pytest.mark.parametrize("context", CONTEXTS)
@pytest.mark.parametrize("workers", [0, 2])
def test_break_then_set_epoch_moves_on_and_the_earlier_state_resumes(uri, workers, context):
    data = dataset(uri)
    batches = loader(data, workers, context)
    seen, state = [], None
    for step, batch in enumerate(batches):
        seen.append(ids(batch))
        if step == 3:
            state = json_roundtrip(batches.state_dict())  # a boundary for k = 2 too
        if step == 4:
            break
    batches.set_epoch(1)  # no RuntimeError: leaving an epoch early is normal
    assert Counter(i for batch in batches for i in ids(batch)) == planned(uri, 1), "epoch 1 in full"
    assert sum(state["samples_consumed_per_split"]) == 4 * BATCH
    resumed = dataset(uri)
    resumed.load_state_dict(state)
    rest = [i for batch in loader(resumed, workers, context) for i in ids(batch)]
    delivered = Counter([i for batch in seen[:4] for i in batch] + rest)
    assert delivered == planned(uri), "the state taken before the break resumes exactly"


@pytest.mark.parametrize("context", CONTEXTS)
@pytest.mark.parametrize("workers", [0, 2])
def test_a_second_iterator_supersedes_the_first(uri, workers, context):
    data = dataset(uri)
    batches = loader(data, workers, context)
    first = iter(batches)
    received = [ids(next(first)) for _ in range(3)]
    second = iter(batches)  # a probe loop, or a framework re-iterating
    with pytest.raises(RuntimeError, match=r"closed by a new iterator \(iter\(loader\)\)"):
        next(first)
    assert data.stats()["rows_delivered"] == 3 * BATCH, "the state counts what the consumer received"
    received += [ids(batch) for batch in second]
    delivered = Counter(i for batch in received for i in batch)
    assert delivered == planned(uri), "no sample twice, none lost"
    assert data.state_dict()["samples_consumed_per_split"] == [data.split_length] * NUM_SPLITS


@pytest.mark.parametrize("workers", [0, 2])
def test_iterating_the_dataset_supersedes_a_loader_iterator(uri, workers):
    data = dataset(uri)
    old = iter(loader(data, workers))
    head = [i for _ in range(2) for i in ids(next(old))]
    rest = ids_of(data)  # a probe with the dataset itself
    with pytest.raises(RuntimeError, match="closed by a new iterator"):
        next(old)
    assert Counter(head + rest) == planned(uri)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_step_limited_loop_and_a_new_for_continue_from_the_committed_position(uri, workers):
    """``max_steps`` stops mid-epoch (an odd step: between boundaries for k = 2)."""
    data = dataset(uri)
    batches = loader(data, workers)
    received, max_steps = [], 5
    for step, batch in enumerate(batches):
        received.append(ids(batch))
        if step + 1 == max_steps:
            break
    assert len(batches) == len(whole_epoch(uri, workers)) - max_steps
    again = iter(batches)  # the next `for` continues
    received.append(ids(next(again)))
    # k = 2: the worker whose splits were behind went first, so this is a boundary again
    assert sum(data.state_dict()["samples_consumed_per_split"]) == sum(map(len, received))
    received += [ids(batch) for batch in again]
    assert Counter(i for batch in received for i in batch) == planned(uri)
    if workers == 0:
        assert received == whole_epoch(uri, 0), "the same batches as one uninterrupted loop"


def test_ctrl_c_in_the_loop_keeps_what_was_delivered(uri):
    """A KeyboardInterrupt raised inside next() ends that iterator loudly; iter() continues."""

    class Interrupt:
        """Raises once, in the first call that starts after the loop has its first sample:
        the transform threads may run ahead of the loop (within transform_queue_depth), so
        a fixed call number could come before the first sample on a busy machine."""

        def __init__(self) -> None:
            self.started = threading.Event()
            self.lock = threading.Lock()
            self.raised = False

        def __call__(self, batch: pa.RecordBatch):
            with self.lock:
                if self.started.is_set() and not self.raised:
                    self.raised = True
                    raise KeyboardInterrupt
            return batch.to_pylist()

    transform = Interrupt()
    data = dataset(uri, transform=transform, read_batch_size=64)
    iterator = iter(data)
    head = [int(next(iterator)["id"])]
    transform.started.set()
    with pytest.raises(KeyboardInterrupt):
        while True:
            head.append(int(next(iterator)["id"]))
    with pytest.raises(RuntimeError, match="stopped when KeyboardInterrupt was raised in it"):
        next(iterator)
    committed = sum(data.state_dict()["samples_consumed_per_split"])
    assert committed == len(head), "every sample handed out is counted, a partial cycle too (G7)"
    assert Counter(head + ids_of(data)) == planned(uri)


@pytest.mark.parametrize("workers", [0, 2])
def test_evaluation_datasets_restart_on_every_iter(uri, workers):
    data = dataset(uri, evaluation=True, shuffle=False)
    batches = loader(data, workers)
    partial = iter(batches)
    next(partial)  # a sanity check that looks at one batch
    every_row = Counter(ids_of(dataset(uri, shuffle=False)))
    for _ in range(2):
        assert Counter(i for batch in batches for i in ids(batch)) == every_row
    assert len(data) == NUM_SPLITS * data.split_length
    with pytest.raises(RuntimeError, match="evaluation=True"):
        data.state_dict()
    with pytest.raises(RuntimeError, match="evaluation=True"):
        batches.state_dict()
    with pytest.raises(RuntimeError, match="evaluation=True"):
        data.load_state_dict(dataset(uri, shuffle=False).state_dict())


def test_batch_size_none_yields_samples_like_a_plain_dataloader(uri):
    ours = list(loader(dataset(uri), 0, batch_size=None))
    plain = list(DataLoader(dataset(uri), batch_size=None))
    assert len(ours) == len(plain) == NUM_SPLITS * dataset(uri).split_length
    for mine, theirs in zip(ours[:20], plain[:20], strict=True):
        assert mine.keys() == theirs.keys()
        assert torch.equal(mine["id"], theirs["id"]) and mine["text"] == theirs["text"]
    with_workers = list(loader(dataset(uri), 2, batch_size=None))
    assert Counter(int(sample["id"]) for sample in with_workers) == planned(uri)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_size": 0}, "batch_size to be a positive integer, or None to yield single samples, got 0"),
        ({"batch_size": -3}, "batch_size .* got -3"),
        ({"batch_size": 2.5}, "batch_size .* got 2.5"),
        ({"num_workers": -1}, "num_workers to be a non-negative integer, got -1"),
        ({"num_workers": 2, "prefetch_factor": 0}, "prefetch_factor to be a positive integer or None, got 0"),
        ({"timeout": -1}, "timeout to be a non-negative number, got -1"),
    ],
)
def test_invalid_loader_arguments_are_refused_at_construction(uri, kwargs, message):
    with pytest.raises(ValueError, match=message):
        StreamingDataLoader(dataset(uri), **kwargs)


def flag_transform(batch: pa.RecordBatch):
    """Each sample carries the worker's LANCE_STREAMING_TEST_FLAG."""
    flag = os.environ.get("LANCE_STREAMING_TEST_FLAG", "unset")
    return [{"id": row["id"], "flag": flag} for row in batch.to_pylist()]


@pytest.mark.parametrize("context", CONTEXTS)
def test_workers_see_the_environment_of_the_moment_the_iterator_starts(uri, context, monkeypatch):
    data = dataset(uri, transform=flag_transform, columns=["id"])
    batches = loader(data, 2, context)
    monkeypatch.delenv("LANCE_STREAMING_TEST_FLAG", raising=False)
    first = iter(batches)
    assert set(next(first)["flag"]) == {"unset"}  # the fork server starts here
    monkeypatch.setenv("LANCE_STREAMING_TEST_FLAG", "set later")
    later = iter(batches)
    assert set(next(later)["flag"]) == {"set later"}


def test_set_epoch_from_inside_next_is_refused(uri):
    """The one real race: closing an iterator while its next() runs."""
    holder: dict[str, StreamingDataset] = {}

    def transform(batch: pa.RecordBatch):
        holder["data"].set_epoch(1)
        return batch.to_pylist()

    data = dataset(uri, transform=transform)
    holder["data"] = data
    with pytest.raises(
        RuntimeError, match=r"cannot set_epoch\(1\) while next\(\) of iter\(dataset\) is running"
    ):
        next(iter(data))


def test_set_epoch_logs_how_much_was_left(uri, caplog):
    data = dataset(uri)
    iterator = iter(loader(data, 0))
    next(iterator)
    with caplog.at_level(logging.INFO, logger="streaming"):
        data.set_epoch(1)
    total = NUM_SPLITS * data.split_length
    assert f"with {total - BATCH} of {total} samples undelivered (closed iter(loader))" in caplog.text


def test_a_batch_that_fails_part_way_is_not_counted(uri):
    """num_workers=0 draws a batch sample by sample; a failure part way puts them back."""
    order = ids_of(dataset(uri, num_splits=1, shuffle=False))
    data = dataset(uri, num_splits=1, shuffle=False, transform=FailOn(order[70]), read_batch_size=64)
    received: list[int] = []
    with pytest.raises(KeyError, match=f"row {order[70]}"):
        for batch in loader(data, 0, batch_size=10):  # window 1 (rows 64-127) fails in batch 6
            received += ids(batch)
    assert received == order[:60]
    assert data.state_dict()["samples_consumed_per_split"] == [60], "the 4 rows drawn for batch 6 count"


def test_a_loader_state_before_its_first_batch_is_where_the_dataset_stands(uri):
    data = dataset(uri)
    first = iter(loader(data, 0))
    next(first), next(first)  # 16 samples: 4 cycles of the 4 splits
    assert loader(data, 2).state_dict()["samples_consumed_per_split"] == [4] * NUM_SPLITS


def test_plain_dataloader_workers_supersede_and_evaluation_restarts_in_persistent_workers(uri):
    data = dataset(uri)
    mine = iter(data)
    next(mine)
    every = DataLoader(data, batch_size=8, num_workers=2, multiprocessing_context="forkserver", timeout=120)
    next(iter(every))
    with pytest.raises(RuntimeError, match="closed by the worker processes of a plain DataLoader"):
        next(mine)
    evaluation = dataset(uri, evaluation=True, shuffle=False)
    persistent = DataLoader(
        evaluation, batch_size=8, num_workers=2, persistent_workers=True, multiprocessing_context="forkserver"
    )
    every_row = Counter(ids_of(dataset(uri, shuffle=False)))
    for _ in range(2):
        assert Counter(i for batch in persistent for i in ids(batch)) == every_row


def test_numpy_batch_sizes_work_on_every_path(uri):
    data = dataset(uri, transform=plain_transform)
    batches = list(
        StreamingDataLoader(data, batch_size=np.int64(8), num_workers=np.int64(0), timeout=np.float32(0))
    )
    assert {len(batch["id"]) for batch in batches[:-1]} == {8}


@pytest.mark.parametrize(("workers", "context"), [(0, None), (2, None), (2, "spawn")])
def test_an_iterator_not_yet_started_follows_set_epoch_and_load_state_dict(uri, workers, context):
    """G8: iter() then set_epoch(1) (Lightning's order after a restore) yields epoch 1;
    iter() then load_state_dict yields the rest of the loaded state; a started iterator
    is still closed by set_epoch."""
    data = dataset(uri)
    batches = loader(data, workers, context)
    iterator = iter(batches)
    data.set_epoch(1)
    assert [ids(batch) for batch in iterator] == whole_epoch(uri, workers, epoch=1)

    first = dataset(uri)
    run = iter(loader(first, workers, context))
    before = [ids(next(run)) for _ in range(4)]
    state = json_roundtrip(loader(first, workers, context).state_dict())
    run.close()
    resumed = dataset(uri)
    fresh = loader(resumed, workers, context)
    iterator = iter(fresh)
    fresh.load_state_dict(state)  # the iterator has not started: not refused
    assert before + [ids(batch) for batch in iterator] == whole_epoch(uri, workers)

    fresh.set_epoch(1)
    started = iter(fresh)
    next(started)
    fresh.set_epoch(2)
    with pytest.raises(RuntimeError, match=r"closed by set_epoch\(2\)"):
        next(started)
