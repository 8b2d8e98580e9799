"""Loud mismatches (G11) and snapshot pinning (G10) on load, and the pure validator."""

from __future__ import annotations

import copy
import warnings
from datetime import timedelta

import lance
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streaming import SnapshotGoneError, StreamingDataset, TableMovedWarning, UnownedSplitsWarning
from streaming.state.format import parse_state
from streaming.state.merge import merge_states

from helpers import ids_of, json_roundtrip, live_ids, make_table, table_data, take


def dataset(uri: str, **kwargs) -> StreamingDataset:
    kwargs.setdefault("block_rows", 4)
    kwargs.setdefault("shuffle_buffer_size", 48)
    kwargs.setdefault("num_splits", 2)
    return StreamingDataset(uri, **kwargs)


@pytest.fixture
def saved(small_uri):
    data = dataset(small_uri)
    take(iter(data), 10)
    return json_roundtrip(data.state_dict())


MISMATCHES = [
    ({"num_splits": 4}, "num_splits=2 but this dataset has num_splits=4"),
    ({"shuffle_seed": 3}, "shuffle_seed=0 but this dataset has shuffle_seed=3"),
    ({"shuffle": False}, "shuffle=True but this dataset has shuffle=False"),
    ({"filter": "label > 2"}, "filter=None but this dataset has filter='label > 2'"),
    (
        {"columns": ["id"]},
        "columns=\\['id', 'label', 'vec', 'text'\\] but this dataset has columns=\\['id'\\]",
    ),
    ({"block_rows": 8}, "plan.block_rows=4 but this dataset has plan.block_rows=8"),
    ({"shuffle_buffer_size": 480}, "plan.window_rows=24 but this dataset has plan.window_rows=240"),
    ({"shuffle_clump_size": 2}, "plan.clump_rows=1 but this dataset has plan.clump_rows=2"),
]


@pytest.mark.parametrize(("change", "message"), MISMATCHES)
def test_plan_mismatch_is_refused_and_leaves_the_dataset_unchanged(small_uri, saved, change, message):
    data = dataset(small_uri, **change)
    before = (data.state_dict(), len(data), data.epoch)
    with pytest.raises(ValueError, match=message) as error:
        data.load_state_dict(saved)
    assert "to resume it" in str(error.value)
    assert (data.state_dict(), len(data), data.epoch) == before


def broken(state, path, value):
    state = copy.deepcopy(state)
    target = state
    for key in path[:-1]:
        target = target[key]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return state


MALFORMED = [
    (("format_version",), 99, "format_version=99 but this release reads format_version 1 or 2"),
    (("epoch",), KeyError, "missing 'epoch'"),
    (("plan", "block_rows"), KeyError, "missing 'plan.block_rows'"),
    (
        ("epoch",),
        "1",
        "'epoch' must be a non-negative integer, got '1'; write epoch=1 \\(an integer, not the str '1'\\)",
    ),
    (("shuffle",), 1, "'shuffle' must be a bool, got 1; restore the value state_dict\\(\\) wrote"),
    (("samples_consumed_per_split",), [1], r"has 1 entries but num_splits=2; .*restore the lists"),
    (("num_splits",), 3, r"has 2 entries but num_splits=3; .*edited: restore num_splits=2, the length"),
    (
        ("samples_consumed_per_split",),
        [-1, 0],
        r"'samples_consumed_per_split\[0\]' must be a non-negative integer, got -1; restore the value",
    ),
    (
        ("positions_consumed_per_split",),
        [5, "6"],
        r"'positions_consumed_per_split\[1\]' must be .*, got '6'; "
        r"write positions_consumed_per_split\[1\]=6 ",
    ),
    (
        ("shuffle_seed",),
        3.0,
        r"'shuffle_seed' must be .*, got 3.0; write shuffle_seed=3 \(an integer, not the float",
    ),
    (
        ("positions_consumed_per_split",),
        [5, 999],
        r"positions_consumed_per_split\[1\]=999 but splits .* hold \d+ rows; .*load it into a dataset "
        r"of the table it names .* or restore the value state_dict\(\) wrote \(at most \d+\)",
    ),
    (("positions_consumed_per_split",), [0, 0], "below samples_consumed_per_split"),
    (("owned_splits",), [0, 7], "distinct splits in \\[0, 2\\); .*restore the splits state_dict\\(\\) wrote"),
    (("table",), "somewhere", "'table' must be a dict"),
    (("table", "version"), 1.5, "'table.version' must be a positive integer, got 1.5; restore the value"),
]


@pytest.mark.parametrize(("path", "value", "message"), MALFORMED)
def test_malformed_state_is_refused(small_uri, saved, path, value, message):
    data = dataset(small_uri)
    with pytest.raises(ValueError, match=message):
        data.load_state_dict(broken(saved, path, value))
    assert data.state_dict()["samples_consumed_per_split"] == [0, 0]


def test_peer_checkpoint_is_refused(small_uri):
    peer = {
        "shuffle_seed": 0,
        "num_splits": 2,
        "epoch": 0,
        "samples_consumed_per_split": [3, 3],
        "positions_consumed_per_split": [3, 3],
    }
    with pytest.raises(ValueError, match="comes from another plan"):
        dataset(small_uri).load_state_dict(peer)
    with pytest.raises(ValueError, match="comes from another plan"):
        StreamingDataset.merge_state_dicts([peer])


def test_load_during_iteration_is_refused(small_uri, saved):
    data = dataset(small_uri)
    iterator = iter(data)
    next(iterator)
    with pytest.raises(
        RuntimeError, match=r"cannot load_state_dict while iter\(dataset\) has not finished and is still held"
    ):
        data.load_state_dict(saved)
    iterator.close()
    data.load_state_dict(saved)


def test_epoch_and_counts_are_adopted(small_uri):
    old = dataset(small_uri, epoch=5)
    take(iter(old), 6)
    fresh = dataset(small_uri, epoch=0)
    fresh.load_state_dict(old.state_dict())
    assert fresh.epoch == 5 and fresh.state_dict()["samples_consumed_per_split"] == [3, 3]


def test_pinned_snapshot_survives_append_delete_compact_and_new_columns(tmp_path):
    """G10: a checkpoint resumes on its version whatever happened to the table since."""
    uri = make_table(tmp_path / "t.lance", [30, 30, 30], deleted=[5, 6])
    first = dataset(uri, num_splits=3)
    head = take(iter(first), 12)
    state = json_roundtrip(first.state_dict())
    version = first.version
    expected = ids_of(dataset(uri, num_splits=3, version=version))

    lance.write_dataset(table_data(90, 40), uri, mode="append")
    lance.dataset(uri).delete("id < 20")
    lance.dataset(uri).optimize.compact_files(target_rows_per_fragment=1000)
    lance.dataset(uri).add_columns({"extra": "id * 2"})

    resumed = dataset(uri, num_splits=3)  # built on the newest version, every column
    assert resumed.version > version
    resumed.load_state_dict(state)
    assert resumed.version == version
    assert head + ids_of(resumed) == expected
    assert set(expected) <= live_ids(uri, version=version)


def test_cleaned_up_version_is_a_clear_error(tmp_path):
    uri = make_table(tmp_path / "t.lance", [20, 20])
    first = dataset(uri)
    state = json_roundtrip(first.state_dict())
    lance.write_dataset(table_data(40, 10), uri, mode="append")
    lance.dataset(uri).cleanup_old_versions(older_than=timedelta(0), delete_unverified=True)
    data = dataset(uri)
    with pytest.raises(
        SnapshotGoneError, match=rf"version {first.version} of table .* no longer exists.*tag_snapshot=True"
    ):
        data.load_state_dict(state)
    assert data.state_dict()["table"]["version"] == data.version != first.version


def test_other_uri_only_warns(tmp_path):
    one = make_table(tmp_path / "a.lance", [25, 25])
    two = make_table(tmp_path / "b.lance", [25, 25])
    first = dataset(one)
    take(iter(first), 4)
    copy_ = dataset(two)
    with pytest.warns(TableMovedWarning, match="a.lance"):
        copy_.load_state_dict(json_roundtrip(first.state_dict()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TableMovedWarning)
        state_two = copy_.state_dict()
        assert state_two["samples_consumed_per_split"] == [2, 2]
    moved = {**json_roundtrip(first.state_dict()), "table": {**state_two["table"]}}
    with pytest.warns(TableMovedWarning, match=r"merging them as copies of one table"):
        StreamingDataset.merge_state_dicts([json_roundtrip(first.state_dict()), moved])


# ---- the pure validator and merge, without Lance ---------------------------------

BASE = {
    "format_version": 2,
    "num_splits": 4,
    "shuffle": True,
    "shuffle_seed": 1,
    "epoch": 0,
    "plan": {"block_rows": 4, "window_rows": 8, "clump_rows": 1, "plan_format": 1},
    "samples_consumed_per_split": [2, 2, 2, 2],
    "positions_consumed_per_split": [2, 2, 2, 2],
    "owned_splits": [0, 2],
    "table": {"uri": "/t", "version": 3},
    "filter": None,
    "columns": ["id"],
    "packing": None,
}
PACKED = {
    **BASE,
    "samples_consumed_per_split": [2, 2, 1, 1],
    "positions_consumed_per_split": [1, 0, 0, 0],
    "packing": {
        "pack_sequences": 8,
        "eos_id": 1,
        "pad_id": 0,
        "blocks_per_epoch": 12,
        "anchors": [[2, 1, 3], [2, 0, 5], [1, 0, 0], [0, 0, 0]],
    },
}


def test_a_version_1_state_is_read_and_written_as_version_2():
    old = {key: value for key, value in BASE.items() if key != "packing"}
    parsed = parse_state({**old, "format_version": 1})
    assert parsed.to_dict() == BASE


def test_a_packing_state_round_trips():
    assert parse_state(copy.deepcopy(PACKED)).to_dict() == PACKED


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_any_damaged_packing_field_is_refused_with_value_error(data):
    state = copy.deepcopy(PACKED)
    key = data.draw(st.sampled_from(sorted(PACKED["packing"])))
    value = data.draw(json_values)
    state["packing"][key] = value
    try:
        parsed = parse_state(state)
    except ValueError:
        return
    assert parsed.to_dict()["packing"][key] == value


def test_an_anchor_ahead_of_its_count_is_refused():
    state = copy.deepcopy(PACKED)
    state["packing"]["anchors"][3] = [2, 0, 0]
    with pytest.raises(
        ValueError, match=r"packing.anchors\[3\]=\[2, 0, 0\] ahead of samples_consumed_per_split\[3\]=1"
    ):
        parse_state(state)


def test_merge_takes_packing_anchors_from_owners_and_the_furthest_elsewhere():
    one = copy.deepcopy(PACKED)
    two = {**copy.deepcopy(PACKED), "owned_splits": [1]}
    two["packing"]["anchors"][1] = [2, 0, 7]
    two["positions_consumed_per_split"] = [1, 0, 0, 0]
    with pytest.warns(UnownedSplitsWarning):
        merged = merge_states([one, two], allow_lag=True)
    assert merged["packing"]["anchors"] == [[2, 1, 3], [2, 0, 7], [1, 0, 0], [0, 0, 0]]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**6) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=20,
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_any_damaged_state_is_refused_with_value_error(data):
    """Never a crash, never silent acceptance: a damaged field gives ValueError."""
    state = copy.deepcopy(BASE)
    key = data.draw(st.sampled_from(sorted(BASE)))
    value = data.draw(json_values)
    state[key] = value
    try:
        parsed = parse_state(state)
    except ValueError:
        return
    # Accepted: only if the damage still forms a valid state.
    assert parsed.to_dict()[key] == (value if key != "owned_splits" else sorted(value))


def test_merge_refuses_different_plans_epochs_and_disagreeing_owners():
    other = copy.deepcopy(BASE)
    other["owned_splits"] = [1, 3]
    assert merge_states([BASE, other])["owned_splits"] == [0, 1, 2, 3]
    for key, value, message in [
        (
            "shuffle_seed",
            2,
            "shuffle_seed mismatch: state 0 has shuffle_seed=1 but state 1 has shuffle_seed=2, so "
            "they come from different plans; merge the states of one run",
        ),
        ("epoch", 1, "state 0 has epoch=0 but state 1 has epoch=1"),
        ("table", {"uri": "/t", "version": 4}, "version=3 but state 1 has version=4"),
    ]:
        with pytest.raises(ValueError, match=message):
            merge_states([BASE, {**other, key: value}])
    disagree = {
        **other,
        "owned_splits": [0],
        "samples_consumed_per_split": [3, 2, 2, 2],
        "positions_consumed_per_split": [3, 2, 2, 2],
    }
    with pytest.raises(ValueError, match="two states own split 0"):
        merge_states([BASE, disagree])
    with pytest.raises(ValueError, match="at least one state"):
        merge_states([])


def test_merge_takes_counts_from_owners():
    one = {
        **copy.deepcopy(BASE),
        "samples_consumed_per_split": [5, 9, 5, 9],
        "positions_consumed_per_split": [5, 9, 5, 9],
    }
    two = {
        **copy.deepcopy(BASE),
        "owned_splits": [1, 3],
        "samples_consumed_per_split": [0, 5, 0, 5],
        "positions_consumed_per_split": [0, 5, 0, 5],
    }
    merged = merge_states([one, two])
    assert merged["samples_consumed_per_split"] == [5, 5, 5, 5]
    assert np.array_equal(merged["positions_consumed_per_split"], [5, 5, 5, 5])


def _numpy_ints(data):
    """``data`` with every int (not bool) a numpy int64, as a state built from numpy values holds."""
    if isinstance(data, dict):
        return {key: _numpy_ints(value) for key, value in data.items()}
    if isinstance(data, list):
        return [_numpy_ints(value) for value in data]
    return np.int64(data) if isinstance(data, int) and not isinstance(data, bool) else data


def test_numpy_integers_in_a_state_are_integers():
    for state in (BASE, PACKED):
        parsed = parse_state(_numpy_ints(copy.deepcopy(state))).to_dict()
        assert parsed == state
        assert json_roundtrip(parsed) == state, "the parsed state holds plain ints (JSON data)"
