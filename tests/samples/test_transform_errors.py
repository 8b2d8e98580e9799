"""``on_transform_error``: rows a transform fails on are dropped, resume stays exact.

Transforms here fail deterministically on every id with ``id % 7 == 3``, as a
malformed row would; the failing rows sit in every split and most batches.
"""

from __future__ import annotations

import logging
import warnings
from collections import Counter

import pyarrow as pa
import pytest

from streaming import StreamingDataLoader, StreamingDataset, TransformErrorWarning

from helpers import check_resume_everywhere, ids_of, json_roundtrip, make_table

NUM_SPLITS = 4


def bad(row_id: int) -> bool:
    return row_id % 7 == 3


class FailOnBad:
    """A picklable transform that raises ``KeyError`` on any batch holding a bad row."""

    def __call__(self, batch: pa.RecordBatch) -> list[dict]:
        rows = batch.to_pylist()
        for row in rows:
            if bad(row["id"]):
                raise KeyError(f"cannot handle row {row['id']}")
        return rows


def skip_key_errors(error: Exception) -> bool:
    """A picklable handler: drop rows that raised KeyError, raise anything else."""
    return isinstance(error, KeyError)


def never_skip(error: Exception) -> bool:
    return False


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    """163 live rows in 4 fragments, ids 0..169 minus 7 deleted."""
    path = tmp_path_factory.mktemp("bad_rows") / "t.lance"
    return make_table(path, [40, 35, 50, 45], deleted=range(60, 67))


def dataset(uri: str, on_error="skip", **kwargs) -> StreamingDataset:
    kwargs.setdefault("num_splits", NUM_SPLITS)
    kwargs.setdefault("read_batch_size", 4)
    return StreamingDataset(
        uri,
        shuffle_seed=5,
        block_rows=4,
        shuffle_buffer_size=32,
        transform=FailOnBad(),
        on_transform_error=on_error,
        **kwargs,
    )


def planned(uri: str, **kwargs) -> list[int]:
    """Every planned id of the epoch, read without a failing transform."""
    kwargs.setdefault("num_splits", NUM_SPLITS)
    return ids_of(StreamingDataset(uri, shuffle_seed=5, block_rows=4, shuffle_buffer_size=32, **kwargs))


def good(ids: list[int]) -> list[int]:
    return sorted(i for i in ids if not bad(i))


@pytest.mark.parametrize("on_error", ["skip", skip_key_errors])
def test_only_the_failing_rows_are_dropped(uri, on_error):
    plan = planned(uri)
    got = ids_of(dataset(uri, on_error))
    assert sorted(got) == good(plan), "a good row was lost or repeated, or a bad row delivered"
    assert any(bad(i) for i in plan), "the table has no bad row; the test proves nothing"


def test_each_split_keeps_its_planned_order(uri):
    """Dropping rows shifts the interleaving of splits but never a split's own order."""
    plan = StreamingDataset(uri, num_splits=1, shuffle_seed=5, block_rows=4, shuffle_buffer_size=32)
    assert ids_of(dataset(uri, num_splits=1)) == [i for i in ids_of(plan) if not bad(i)]


def test_raise_is_the_default_and_reraises(uri):
    data = StreamingDataset(uri, num_splits=NUM_SPLITS, transform=FailOnBad(), read_batch_size=4)
    with pytest.raises(KeyError, match="cannot handle row"):
        ids_of(data)
    with pytest.raises(KeyError, match="cannot handle row"):
        ids_of(dataset(uri, never_skip))


def test_warn_warns_once_per_failing_batch(uri):
    with pytest.warns(TransformErrorWarning, match=r"FailOnBad failed on \d of \d rows .*KeyError") as caught:
        got = ids_of(dataset(uri, "warn"))
    assert sorted(got) == good(planned(uri))
    assert len(caught) >= sum(bad(i) for i in planned(uri)) // 4, "fewer warnings than failing batches"


def test_warn_logs_each_skipped_row(uri, caplog):
    """Drop-in: as ``lancedb.streaming`` does, "warn" logs the rows it skips (a WARNING
    record per row, naming the error), besides the TransformErrorWarning."""
    with warnings.catch_warnings(), caplog.at_level(logging.WARNING, logger="streaming"):
        warnings.simplefilter("ignore", TransformErrorWarning)
        ids_of(dataset(uri, "warn"))
    skipped = [record for record in caplog.records if record.getMessage().startswith("Skipped position")]
    assert len(skipped) == sum(bad(i) for i in planned(uri)) > 0
    assert all("KeyError('cannot handle row" in record.getMessage() for record in skipped)


def test_stats_count_the_dropped_rows(uri):
    data = dataset(uri)
    got = ids_of(data)
    stats = data.stats()
    assert stats["rows_delivered"] == len(got)
    assert stats["rows_skipped"] == sum(bad(i) for i in planned(uri))
    assert len(data) == 0, "every position of the epoch was passed"


def test_a_broken_transform_contract_is_never_skipped(uri):
    def one_short(batch: pa.RecordBatch) -> list[dict]:
        return batch.to_pylist()[1:]

    data = StreamingDataset(uri, num_splits=NUM_SPLITS, transform=one_short, on_transform_error="skip")
    with pytest.raises(ValueError, match="exactly one sample per row, one output row per input row"):
        ids_of(data)


@pytest.mark.parametrize("value", ["ignore", 3, None])
def test_unknown_settings_are_refused(uri, value):
    with pytest.raises(
        ValueError, match=r"on_transform_error must be 'raise', 'skip', 'warn', 'replace' or a callable"
    ):
        dataset(uri, value)


@pytest.mark.parametrize("num_splits", [1, NUM_SPLITS])
def test_resume_from_every_position_is_exact(uri, num_splits):
    check_resume_everywhere(lambda: dataset(uri, num_splits=num_splits))


def test_resume_twice_is_exact(uri):
    check_resume_everywhere(lambda: dataset(uri), prefixes=[0, 9, 50, 101], twice=True)


def test_two_ranks_drop_independently_and_merge_exactly(uri):
    """Ranks stop at a lockstep step; the merged state resumes on one rank."""
    before = []
    states = []
    for rank in range(2):
        data = dataset(uri, rank=rank, world_size=2)
        iterator = iter(data)
        before += [int(next(iterator)["id"]) for _ in range(40)]
        states.append(json_roundtrip(data.state_dict()))
        iterator.close()
    merged = StreamingDataset.merge_state_dicts(states)
    resumed = dataset(uri)
    resumed.load_state_dict(merged)
    rest = ids_of(resumed)
    assert sorted(before + rest) == good(planned(uri)), "lost or repeated rows across the merge"


# -- with real worker processes ---------------------------------------------------


def loader(data: StreamingDataset, workers: int, **kwargs) -> StreamingDataLoader:
    return StreamingDataLoader(data, batch_size=4, num_workers=workers, timeout=120, **kwargs)


@pytest.mark.parametrize("on_error", ["skip", "warn", skip_key_errors])
def test_workers_drop_only_the_failing_rows(uri, on_error):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TransformErrorWarning)  # raised in the workers' processes
        batches = [batch["id"].tolist() for batch in loader(dataset(uri, on_error), 2)]
    got = [i for batch in batches for i in batch]
    assert Counter(got) == Counter(good(planned(uri))), "lost, repeated or bad rows"


def test_spawned_workers_drop_only_the_failing_rows(uri):
    batches = loader(dataset(uri, skip_key_errors), 2, multiprocessing_context="spawn")
    got = [i for batch in batches for i in batch["id"].tolist()]
    assert Counter(got) == Counter(good(planned(uri))), "lost, repeated or bad rows"


def test_workers_stats_and_resume_after_drops_are_exact(uri):
    data = dataset(uri)
    batches = loader(data, 2)
    iterator = iter(batches)
    before = [i for _ in range(10) for i in next(iterator)["id"].tolist()]  # a logical step boundary
    state = json_roundtrip(batches.state_dict())
    stats = data.stats()
    del iterator
    assert stats["rows_delivered"] == len(before)
    assert stats["rows_skipped"] == state_skipped(state)
    resumed = dataset(uri)
    resumed.load_state_dict(state)
    rest = [i for batch in loader(resumed, 2) for i in batch["id"].tolist()]
    assert sorted(before + rest) == good(planned(uri))


def state_skipped(state: dict) -> int:
    return sum(state["positions_consumed_per_split"]) - sum(state["samples_consumed_per_split"])


@pytest.mark.parametrize("method", ["spawn", None])
def test_a_handler_that_cannot_be_pickled_is_refused_before_workers_start(uri, method):
    data = dataset(uri, lambda error: True)
    with pytest.raises(TypeError, match=r"on_transform_error .*<lambda> cannot be pickled"):
        iter(loader(data, 2, multiprocessing_context=method))


# -- on_transform_error="replace": equal lengths ------------------------------------


def test_replace_keeps_every_length_with_copies_of_good_rows_of_the_batch(uri):
    """A failing row's sample is a copy of a good sample of its batch: every split
    yields L samples, no bad row is delivered, every good row comes at least once."""
    plan = planned(uri)
    got = ids_of(dataset(uri, "replace"))
    assert len(got) == len(plan) and not any(bad(i) for i in got)
    assert set(got) == set(good(plan))
    assert len(got) - len(set(got)) == len(plan) - len(good(plan)), "one copy per failing row"
    again = dataset(uri, "replace", transform_parallelism=3, transform_queue_depth=1)
    assert ids_of(again) == got, "the same copies on every run, whatever the threads"


def test_replace_keeps_ranks_equal_and_resumes_exactly(uri):
    """Ranks yield equal lengths whatever each drops, and resume from every position
    gives the same stream as one run."""
    assert {len(dataset(uri, "replace", rank=rank, world_size=2)) for rank in range(2)} == {
        NUM_SPLITS // 2 * dataset(uri).split_length
    }
    check_resume_everywhere(lambda: dataset(uri, "replace"), prefixes=range(0, 163, 5))


def test_replace_takes_a_row_of_the_window_when_a_whole_batch_fails(uri):
    """Batches of one row: a failing row has no good neighbour in its batch, so the
    nearest good row of its window stands in; the same on every run."""
    plan = planned(uri)
    got = ids_of(dataset(uri, "replace", read_batch_size=1))
    assert len(got) == len(plan) and not any(bad(i) for i in got) and set(got) == set(good(plan))
    assert ids_of(dataset(uri, "replace", read_batch_size=1, transform_parallelism=1)) == got


def always_fail(batch: pa.RecordBatch) -> list:
    raise KeyError("no row can be transformed")


def test_replace_refuses_a_window_that_fails_on_every_row(uri):
    """With no good row in a whole window there is nothing to copy: a clear error, not a hole."""
    data = StreamingDataset(uri, transform=always_fail, on_transform_error="replace", shuffle_buffer_size=64)
    with pytest.raises(RuntimeError, match=r"failed on every row of a window of the split"):
        ids_of(data)
