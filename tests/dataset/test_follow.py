"""follow_latest: a growing table read at its newest version from each new epoch on. (G15)"""

from __future__ import annotations

from collections import Counter
from itertools import islice

import lance
import pytest

from streaming import StreamingDataLoader, StreamingDataset

from helpers import ids_of, json_roundtrip, make_table, table_data
from launching import delivered, ids, launch

SPLITS = 4


def grow(uri: str, start: int, count: int = 40) -> int:
    """Append rows with ids start.. and return the new version."""
    return int(lance.write_dataset(table_data(start, count), uri, mode="append").version)


def planned(uri: str, version: int, epoch: int) -> list[int]:
    data = StreamingDataset(uri, version=version, num_splits=SPLITS, epoch=epoch, block_rows=4)
    return ids_of(data)


def follower(uri: str, **options) -> StreamingDataset:
    return StreamingDataset(uri, num_splits=SPLITS, block_rows=4, endless=True, follow_latest=True, **options)


def test_an_endless_dataset_reads_the_newest_version_from_its_next_epoch(tmp_path):
    uri = make_table(tmp_path / "t.lance", [50, 30])
    first_version = lance.dataset(uri).version
    data = follower(uri)
    iterator = iter(data)
    epoch0 = [int(next(iterator)["id"]) for _ in range(30)]
    newest = grow(uri, 1_000)  # appended in the middle of epoch 0
    size0 = len(planned(uri, first_version, 0))
    epoch0 += [int(next(iterator)["id"]) for _ in range(size0 - 30)]
    assert data.version == first_version, "epoch 0 must stay on its snapshot"
    assert epoch0 == planned(uri, first_version, 0)
    epoch1_plan = planned(uri, newest, 1)
    epoch1 = [int(next(iterator)["id"]) for _ in range(20)]
    assert data.version == newest and data.epoch == 1
    state = json_roundtrip(data.state_dict())
    assert state["table"]["version"] == newest and state["epoch"] == 1
    iterator.close()
    assert any(i >= 1_000 for i in epoch1_plan), "epoch 1 holds the appended rows"
    # several ranks without a process group cannot follow (test below); the state pins v2 anyway
    ranks = [
        StreamingDataset(uri, num_splits=SPLITS, block_rows=4, rank=rank, world_size=2) for rank in range(2)
    ]
    rest = []
    for rank in ranks:
        rank.load_state_dict(state)
        assert rank.version == newest
        rest += [int(sample["id"]) for sample in islice(iter(rank), len(rank))]
    assert Counter(epoch1 + rest) == Counter(epoch1_plan), "epoch 1 is not exactly once after the resume"


def test_without_follow_latest_every_epoch_reads_the_same_snapshot(tmp_path):
    uri = make_table(tmp_path / "t.lance", [50, 30])
    data = StreamingDataset(uri, num_splits=SPLITS, block_rows=4, endless=True)
    version = data.version
    iterator = iter(data)
    next(iterator)
    grow(uri, 1_000)
    for _ in range(len(planned(uri, version, 0)) + 5):
        next(iterator)
    assert (data.epoch, data.version) == (1, version)


def test_set_epoch_and_loader_workers_follow_the_newest_version(tmp_path):
    uri = make_table(tmp_path / "t.lance", [50, 30])
    data = StreamingDataset(uri, num_splits=SPLITS, block_rows=4, follow_latest=True)
    loader = StreamingDataLoader(data, batch_size=8, num_workers=2, timeout=120)
    assert sorted(i for batch in loader for i in batch["id"].tolist()) == sorted(
        planned(uri, data.version, 0)
    )
    newest = grow(uri, 1_000)
    loader.set_epoch(1)
    assert data.version == newest
    epoch1 = sorted(i for batch in loader for i in batch["id"].tolist())
    assert epoch1 == sorted(planned(uri, newest, 1)) and max(epoch1) >= 1_000


def test_several_ranks_need_a_process_group_to_agree(tmp_path):
    uri = make_table(tmp_path / "t.lance", [50])
    with pytest.raises(ValueError, match="follow_latest with world_size=2 needs an initialised"):
        StreamingDataset(uri, num_splits=SPLITS, rank=0, world_size=2, follow_latest=True)


def test_gloo_ranks_agree_on_the_version_of_the_next_epoch(tmp_path):
    """Rank 0 appends rows during epoch 0; both ranks read that version in epoch 1, which
    delivers each of its planned rows exactly once, crossing at the same step."""
    uri = make_table(tmp_path / "t.lance", [120, 90])
    start = lance.dataset(uri).version
    out = tmp_path / "run"
    launch(
        uri, out, 2, workers=2, batch=6, seed=4, endless=True, follow_latest=True, append_at=3, stop_after=40
    )
    records = delivered(out)
    versions = {record["epoch"]: set() for record in records}
    for record in records:
        versions[record["epoch"]].add(record["version"])
    assert versions[0] == {start} and versions[1] == {start + 1}, versions
    epoch1 = StreamingDataset(
        uri, version=start + 1, num_splits=12, shuffle_seed=4, epoch=1, block_rows=4, shuffle_buffer_size=96
    )
    done = Counter(ids(records, epoch=1))
    assert len(ids(records, epoch=2)) > 0, "the run must have finished epoch 1"
    assert done == Counter(ids_of(epoch1)), "epoch 1 of the new version is not exactly once"
