"""Integrity: protected snapshots, damaged states, unbatchable columns, killed workers."""

from __future__ import annotations

import copy
import os
import signal
from collections import Counter
from datetime import timedelta

import lance
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streaming import SnapshotGoneError, StreamingDataLoader, StreamingDataset

from helpers import ids_of, json_roundtrip, make_table, table_data, take


def dataset(uri: str, **kwargs) -> StreamingDataset:
    kwargs.setdefault("num_splits", 4)
    kwargs.setdefault("block_rows", 4)
    kwargs.setdefault("shuffle_buffer_size", 48)
    return StreamingDataset(uri, **kwargs)


def cleanup(uri: str) -> None:
    lance.dataset(uri).cleanup_old_versions(
        older_than=timedelta(0), delete_unverified=True, error_if_tagged_old_versions=False
    )


def test_tagged_snapshot_survives_cleanup_until_released(tmp_path):
    uri = make_table(tmp_path / "t.lance", [30, 30])
    first = dataset(uri, tag_snapshot=True)
    head = take(iter(first), 8)
    state = json_roundtrip(first.state_dict())
    expected = ids_of(dataset(uri, version=first.version))
    lance.write_dataset(table_data(60, 20), uri, mode="append")
    lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=1000)
    cleanup(uri)
    resumed = dataset(uri)
    resumed.load_state_dict(state)
    assert head + ids_of(resumed) == expected
    assert first.release_snapshot() is True
    assert first.release_snapshot() is False
    cleanup(uri)
    with pytest.raises(SnapshotGoneError, match="no longer exists"):
        dataset(uri).load_state_dict(state)


def test_untagged_by_default(tmp_path):
    uri = make_table(tmp_path / "t.lance", [30])
    dataset(uri)
    assert lance.dataset(uri).tags.list() == {}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    uri = make_table(tmp_path_factory.mktemp("states") / "t.lance", [30, 25, 40])
    data = dataset(uri)
    take(iter(data), 10)
    return uri, json_roundtrip(data.state_dict())


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 10**9) | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def damage(state: dict, data: st.DataObject) -> dict:
    state = copy.deepcopy(state)
    target = state
    key = data.draw(st.sampled_from(sorted(state)))
    if isinstance(state[key], dict) and data.draw(st.booleans()):
        target, key = state[key], data.draw(st.sampled_from(sorted(state[key])))
    action = data.draw(st.sampled_from(["replace", "delete", "add"]))
    if action == "delete":
        del target[key]
    elif action == "add":
        target[data.draw(st.text(min_size=1, max_size=8))] = data.draw(json_values)
    else:
        target[key] = data.draw(json_values)
    return state


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_damaged_states_are_refused_cleanly(saved, data):
    """load_state_dict and merge_state_dicts: ValueError or a valid state, never a crash."""
    uri, state = saved
    broken = damage(state, data)
    target = dataset(uri)
    before = target.state_dict()
    for action in (target.load_state_dict, lambda s: StreamingDataset.merge_state_dicts([state, s])):
        try:
            action(broken)
        except ValueError:
            assert target.state_dict() == before, "a refused state changed the dataset"


def test_nulls_and_ragged_lists_get_a_message_naming_the_column(tmp_path):
    uri = str(tmp_path / "odd.lance")
    table = pa.table(
        {
            "id": np.arange(8),
            "maybe": pa.array([1.0, None, 3.0, 4.0, None, 6.0, 7.0, 8.0]),
            "tokens": pa.array([[1], [1, 2], [1, 2, 3], [4], [5, 6], [7], [8, 9], [0]], pa.list_(pa.int64())),
        }
    )
    lance.write_dataset(table, uri)
    with pytest.raises(TypeError, match=r"column 'maybe' has nulls.*filter='maybe IS NOT NULL'"):
        list(StreamingDataLoader(StreamingDataset(uri, columns=["id", "maybe"]), batch_size=8))
    with pytest.raises(
        TypeError, match=r"column 'tokens' holds values default_collate cannot batch.*transform="
    ):
        list(StreamingDataLoader(StreamingDataset(uri, columns=["id", "tokens"]), batch_size=8))
    assert len(ids_of(StreamingDataset(uri, filter="maybe IS NOT NULL"))) == 6


def test_killed_worker_is_a_clear_error_and_the_state_resumes(tmp_path):
    uri = make_table(tmp_path / "t.lance", [60, 50, 70])
    data = dataset(uri)
    # Without timeout= torch itself checks every 5 s; the loader checks every 0.1 s either way.
    # No head start: with one, this 45-batch epoch may end in the trainer before its workers are up.
    batches = StreamingDataLoader(data, batch_size=4, num_workers=2, head_start=False)
    iterator = iter(batches)
    seen = [next(iterator)["id"].tolist() for _ in range(4)]
    state = json_roundtrip(batches.state_dict())
    os.kill(iterator._batches._workers[0].pid, signal.SIGKILL)
    with pytest.raises(RuntimeError, match=r"DataLoader worker \(pid.*\) .*(killed|exited)"):
        for _ in range(1000):
            seen.append(next(iterator)["id"].tolist())
    rings = [name for name in os.listdir("/dev/shm") if name.startswith(iterator._channel.prefix)]
    assert rings == [], "the failed iterator freed its workers' shared memory"
    final = json_roundtrip(batches.state_dict())  # the last boundary the trainer received
    planned = Counter(ids_of(dataset(uri)))
    for checkpoint in (state, final):
        committed_rows = sum(checkpoint["samples_consumed_per_split"])
        sizes = np.cumsum([len(batch) for batch in seen])
        prefix = int(np.searchsorted(sizes, committed_rows)) + 1 if committed_rows else 0
        assert committed_rows == (sizes[prefix - 1] if prefix else 0)
        resumed = dataset(uri)
        resumed.load_state_dict(checkpoint)
        delivered = [i for batch in seen[:prefix] for i in batch] + ids_of(resumed)
        assert Counter(delivered) == planned, f"resume from {committed_rows} committed rows"
