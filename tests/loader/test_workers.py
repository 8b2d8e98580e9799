"""Workers that pay: persistent workers, drop_last, a user's collate_fn, and mixtures
that read each row once, with real worker processes (forkserver and spawn).

Every batch is assembled from one share per worker, so the loader's batches are the
same for every ``num_workers`` and the state after any batch is exact (G3, G5-G7).
"""

from __future__ import annotations

import os
from collections import Counter

import pytest
import torch
from torch.utils.data import default_collate

from streaming import StreamingDataLoader, StreamingDataset

from helpers import json_roundtrip, make_table
from mixtures import GLOBAL_BATCH, make_tables, mixture

NUM_SPLITS = 6
BATCH = 5  # not a multiple of any iterator's splits: batches end inside cycles
DROP = 7  # 150 samples an epoch: 21 full batches and a short one


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    return make_table(tmp_path_factory.mktemp("workers") / "t.lance", [40, 33, 50, 30], deleted=[7, 8, 90])


def dataset(uri: str, **kwargs) -> StreamingDataset:
    kwargs.setdefault("num_splits", NUM_SPLITS)
    return StreamingDataset(uri, block_rows=4, shuffle_buffer_size=48, **kwargs)


def with_pid(batch) -> list[dict]:
    """A transform that records which process read each row."""
    pid = os.getpid()
    return [{"id": row, "pid": pid} for row in batch["id"].to_pylist()]


def ids(batches) -> list[list[int]]:
    return [batch["id"].tolist() for batch in batches]


def reference(
    uri: str, *, epoch: int = 0, batch_size: int = BATCH, drop_last: bool = False
) -> list[list[int]]:
    """The batches of num_workers=0: what every worker count must give."""
    return ids(StreamingDataLoader(dataset(uri, epoch=epoch), batch_size=batch_size, drop_last=drop_last))


@pytest.mark.parametrize("context", [None, "spawn"])
def test_persistent_workers_continue_every_iterator_from_the_committed_position(uri, context):
    """A superseded iterator, a `break`, the next epoch: each new iterator continues from
    the committed position in the same worker processes."""
    data = dataset(uri, transform=with_pid)
    loader = StreamingDataLoader(
        data,
        batch_size=BATCH,
        num_workers=2,
        persistent_workers=True,
        multiprocessing_context=context,
        timeout=120,
    )
    first = iter(loader)
    got = [next(first) for _ in range(3)]
    second = iter(loader)  # supersedes the first, whose prefetched shares are discarded
    with pytest.raises(RuntimeError, match="iter"):
        next(first)
    for step, batch in enumerate(second):
        got.append(batch)
        if step == 2:
            break  # a suspended iterator, then a plain `for` again
    got += list(loader)
    assert ids(got) == reference(uri), "epoch 0 is exactly the batches of num_workers=0"
    pids = {int(pid) for batch in got for pid in batch["pid"]}
    data.set_epoch(1)
    later = list(loader)
    assert ids(later) == reference(uri, epoch=1)
    assert {int(pid) for batch in later for pid in batch["pid"]} == pids, "the same two worker processes"
    assert len(pids) == 2


def test_persistent_workers_serve_repeated_evaluation_passes(uri):
    """An evaluation dataset restarts at position 0 of its epoch at every iter(), also in
    kept workers, and a pass broken off early does not shorten the next one."""
    loader = StreamingDataLoader(
        dataset(uri, evaluation=True), batch_size=BATCH, num_workers=3, persistent_workers=True, timeout=120
    )
    whole = reference(uri)
    assert ids(loader) == whole
    for step, _ in enumerate(loader):
        if step == 1:
            break
    assert ids(loader) == whole


def test_persistent_workers_follow_load_state_dict(uri):
    """A state loaded between two iterators (another snapshot position) reaches the kept workers."""
    data = dataset(uri)
    loader = StreamingDataLoader(data, batch_size=BATCH, num_workers=2, persistent_workers=True, timeout=120)
    iterator = iter(loader)
    seen = [next(iterator) for _ in range(4)]
    state = json_roundtrip(loader.state_dict())
    rest = list(loader)  # the epoch's end
    iterator.close()
    data.load_state_dict(state)  # back to after the fourth batch
    assert ids(loader) == ids(rest)
    assert ids(seen) + ids(rest) == reference(uri)


def test_a_killed_persistent_worker_is_replaced_and_nothing_is_lost(uri):
    """A kept worker that dies: the error names it; iter() again starts new workers that
    continue from the committed position."""
    loader = StreamingDataLoader(
        dataset(uri, transform=with_pid),
        batch_size=BATCH,
        num_workers=2,
        persistent_workers=True,
        timeout=120,
    )
    iterator = iter(loader)
    got = [next(iterator) for _ in range(2)]
    victim = int(got[0]["pid"][0])
    os.kill(victim, 9)
    named = rf"worker \d \(pid {victim}\) was killed by SIGKILL.*call iter\(\) on the loader again"
    with pytest.raises(RuntimeError, match=named):
        for batch in iterator:
            got.append(batch)
    got += list(loader)
    assert ids(got) == reference(uri)
    assert victim not in {int(pid) for batch in got[-3:] for pid in batch["pid"]}


@pytest.mark.parametrize("workers", [0, 2, 3])
def test_drop_last_never_counts_the_dropped_batch(uri, workers):
    """drop_last=True: only full batches, len() says how many, the dropped samples stay
    undelivered in the state, and a resume from any batch is exact."""
    whole = reference(uri, batch_size=DROP)
    full = [batch for batch in whole if len(batch) == DROP]
    assert len(full) == len(whole) - 1, "the table must leave a short last batch"
    data = dataset(uri)
    loader = StreamingDataLoader(
        data, batch_size=DROP, num_workers=workers, drop_last=True, timeout=120 if workers else 0
    )
    assert len(loader) == len(full)
    got = ids(loader)
    assert got == full
    state = loader.state_dict()
    assert sum(state["samples_consumed_per_split"]) == DROP * len(full), "the dropped batch was counted"
    resumed = dataset(uri)
    resumed.load_state_dict(state)
    assert len(resumed) == len(whole[-1]), "the dropped samples are still to come"
    for stop in (1, 4):
        first = dataset(uri)
        iterator = iter(StreamingDataLoader(first, batch_size=DROP, num_workers=workers, drop_last=True))
        before = [next(iterator)["id"].tolist() for _ in range(stop)]
        again = dataset(uri)
        again.load_state_dict(json_roundtrip(first.state_dict()))
        after_loader = StreamingDataLoader(again, batch_size=DROP, num_workers=workers, drop_last=True)
        assert len(after_loader) == len(full) - stop
        assert before + ids(after_loader) == full


def test_drop_last_gives_every_rank_the_same_number_of_full_batches(uri):
    counts = []
    for rank in range(2):
        data = dataset(uri, rank=rank, world_size=2)
        loader = StreamingDataLoader(data, batch_size=4, num_workers=3, drop_last=True, timeout=120)
        announced = len(loader)
        batches = ids(loader)
        assert all(len(batch) == 4 for batch in batches)
        assert len(batches) == announced and len(loader) == 0
        counts.append(len(batches))
    assert counts[0] == counts[1]


def test_a_user_collate_fn_sees_whole_batches_in_order(uri):
    """A collate_fn that pads (or does anything needing the whole batch) gets the same
    samples in the same order as with num_workers=0."""
    seen_sizes = []

    def mine(samples):
        seen_sizes.append(len(samples))
        return {"id": torch.tensor([int(sample["id"]) for sample in samples]), "n": len(samples)}

    expected = ids(StreamingDataLoader(dataset(uri), batch_size=BATCH, collate_fn=mine))
    seen_sizes.clear()
    got = ids(
        StreamingDataLoader(dataset(uri), batch_size=BATCH, num_workers=2, collate_fn=mine, timeout=120)
    )
    assert got == expected == reference(uri)
    assert seen_sizes == [len(batch) for batch in expected], "collate_fn runs once per whole batch"


def test_default_collate_given_explicitly_is_the_same(uri):
    got = ids(StreamingDataLoader(dataset(uri), batch_size=BATCH, num_workers=2, collate_fn=default_collate))
    assert got == reference(uri)


@pytest.mark.parametrize("workers", [2, 4])
def test_a_mixture_reads_each_row_once_across_workers(tmp_path, workers):
    """Each worker reads only its splits of every source: the workers together read as
    many rows as one process does (it used to be k times as many), and the batches are
    those of num_workers=0."""
    tables = make_tables(tmp_path)

    def run(k: int):
        mix = mixture(tables, stop="first_exhausted")
        loader = StreamingDataLoader(mix, batch_size=GLOBAL_BATCH, num_workers=k, timeout=120 if k else 0)
        batches = ids(loader)
        return batches, mix.stats()

    expected, alone = run(0)
    batches, stats = run(workers)
    assert batches == expected
    assert alone["rows_read"] >= sum(map(len, batches))
    assert stats["rows_read"] <= 1.1 * alone["rows_read"], (
        f"{stats['rows_read']} rows read, {alone['rows_read']} alone"
    )


@pytest.mark.parametrize("context", [None, "spawn"])
def test_a_mixture_with_persistent_workers_resumes_exactly(tmp_path, context):
    tables = make_tables(tmp_path)
    expected = ids(StreamingDataLoader(mixture(tables, stop="first_exhausted"), batch_size=GLOBAL_BATCH))
    mix = mixture(tables, stop="first_exhausted")
    loader = StreamingDataLoader(
        mix, batch_size=GLOBAL_BATCH, num_workers=2, persistent_workers=True, multiprocessing_context=context
    )
    got = []
    for step, batch in enumerate(loader):
        got.append(batch["id"].tolist())
        if step == 2:
            break
    got += ids(loader)
    assert got == expected
    assert not Counter(i for batch in got for i in batch) - Counter(i for batch in expected for i in batch)
