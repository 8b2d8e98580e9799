"""A resume never depends on the latest version of the table. (G10)

A state pins the version it was taken on. Building the dataset to load it must not
fail because the table has since been emptied, overwritten, or left with no row
matching the filter: the plan that matters is the one the state pins. Using a
dataset whose own (latest) version cannot be planned, without loading a state,
still fails with the planning error, naming the version.
"""

from __future__ import annotations

from collections.abc import Callable

import lance
import pyarrow as pa
import pytest

from streaming import StreamingDataLoader, StreamingDataset

from helpers import ids_of, json_roundtrip, make_table, take


def options(**extra) -> dict:
    return {"num_splits": 4, "shuffle_seed": 7, "block_rows": 4, "shuffle_buffer_size": 32, **extra}


def empty(uri: str) -> None:
    lance.dataset(uri).delete("id >= 0")


def drop_odd(uri: str) -> None:
    lance.dataset(uri).delete("id % 2 != 0")


def overwrite(uri: str) -> None:
    lance.write_dataset(pa.table({"other": pa.array([1, 2, 3], pa.int64())}), uri, mode="overwrite")


CHANGES: dict[str, tuple[Callable[[str], None], dict]] = {
    "emptied": (empty, {}),
    "filter-matches-nothing": (drop_odd, {"filter": "id % 2 != 0"}),
    "overwritten": (overwrite, {"columns": ["id", "label"]}),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_state_resumes_after_the_latest_version_stopped_planning(tmp_path, change):
    mutate, extra = CHANGES[change]
    uri = make_table(tmp_path / "t.lance", [50, 40, 30], deleted=[3, 60])
    full = ids_of(StreamingDataset(uri, **options(**extra)))
    first = StreamingDataset(uri, **options(**extra))
    delivered = take(iter(first), 37)
    state = json_roundtrip(first.state_dict())
    mutate(uri)

    resumed = StreamingDataset(uri, **options(**extra))  # plans nothing yet; must not raise
    resumed.load_state_dict(state)
    committed = sum(state["samples_consumed_per_split"])
    rest = ids_of(resumed)
    assert full[:committed] + rest == full, "the resumed run is not exactly the rest of the epoch"
    assert committed <= len(delivered)


def test_the_loader_resumes_too(tmp_path):
    uri = make_table(tmp_path / "t.lance", [50, 40, 30])
    planned = sorted(ids_of(StreamingDataset(uri, **options())))
    loader = StreamingDataLoader(StreamingDataset(uri, **options()), batch_size=8)
    batches = iter(loader)
    before = [i for _ in range(3) for i in next(batches)["id"].tolist()]
    state = json_roundtrip(loader.state_dict())
    batches.close()
    empty(uri)
    resumed = StreamingDataLoader(StreamingDataset(uri, **options()), batch_size=8)
    resumed.load_state_dict(state)
    rest = [i for batch in resumed for i in batch["id"].tolist()]
    assert sorted(before + rest) == planned


@pytest.mark.parametrize("use", ["len", "iter", "state_dict", "split_length"])
def test_using_an_unplannable_latest_version_says_why(tmp_path, use):
    uri = make_table(tmp_path / "t.lance", [20])
    empty(uri)
    dataset = StreamingDataset(uri, **options())
    assert "unplanned" in repr(dataset)
    calls = {
        "len": lambda: len(dataset),
        "iter": lambda: list(dataset),
        "state_dict": dataset.state_dict,
        "split_length": lambda: dataset.split_length,
    }
    with pytest.raises(ValueError, match=r"no rows to plan.*version 2 of the table.*load_state_dict"):
        calls[use]()
