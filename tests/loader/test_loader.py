"""StreamingDataLoader with real worker processes (G6, G9): consumer-committed state."""

from __future__ import annotations

import gc
import itertools
import multiprocessing
import pickle
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
import torch
from torch.utils.data import DataLoader, default_collate

from streaming import StreamingDataLoader, StreamingDataset
from streaming.dataset.host import source_engine

from helpers import FailOn, ids_of, json_roundtrip, make_table, plain_transform

NUM_SPLITS = 6
BATCH = 6  # two cycles of a worker owning 3 splits, three of one owning 2


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("loader") / "t.lance"
    return make_table(path, [40, 33, 50, 30], deleted=[7, 8, 90])


def dataset(uri: str, **kwargs) -> StreamingDataset:
    kwargs.setdefault("num_splits", NUM_SPLITS)
    kwargs.setdefault("block_rows", 4)
    kwargs.setdefault("shuffle_buffer_size", 48)
    return StreamingDataset(uri, **kwargs)


def loader(data: StreamingDataset, workers: int, **kwargs) -> StreamingDataLoader:
    kwargs.setdefault("batch_size", BATCH)
    if workers:
        kwargs.setdefault("timeout", 120)
    return StreamingDataLoader(data, num_workers=workers, **kwargs)


def batch_ids(batches) -> list[list[int]]:
    return [batch["id"].tolist() for batch in batches]


def flat(batches: list[list[int]]) -> list[int]:
    return [i for batch in batches for i in batch]


def stop_and_resume(
    uri: str, *, workers: int, stop_after: int, resume_workers: int, context=None, batch_size: int = BATCH
) -> tuple:
    """Take ``stop_after`` batches, save loader.state_dict(), resume in fresh objects."""
    first = dataset(uri)
    iterator = iter(loader(first, workers, multiprocessing_context=context, batch_size=batch_size))
    before = batch_ids(next(iterator) for _ in range(stop_after))
    state = json_roundtrip(iterator._loader.state_dict())
    del iterator
    resumed = dataset(uri)
    resumed.load_state_dict(state)
    after = batch_ids(loader(resumed, resume_workers, multiprocessing_context=context, batch_size=batch_size))
    return before, after, state


def planned(uri: str) -> list[int]:
    return ids_of(dataset(uri))


@pytest.mark.parametrize("context", [None, "spawn"])
def test_two_workers_resume_exactly_at_every_step(uri, context):
    """G5, G7: k=2 with the default start method and spawn: stop after any batch (the
    batch size is not a multiple of a worker's splits), resume: exactly the rest."""
    reference = batch_ids(loader(dataset(uri), 0, batch_size=BATCH - 1))
    assert sorted(flat(reference)) == sorted(planned(uri))
    for stop_after in (0, 1, 2, 5, 7):
        before, after, _ = stop_and_resume(
            uri, workers=2, stop_after=stop_after, resume_workers=2, context=context, batch_size=BATCH - 1
        )
        assert before == reference[:stop_after], "the same batches as num_workers=0 (G3)"
        assert before + after == reference, f"stopped after {stop_after} batches"


@pytest.mark.parametrize(("old", "new"), [(2, 1), (1, 2), (2, 3), (3, 2), (0, 3), (3, 0)])
def test_worker_count_changes_on_resume(uri, old, new):
    """G3, G5: any worker count before and after; the batches are those of one uninterrupted run."""
    reference = batch_ids(loader(dataset(uri), 0, batch_size=BATCH - 1))
    before, after, _ = stop_and_resume(
        uri, workers=old, stop_after=3, resume_workers=new, batch_size=BATCH - 1
    )
    assert before + after == reference, f"{old} -> {new} workers"


def test_the_same_batches_for_every_worker_count(uri):
    """G3: num_workers is a speed setting: batch t holds the same samples in the same order."""
    for batch_size in (1, 4, 7):
        reference = batch_ids(loader(dataset(uri), 0, batch_size=batch_size))
        for workers in (1, 2, 3, 6):
            assert batch_ids(loader(dataset(uri), workers, batch_size=batch_size)) == reference, (
                f"batch_size={batch_size}, num_workers={workers}"
            )


def test_the_state_is_exact_after_every_batch(uri):
    """G6: dataset.state_dict(), loader.state_dict() and strict=True agree after any batch."""
    data = dataset(uri)
    iterator = iter(loader(data, 2, batch_size=5))
    next(iterator)
    assert data.state_dict() == iterator._loader.state_dict() == iterator._loader.state_dict(strict=True)
    assert sum(data.state_dict()["samples_consumed_per_split"]) == 5
    assert data.state_dict()["samples_consumed_per_split"] == [1] * 5 + [0]
    next(iterator)
    assert data.state_dict()["samples_consumed_per_split"] == [2] * 4 + [1] * 2


def test_prefetched_batches_do_not_move_the_state(uri):
    data = dataset(uri)
    iterator = iter(loader(data, 2, prefetch_factor=4))
    next(iterator)
    next(iterator)
    # Workers have produced several more batches by now; only two reached us.
    assert data.state_dict()["samples_consumed_per_split"] == [2] * NUM_SPLITS


def resumed_after_two_steps(uri: str, workers: int) -> StreamingDataset:
    """A fresh dataset loaded with the loader state after two batches of every worker."""
    first = iter(loader(dataset(uri), workers, batch_size=4))
    for _ in range(max(workers, 1) * 2):
        next(first)
    state = first._loader.state_dict()
    del first
    again = dataset(uri)
    again.load_state_dict(state)
    return again


@pytest.mark.parametrize("workers", [0, 2, 3])
def test_len_matches_the_batches_yielded(uri, workers):
    data = dataset(uri, num_splits=NUM_SPLITS)
    batches = loader(data, workers, batch_size=4)
    expected = len(batches)
    assert expected == len(batch_ids(batches))
    rest = loader(resumed_after_two_steps(uri, workers), workers, batch_size=4)
    assert len(rest) == len(batch_ids(rest))


@pytest.mark.parametrize("workers", [0, 2])
def test_len_counts_epoch_is_the_whole_epoch_after_a_resume(uri, workers):
    whole = len(loader(dataset(uri), workers, batch_size=4))
    again = resumed_after_two_steps(uri, workers)
    remaining = len(loader(again, workers, batch_size=4))
    rest = loader(again, workers, batch_size=4, len_counts="epoch")
    assert len(rest) == whole and whole > remaining
    assert rest.replay_allowance() == 0, "nothing is replayed"
    assert len(batch_ids(rest)) == remaining, "len_counts changed what is yielded"


def test_len_counts_is_checked(uri):
    with pytest.raises(
        ValueError, match=r"len_counts must be one of 'auto', 'remaining', 'epoch', got 'all'"
    ):
        loader(dataset(uri), 0, len_counts="all")


@pytest.mark.parametrize("workers", [0, 2])
def test_set_epoch_closes_an_iterator_that_delivered_everything(uri, workers):
    """Lightning stops after len(loader) batches without asking for the end of the epoch."""
    data = dataset(uri)
    batches = loader(data, workers)
    iterator = iter(batches)
    got = [next(iterator) for _ in range(len(batches))]
    assert sum(len(batch["id"]) for batch in got) == NUM_SPLITS * data.split_length
    data.set_epoch(1)  # no RuntimeError: nothing was left
    assert data.epoch == 1 and len(data) == NUM_SPLITS * data.split_length
    with pytest.raises(StopIteration):
        next(iterator)
    expected = len(batches)
    assert len(batch_ids(batches)) == expected == len(got), "the next epoch is delivered in full"


def test_no_workers_gives_the_batches_of_a_plain_dataloader(uri):
    ours = list(loader(dataset(uri), 0, batch_size=5))
    plain = list(DataLoader(dataset(uri), batch_size=5))
    assert len(ours) == len(plain)
    for mine, theirs in zip(ours, plain):
        assert mine.keys() == theirs.keys()
        for key in mine:
            if isinstance(mine[key], torch.Tensor):
                assert torch.equal(mine[key], theirs[key]), key
            else:
                assert mine[key] == theirs[key], key


def test_set_epoch_forwards(uri):
    data = dataset(uri)
    batches = loader(data, 0)
    batches.set_epoch(2)
    assert data.epoch == 2
    batches.sampler.set_epoch(3)
    assert data.epoch == 3
    iterator = iter(loader(data, 2))
    next(iterator)
    data.set_epoch(3)  # the current epoch: a no-op, also while iterating
    assert len(next(iterator)["id"]) == BATCH
    data.set_epoch(4)  # another epoch closes the suspended iterator
    with pytest.raises(RuntimeError, match=r"closed by set_epoch\(4\)"):
        next(iterator)


class Overriding(StreamingDataset):
    def __iter__(self):
        yield from super().__iter__()


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"in_order": False}, ValueError, "in_order=False"),
        ({"batch_size": None, "drop_last": True}, ValueError, r"drop_last=True with batch_size=None.*pass a"),
        ({"multiprocessing_context": "fork", "num_workers": 2}, ValueError, "'forkserver', 'spawn'"),
    ],
)
def test_refused_settings(uri, kwargs, error, message):
    with pytest.raises(error, match=message):
        StreamingDataLoader(dataset(uri), **kwargs)


def test_refused_datasets(uri):
    with pytest.raises(TypeError, match=r"needs a streaming\.StreamingDataset, got list"):
        StreamingDataLoader([1, 2, 3])
    with pytest.raises(TypeError, match="Overriding overrides __iter__"):
        StreamingDataLoader(Overriding(uri, num_splits=2))


def test_num_workers_is_refused_after_construction(uri):
    """torch's loader takes a new ``num_workers`` silently; ours checked each worker's splits
    for the count it was built with, so another one is refused, naming the fix."""
    loader = StreamingDataLoader(dataset(uri), batch_size=4, num_workers=2)
    loader.num_workers = 2  # the same count: nothing changes
    with pytest.raises(ValueError, match=r"num_workers is fixed .* \(it was 2, got 4\).*num_workers=4"):
        loader.num_workers = 4
    assert loader.num_workers == 2


def test_fork_context_object_is_refused(uri):
    with pytest.raises(ValueError, match="fork"):
        StreamingDataLoader(
            dataset(uri), num_workers=2, multiprocessing_context=multiprocessing.get_context("fork")
        )


def test_unpicklable_transform_is_named_before_workers_start(uri):
    data = dataset(uri, transform=lambda batch: batch.to_pylist())
    with pytest.raises(
        TypeError, match=r"transform test_loader\.test_unpicklable.*<lambda> cannot be pickled"
    ):
        iter(loader(data, 2))
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize("workers", [0, 2])
def test_worker_error_reaches_the_trainer_and_the_checkpoint_resumes(uri, workers):
    order = flat(batch_ids(loader(dataset(uri), workers)))
    bad_id = order[int(len(order) * 0.8)]  # late enough that batches come before it
    data = dataset(uri, transform=FailOn(bad_id), read_batch_size=1)
    batches = loader(data, workers)
    seen: list[list[int]] = []
    states = []
    with pytest.raises(KeyError, match=f"cannot handle row {bad_id}"):
        for batch in batches:
            seen.append([int(i) for i in batch["id"]])
            states.append(batches.state_dict())
    assert states, "the failure came before any batch"
    assert data.state_dict() == states[-1]
    resumed = dataset(uri, transform=plain_transform, read_batch_size=1)
    resumed.load_state_dict(json_roundtrip(states[-1]))
    rest = [int(i) for batch in loader(resumed, workers) for i in batch["id"]]
    assert Counter(flat(seen) + rest) == Counter(planned(uri)), "every batch received is counted, once"


def test_plain_dataloader_with_workers_makes_state_dict_raise(uri):
    data = dataset(uri)
    ids = [
        i
        for batch in DataLoader(
            data, batch_size=6, num_workers=2, multiprocessing_context="spawn", timeout=120
        )
        for i in batch["id"].tolist()
    ]
    assert sorted(ids) == sorted(planned(uri))  # the workers read it all...
    with pytest.raises(RuntimeError, match="StreamingDataLoader"):
        data.state_dict()  # ...but this process cannot know that


def test_plain_dataloader_forking_after_lance_use_fails_clearly(uri):
    data = dataset(uri)
    next(iter(data))  # this process has used Lance
    forked = DataLoader(data, batch_size=6, num_workers=1, multiprocessing_context="fork", timeout=120)
    with pytest.raises(RuntimeError, match="forked from a process that had already used Lance"):
        next(iter(forked))


@pytest.mark.parametrize("finish", ["closed", "exhausted"])
def test_no_worker_processes_leak(uri, finish):
    iterator = iter(loader(dataset(uri), 2))
    next(iterator)
    workers = list(iterator._batches._workers)  # the real worker processes
    assert len(workers) == 2 and all(worker.is_alive() for worker in workers)
    if finish == "exhausted":
        list(iterator)
    del iterator
    gc.collect()
    for worker in workers:
        worker.join(timeout=30)
        assert not worker.is_alive(), f"worker {worker.pid} outlived its iterator"


def test_workers_receive_settings_not_handles_or_offsets(tmp_path):
    """A worker gets URI, version, settings and position; filter offsets are memory-mapped."""
    big = make_table(tmp_path / "big.lance", [40_000, 40_000])
    data = StreamingDataset(big, num_splits=4, filter="label < 5")
    payload = pickle.dumps(data)
    assert len(payload) < 20_000, "40,000 matching offsets would take 160 kB"
    assert b"LanceDataset" not in payload
    copy = pickle.loads(payload)
    view = source_engine(copy).view_at(copy.epoch)  # the engine's view of this epoch
    assert isinstance(view.filter_index.offsets, np.memmap)
    iterator = iter(data)
    head = [int(next(iterator)["id"]) for _ in range(20)]
    assert [int(s["id"]) for s in itertools.islice(copy, 20)] == head


def typed_table(path) -> str:
    """Columns of every kind the vectorised path must reproduce exactly."""
    n = 90
    rng = np.random.default_rng(0)
    table = pa.table(
        {
            "id": np.arange(n, dtype=np.int64),
            "i8": rng.integers(-100, 100, n).astype(np.int8),
            "u8": rng.integers(0, 255, n).astype(np.uint8),
            "i16": rng.integers(-1000, 1000, n).astype(np.int16),
            "u32": rng.integers(0, 1000, n).astype(np.uint32),
            "f16": rng.random(n).astype(np.float16),
            "f64": rng.random(n),
            "flag": rng.random(n) > 0.5,
            "vec": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 3).astype(np.float32)), 3),
            "grid": pa.FixedSizeListArray.from_arrays(
                pa.FixedSizeListArray.from_arrays(pa.array(np.arange(n * 4, dtype=np.int32)), 2), 2
            ),
            "pair": pa.array([[i, i + 1] for i in range(n)], pa.list_(pa.int64())),
            "text": pa.array([f"t{i}" for i in range(n)]),
            "blob": pa.array([bytes([i % 256]) * 3 for i in range(n)], pa.binary()),
        }
    )
    uri = str(path / "typed.lance")
    import lance

    lance.write_dataset(table, uri, max_rows_per_file=40)
    return uri


def assert_same_batches(ours, theirs):
    assert len(ours) == len(theirs)
    for index, (mine, plain) in enumerate(zip(ours, theirs)):
        assert mine.keys() == plain.keys()
        for key in plain:
            if isinstance(plain[key], torch.Tensor):
                assert isinstance(mine[key], torch.Tensor), (index, key)
                assert mine[key].dtype == plain[key].dtype and mine[key].shape == plain[key].shape, (
                    index,
                    key,
                )
                assert torch.equal(mine[key], plain[key]), (index, key)
            else:
                assert type(mine[key]) is type(plain[key]) and repr(mine[key]) == repr(plain[key]), (
                    index,
                    key,
                )


def per_row_collate(rows):
    """default_collate behind another name: turns the vectorised path off."""
    return default_collate(rows)


@pytest.mark.parametrize("workers", [0, 2])
def test_vectorised_batches_equal_per_row_default_collate(tmp_path, workers):
    """The fast path (default collate, no transform) gives default_collate's batches."""
    typed = typed_table(tmp_path)

    def make():
        return StreamingDataset(typed, num_splits=2, block_rows=4, shuffle_buffer_size=32)

    per_row = loader(make(), workers, batch_size=8, collate_fn=per_row_collate)
    assert not per_row._columnar
    expected = list(per_row)
    fast = loader(make(), workers, batch_size=8)
    assert fast._columnar and fast.batch_size == 8
    assert_same_batches(list(fast), expected)
    if workers == 0:
        assert_same_batches(expected, list(DataLoader(make(), batch_size=8)))


def test_copying_or_pickling_by_the_user_does_not_mark_the_dataset(uri):
    import copy

    data = dataset(uri)
    take_two = iter(data)
    next(take_two)
    take_two.close()
    copy.deepcopy(data)
    pickle.loads(pickle.dumps(data))
    assert data.state_dict()["num_splits"] == NUM_SPLITS
