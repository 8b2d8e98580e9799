"""StreamingDataset over real Lance tables: coverage, lengths, order, epochs, samples."""

from __future__ import annotations

import logging
import warnings
from collections import Counter
from pathlib import Path

import lance
import lancedb
import numpy as np
import pyarrow as pa
import pytest
import torch
from torch.utils.data import DataLoader, default_collate

from streaming import EpochCompleteWarning, StreamingDataset

from helpers import ids_of, live_ids, make_table, run_ranks, table_data


def dataset(uri: str, **kwargs) -> StreamingDataset:
    kwargs.setdefault("block_rows", 4)
    kwargs.setdefault("shuffle_buffer_size", 64)
    return StreamingDataset(uri, **kwargs)


@pytest.mark.parametrize("world_size", [1, 2, 3, 6])
def test_exact_coverage_and_equal_length(table_uri, world_size):
    """G1, G2: every planned row once over all ranks; every rank yields (S/W)*L."""
    num_splits = 6
    per_rank = run_ranks(
        lambda r, w: dataset(table_uri, num_splits=num_splits, rank=r, world_size=w), world_size
    )
    live = live_ids(table_uri)
    length = len(live) // num_splits
    delivered = [i for ids in per_rank for i in ids]
    assert len(delivered) == num_splits * length
    assert len(set(delivered)) == len(delivered), "a row was delivered twice"
    assert set(delivered) <= live, "a deleted or unknown row was delivered"
    assert [len(ids) for ids in per_rank] == [num_splits // world_size * length] * world_size
    assert [
        len(dataset(table_uri, num_splits=6, rank=r, world_size=world_size)) for r in range(world_size)
    ] == [num_splits // world_size * length] * world_size


def global_steps(table_uri: str, world_size: int, *, num_splits: int, m: int) -> list[set[int]]:
    """The set of ids in every global step of m samples per split."""
    per_rank = run_ranks(
        lambda r, w: dataset(table_uri, num_splits=num_splits, rank=r, world_size=w), world_size
    )
    batch = m * num_splits // world_size
    steps = len(per_rank[0]) // batch
    return [set().union(*(set(ids[t * batch : (t + 1) * batch]) for ids in per_rank)) for t in range(steps)]


def test_global_steps_are_the_same_for_every_world_size(table_uri):
    """G3: the samples of global step t do not depend on world_size."""
    reference = global_steps(table_uri, 1, num_splits=6, m=2)
    for world_size in (2, 3, 6):
        assert global_steps(table_uri, world_size, num_splits=6, m=2) == reference, world_size


def test_shuffles_reproduce_and_differ(small_uri):
    """G4: same seed and epoch reproduce; other seeds or epochs differ."""
    order = ids_of(dataset(small_uri, num_splits=2, shuffle_seed=7))
    assert order == ids_of(dataset(small_uri, num_splits=2, shuffle_seed=7))
    assert order != ids_of(dataset(small_uri, num_splits=2, shuffle_seed=8))
    assert order != ids_of(dataset(small_uri, num_splits=2, shuffle_seed=7, epoch=1))
    assert ids_of(dataset(small_uri, num_splits=2, shuffle=False)) != order


def test_shuffle_false_reads_storage_order(small_uri):
    storage = sorted(live_ids(small_uri))  # ids grow with storage order in these tables
    assert ids_of(dataset(small_uri, num_splits=1, shuffle=False)) == storage[: len(storage)]
    two = ids_of(dataset(small_uri, num_splits=2, shuffle=False))
    length = len(storage) // 2
    assert two[0::2] == storage[:length]
    assert two[1::2] == storage[length : 2 * length]


def test_seed_none_draws_a_recorded_seed(small_uri):
    first = dataset(small_uri, shuffle_seed=None)
    second = dataset(small_uri, shuffle_seed=None)
    assert first.shuffle_seed != second.shuffle_seed
    assert first.state_dict()["shuffle_seed"] == first.shuffle_seed


def test_set_epoch_rules(small_uri, caplog):
    """G8: same epoch is a no-op (also while iterating); another closes a suspended
    iterator, logs what was left and restarts counts."""
    data = dataset(small_uri, num_splits=2)
    iterator = iter(data)
    first = [int(next(iterator)["id"]) for _ in range(4)]
    data.set_epoch(0)
    assert data.state_dict()["samples_consumed_per_split"] == [2, 2]
    assert [int(next(iterator)["id"]) for _ in range(2)] == ids_of(dataset(small_uri, num_splits=2))[4:6]
    with caplog.at_level(logging.INFO, logger="streaming"):
        data.set_epoch(1)
    left = 2 * data.split_length - 6
    assert (
        f"leaves epoch 0 of rank 0 with {left} of {2 * data.split_length} samples undelivered" in caplog.text
    )
    with pytest.raises(RuntimeError, match=r"closed by set_epoch\(1\)"):
        next(iterator)
    assert data.epoch == 1 and len(data) == 2 * data.split_length
    assert data.state_dict()["samples_consumed_per_split"] == [0, 0]
    assert ids_of(data) == ids_of(dataset(small_uri, num_splits=2, epoch=1))
    assert first == ids_of(dataset(small_uri, num_splits=2))[:4]


def test_finished_epoch_yields_nothing_and_warns(small_uri):
    data = dataset(small_uri, num_splits=2)
    ids_of(data)
    assert len(data) == 0
    with pytest.warns(EpochCompleteWarning, match=r"set_epoch\(1\)"):
        assert list(data) == []


def test_len_follows_the_committed_position(small_uri):
    """G2 and G7: len() is what the next iterator yields, also after a partial iterator
    that stopped inside a cycle (its samples count)."""
    data = dataset(small_uri, num_splits=4, rank=1, world_size=2)
    assert len(data) == 2 * data.split_length
    iterator = iter(data)
    for _ in range(7):  # 3 full cycles of 2 splits plus half a cycle
        next(iterator)
    iterator.close()
    assert len(data) == 2 * data.split_length - 7
    assert len(ids_of(data)) == 2 * data.split_length - 7


def test_new_iterator_continues_and_closes_the_old_one(small_uri):
    """G13 with num_workers=0: the superseded iterator raises, nothing is delivered twice."""
    data = dataset(small_uri, num_splits=2)
    old = iter(data)
    head = [int(next(old)["id"]) for _ in range(6)]
    rest = ids_of(data)
    with pytest.raises(RuntimeError, match=r"closed by a new iterator \(iter\(dataset\)\)"):
        next(old)
    assert head + rest == ids_of(dataset(small_uri, num_splits=2))


def test_samples_are_numpy_and_collate_to_tensors(small_uri):
    data = dataset(small_uri, num_splits=1, columns=["id", "label", "vec", "text"])
    sample = next(iter(data))
    assert isinstance(sample["id"], np.int64) and isinstance(sample["label"], np.int32)
    assert isinstance(sample["vec"], np.ndarray) and sample["vec"].shape == (4,)
    assert sample["vec"].flags.writeable
    assert np.array_equal(sample["vec"], np.arange(4, dtype=np.float32) + sample["id"])
    assert sample["text"] == f"row-{sample['id']}"
    batch = next(iter(DataLoader(data, batch_size=8)))
    assert batch["id"].dtype == torch.int64 and batch["vec"].shape == (8, 4)
    assert batch["text"][0].startswith("row-")


def test_variable_length_lists_become_arrays(tmp_path):
    uri = str(tmp_path / "lists.lance")
    tokens = [[1, 2, 3], [4], [5, 6], [], [7, 8, 9, 10]]
    lance.write_dataset(pa.table({"id": np.arange(5), "tokens": pa.array(tokens, pa.list_(pa.int32()))}), uri)
    got = {int(s["id"]): s["tokens"] for s in dataset(uri, num_splits=1)}
    for index, expected in enumerate(tokens):
        assert isinstance(got[index], np.ndarray) and got[index].tolist() == expected


def test_columns_and_filter(small_uri):
    data = dataset(small_uri, num_splits=3, columns=["id"], filter="label < 5")
    samples = list(data)
    assert {tuple(s) for s in samples} == {("id",)}
    expected = live_ids(small_uri, where="label < 5")
    got = ids_of(samples)
    assert len(got) == len(set(got)) == 3 * (len(expected) // 3) and set(got) <= expected
    assert data.state_dict()["filter"] == "label < 5"


def test_filter_on_deleted_rows_and_empty_fragments(tmp_path):
    uri = make_table(tmp_path / "f.lance", [10, 10, 10], deleted=[1, 2, 11, 25])
    data = dataset(uri, num_splits=2, filter="id < 8 OR id >= 20")  # middle fragment matches nothing
    expected = live_ids(uri, where="id < 8 OR id >= 20")
    got = ids_of(data)
    assert len(got) == 2 * (len(expected) // 2) and set(got) <= expected and len(set(got)) == len(got)


def test_transform_runs_per_batch(small_uri):
    seen_sizes = []

    def transform(batch: pa.RecordBatch):
        seen_sizes.append(batch.num_rows)
        return [{"double": int(v) * 2} for v in batch.column("id").to_pylist()]

    data = dataset(small_uri, num_splits=2, transform=transform, read_batch_size=5)
    doubled = [s["double"] for s in data]
    reference = ids_of(dataset(small_uri, num_splits=2))
    assert doubled == [2 * i for i in reference]
    assert max(seen_sizes) <= 5


def test_transform_with_wrong_length_is_an_error(small_uri):
    data = dataset(small_uri, num_splits=1, transform=lambda batch: [1])
    with pytest.raises(ValueError, match="returned 1 samples for a batch of"):
        list(data)
    unchanged = dataset(small_uri, num_splits=1, transform=lambda batch: batch, read_batch_size=4)
    with pytest.raises(
        ValueError, match=r"returned a RecordBatch with 4 rows / 4 columns for a batch of 4 rows"
    ):
        list(unchanged)


@pytest.mark.parametrize("kind", ["lancedb", "lance", "path"])
def test_accepts_lancedb_tables_lance_datasets_and_uris(tmp_path, kind):
    db = lancedb.connect(str(tmp_path / "db"))
    table = db.create_table("t", pa.table({"id": np.arange(40), "x": np.arange(40) * 2.0}))
    source = {"lancedb": table, "lance": table.to_lance(), "path": Path(table.to_lance().uri)}[kind]
    data = StreamingDataset(source, num_splits=4)
    assert sorted(ids_of(data)) == list(range(40))
    assert data.version == table.version


def test_version_is_fixed_at_construction(small_uri):
    data = dataset(small_uri, num_splits=2)
    before = data.version
    lance.write_dataset(table_data(1000, 10), small_uri, mode="append")
    assert data.version == before
    assert set(ids_of(data)) <= live_ids(small_uri, version=before)
    pinned = dataset(small_uri, num_splits=2, version=before)
    assert ids_of(pinned) == ids_of(dataset(small_uri, num_splits=2, version=before))


def label_sorted_table(path: Path, rows: int, labels: int) -> str:
    uri = str(path)
    per = rows // labels
    table = pa.table({"id": np.arange(rows), "label": np.repeat(np.arange(labels, dtype=np.int32), per)})
    lance.write_dataset(table, uri, max_rows_per_file=max(rows // 16, 1))
    return uri


def mean_distinct(labels: np.ndarray, batch: int) -> float:
    usable = len(labels) - len(labels) % batch
    return float(np.mean([len(set(chunk)) for chunk in labels[:usable].reshape(-1, batch)]))


@pytest.mark.parametrize("profile", ["local", "remote"])
@pytest.mark.parametrize("num_splits", [1, 4])
def test_mixing_on_a_label_sorted_table(tmp_path, num_splits, profile):
    """G12: either profile's defaults mix >= 0.8x a uniform permutation (40k rows, 10 labels)."""
    uri = label_sorted_table(tmp_path / "sorted.lance", 40_000, 10)
    data = StreamingDataset(uri, num_splits=num_splits, columns=["label"], storage_profile=profile)
    ours = np.array([s["label"] for s in data])
    uniform = np.random.default_rng(0).permutation(np.repeat(np.arange(10), 4000))
    ratio = mean_distinct(ours, 64) / mean_distinct(uniform, 64)
    assert ratio >= 0.8, f"mixing ratio {ratio:.3f}"


@pytest.mark.parametrize("profile", ["local", "remote"])
def test_mixing_at_scale(tmp_path, profile):
    """G12: >= 0.6x uniform on 2M rows, 1000 labels, batches of 256, S = 1 (either profile's defaults)."""
    uri = label_sorted_table(tmp_path / "big.lance", 2_000_000, 1000)
    iterator = iter(StreamingDataset(uri, num_splits=1, columns=["label"], storage_profile=profile))
    labels = np.array([int(next(iterator)["label"]) for _ in range(256 * 200)])
    iterator.close()
    uniform = np.random.default_rng(0).permutation(np.repeat(np.arange(1000), 2000))[: len(labels)]
    ratio = mean_distinct(labels, 256) / mean_distinct(uniform, 256)
    assert ratio >= 0.6, f"mixing ratio {ratio:.3f}"


def test_epochs_start_in_different_places(tmp_path):
    uri = label_sorted_table(tmp_path / "sorted.lance", 4_000, 10)
    firsts = [
        Counter(int(s["label"]) for s in list(StreamingDataset(uri, num_splits=1, epoch=e))[:200])
        for e in range(3)
    ]
    assert len({tuple(sorted(c.items())) for c in firsts}) == 3


def test_plain_dataloader_without_workers_checkpoints_exactly(small_uri):
    """G9 (one process): a plain DataLoader(num_workers=0) commits per batch."""
    data = dataset(small_uri, num_splits=2)
    loader = DataLoader(data, batch_size=4)
    iterator = iter(loader)
    first = [next(iterator)["id"].tolist() for _ in range(3)]
    state = data.state_dict()
    assert state["samples_consumed_per_split"] == [6, 6]
    del iterator
    resumed = dataset(small_uri, num_splits=2)
    resumed.load_state_dict(state)
    rest = [i for batch in DataLoader(resumed, batch_size=4) for i in batch["id"].tolist()]
    assert [i for batch in first for i in batch] + rest == ids_of(dataset(small_uri, num_splits=2))
    assert len(DataLoader(dataset(small_uri, num_splits=2), batch_size=4)) == -(-2 * data.split_length // 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        default_collate([next(iter(dataset(small_uri, num_splits=2)))])
