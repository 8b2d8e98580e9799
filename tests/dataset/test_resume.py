"""Exact resume (G5, G7): every position, twice, across world sizes, through files."""

from __future__ import annotations

import io
import json
import warnings

import pytest
import torch

from streaming import EpochCompleteWarning, StreamingDataset, UnownedSplitsWarning

from helpers import check_resume_everywhere, ids_of, json_roundtrip, live_ids, take


def dataset(uri: str, **kwargs) -> StreamingDataset:
    kwargs.setdefault("block_rows", 4)
    kwargs.setdefault("shuffle_buffer_size", 48)
    return StreamingDataset(uri, **kwargs)


def torch_roundtrip(state):
    buffer = io.BytesIO()
    torch.save({"dataset": state}, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)["dataset"]


@pytest.mark.parametrize("num_splits", [1, 3])
def test_resume_from_every_position(table_uri, num_splits):
    check_resume_everywhere(lambda: dataset(table_uri, num_splits=num_splits))


def test_resume_from_every_position_of_one_rank(small_uri):
    check_resume_everywhere(lambda: dataset(small_uri, num_splits=6, rank=1, world_size=3))


def test_resume_unshuffled_and_filtered(small_uri):
    check_resume_everywhere(lambda: dataset(small_uri, num_splits=2, shuffle=False))
    check_resume_everywhere(lambda: dataset(small_uri, num_splits=2, filter="label >= 3"))


def test_resume_twice_in_a_row(small_uri):
    check_resume_everywhere(lambda: dataset(small_uri, num_splits=2), prefixes=range(0, 120, 7), twice=True)


def test_resume_through_torch_save(small_uri):
    check_resume_everywhere(
        lambda: dataset(small_uri, num_splits=3), prefixes=[0, 1, 5, 30, 117], roundtrip=torch_roundtrip
    )


def test_resume_at_epoch_start_and_end(small_uri):
    start = dataset(small_uri, num_splits=2)
    state = json_roundtrip(start.state_dict())
    resumed = dataset(small_uri, num_splits=2)
    resumed.load_state_dict(state)
    assert ids_of(resumed) == ids_of(dataset(small_uri, num_splits=2))

    finished = dataset(small_uri, num_splits=2, epoch=3)
    ids_of(finished)
    end = dataset(small_uri, num_splits=2)
    end.load_state_dict(json_roundtrip(finished.state_dict()))
    assert end.epoch == 3 and len(end) == 0
    end.set_epoch(4)
    assert ids_of(end) == ids_of(dataset(small_uri, num_splits=2, epoch=4))


def test_every_rank_resumes_from_one_ranks_state(small_uri):
    """A synchronous job on the same topology resumes from rank 0's state alone."""
    world_size, num_splits, steps = 3, 6, 4
    ranks = [
        dataset(small_uri, num_splits=num_splits, rank=r, world_size=world_size) for r in range(world_size)
    ]
    iterators = [iter(r) for r in ranks]
    first = [take(it, steps * 2) for it in iterators]  # 2 owned splits: 4 full cycles
    state = json_roundtrip(ranks[0].state_dict())
    assert state["samples_consumed_per_split"] == [steps] * num_splits
    assert state["owned_splits"] == [0, 3]
    for rank in range(world_size):
        resumed = dataset(small_uri, num_splits=num_splits, rank=rank, world_size=world_size)
        resumed.load_state_dict(state)
        full = ids_of(dataset(small_uri, num_splits=num_splits, rank=rank, world_size=world_size))
        assert first[rank] + ids_of(resumed) == full, f"rank {rank}"


def run_then_resume(uri: str, old_world: int, new_world: int, *, num_splits: int, cycles: int) -> None:
    """Old world runs ``cycles`` cycles, states merge, new world finishes: exactly once."""
    old = [dataset(uri, num_splits=num_splits, rank=r, world_size=old_world) for r in range(old_world)]
    width = num_splits // old_world
    delivered = []
    for rank in old:
        iterator = iter(rank)
        delivered += take(iterator, cycles * width)
        iterator.close()
    merged = StreamingDataset.merge_state_dicts([json_roundtrip(r.state_dict()) for r in old])
    assert merged["owned_splits"] == list(range(num_splits))
    new = [dataset(uri, num_splits=num_splits, rank=r, world_size=new_world) for r in range(new_world)]
    lengths = []
    for rank in new:
        rank.load_state_dict(json_roundtrip(merged))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", EpochCompleteWarning)  # resumed at the very end
            rest = ids_of(rank)
        lengths.append(len(rest))
        delivered += rest
    length = old[0].split_length
    assert len(delivered) == len(set(delivered)) == num_splits * length
    assert set(delivered) <= live_ids(uri)
    assert lengths == [num_splits // new_world * (length - cycles)] * new_world


@pytest.mark.parametrize(
    ("old_world", "new_world", "num_splits"),
    [(4, 2, 4), (2, 3, 12), (1, 4, 4), (4, 1, 4), (3, 2, 6)],
)
def test_resume_across_world_sizes(table_uri, old_world, new_world, num_splits):
    run_then_resume(table_uri, old_world, new_world, num_splits=num_splits, cycles=3)


def test_resume_across_world_sizes_at_every_step(small_uri):
    length = dataset(small_uri, num_splits=4).split_length
    for cycles in range(length + 1):
        run_then_resume(small_uri, 2, 4, num_splits=4, cycles=cycles)


def test_global_steps_continue_identically_after_a_topology_change(small_uri):
    """G3 across a resume: step t after 2->4 is step t of an uninterrupted 1-rank run."""
    num_splits, m = 4, 2
    reference = ids_of(dataset(small_uri, num_splits=num_splits))
    batch = m * num_splits
    reference_steps = [set(reference[t * batch : (t + 1) * batch]) for t in range(len(reference) // batch)]
    old = [dataset(small_uri, num_splits=num_splits, rank=r, world_size=2) for r in range(2)]
    for rank in old:
        take(iter(rank), 3 * m * 2)
    merged = StreamingDataset.merge_state_dicts([r.state_dict() for r in old])
    new = []
    for rank in range(4):
        data = dataset(small_uri, num_splits=num_splits, rank=rank, world_size=4)
        data.load_state_dict(merged)
        new.append(ids_of(data))
    for step in range(len(new[0]) // m):
        got = set().union(*(set(ids[step * m : (step + 1) * m]) for ids in new))
        assert got == reference_steps[3 + step], f"global step {3 + step}"


def test_a_partial_cycle_of_one_step_merges_and_one_of_two_steps_is_refused(small_uri):
    """G7, G11: every rank one sample into its cycle (the job's first splits ahead)
    merges; ranks one sample apart (a later split ahead of an earlier one) do not."""

    def states(taken: tuple[int, int]) -> list[dict]:
        ranks = [dataset(small_uri, num_splits=4, rank=r, world_size=2) for r in range(2)]
        for rank, count in zip(ranks, taken, strict=True):
            iterator = iter(rank)
            take(iterator, count)
            iterator.close()
        return [rank.state_dict() for rank in ranks]

    merged = StreamingDataset.merge_state_dicts(states((1, 1)))
    assert merged["samples_consumed_per_split"] == [1, 1, 0, 0]
    with pytest.raises(ValueError, match="allow_lag=True"):
        StreamingDataset.merge_state_dicts(states((1, 2)))


def test_lagged_states_merge_only_with_allow_lag(small_uri):
    ranks = [dataset(small_uri, num_splits=4, rank=r, world_size=2) for r in range(2)]
    take(iter(ranks[0]), 6)
    take(iter(ranks[1]), 2)
    states = [r.state_dict() for r in ranks]
    with pytest.raises(ValueError, match="allow_lag=True"):
        StreamingDataset.merge_state_dicts(states)
    merged = StreamingDataset.merge_state_dicts(states, allow_lag=True)
    assert merged["samples_consumed_per_split"] == [3, 1, 3, 1]
    resumed = dataset(small_uri, num_splits=4)
    resumed.load_state_dict(merged)
    rest = ids_of(resumed)
    before = [i for r in (0, 1) for i in ids_of_prefix(small_uri, r, 6 if r == 0 else 2)]
    assert sorted(before + rest) == sorted(ids_of(dataset(small_uri, num_splits=4)))


def test_after_a_lagged_merge_other_splits_are_where_lockstep_training_puts_them(small_uri):
    """docs/checkpointing.md: a rank's state carries each other rank's splits where that
    rank stands after handing out as many samples, in its own order, from its own start.
    Rank 1 of 2 owns splits 1 and 3, resumed at 6 and 5: run to the end, it hands out
    (L - 6) + (L - 5) = 2L - 11 samples. Rank 0 (splits 0 and 2, at 2 and 3) hands out
    split 0's sample at level 2 alone, then both in turn: 1 + (L - 6) for split 0 and
    L - 6 for split 2, so both read L - 3."""
    merged = dataset(small_uri, num_splits=4).state_dict()
    merged["samples_consumed_per_split"] = merged["positions_consumed_per_split"] = [2, 6, 3, 5]
    rank = dataset(small_uri, num_splits=4, rank=1, world_size=2)
    rank.load_state_dict(merged)
    length = rank.split_length
    assert len(ids_of(rank)) == (length - 6) + (length - 5)
    state = rank.state_dict()
    assert state["samples_consumed_per_split"] == [length - 3, length, length - 3, length]
    assert state["positions_consumed_per_split"] == state["samples_consumed_per_split"]


def ids_of_prefix(uri: str, rank: int, count: int) -> list[int]:
    return take(iter(dataset(uri, num_splits=4, rank=rank, world_size=2)), count)


def test_merge_of_a_subset_warns_and_uses_lockstep_counts(small_uri):
    ranks = [dataset(small_uri, num_splits=4, rank=r, world_size=2) for r in range(2)]
    take(iter(ranks[0]), 4)
    with pytest.warns(UnownedSplitsWarning, match=r"splits \[1, 3\]"):
        merged = StreamingDataset.merge_state_dicts([ranks[0].state_dict()])
    assert merged["samples_consumed_per_split"] == [2, 2, 2, 2]


def test_state_is_plain_json(small_uri):
    data = dataset(small_uri, num_splits=2)
    take(iter(data), 5)
    state = data.state_dict()
    assert json.loads(json.dumps(state)) == state
    assert set(state) >= {
        "format_version",
        "num_splits",
        "shuffle",
        "shuffle_seed",
        "epoch",
        "plan",
        "samples_consumed_per_split",
        "positions_consumed_per_split",
        "owned_splits",
        "table",
        "filter",
        "columns",
    }
    assert state["table"] == {"uri": data.table_uri, "version": data.version}
