"""The pure order of a rank's samples, its workers' stripes, lockstep states and the
balance of a partial cycle on another world size (hypothesis)."""

from __future__ import annotations

from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from streaming.core.balance import balanced
from streaming.core.ledger import Ledger
from streaming.core.order import RankOrder, ShareSlots
from streaming.core.progress import SplitProgress


def brute_order(starts: list[int], ends: list[int]) -> list[int]:
    """The split position of every sample left, by (level, position): the definition."""
    return [
        j for _, j in sorted((level, j) for j in range(len(starts)) for level in range(starts[j], ends[j]))
    ]


ranges = st.lists(st.tuples(st.integers(0, 12), st.integers(0, 12)), min_size=1, max_size=8).map(
    lambda pairs: ([min(a, b) for a, b in pairs], [max(a, b) for a, b in pairs])
)


@settings(max_examples=300, deadline=None)
@given(ranges=ranges, low=st.integers(0, 100), span=st.integers(0, 100))
def test_rank_order_is_by_level_then_split(ranges, low, span):
    starts, ends = ranges
    order = RankOrder(starts, ends)
    expected = brute_order(starts, ends)
    assert order.total == len(expected)
    assert order.positions(low, low + span).tolist() == expected[low : low + span]


@settings(max_examples=300, deadline=None)
@given(ranges=ranges, workers=st.integers(1, 4), batch=st.integers(1, 9))
def test_stripes_cover_every_batch_once_and_follow_each_workers_order(ranges, workers, batch):
    """Every slot of every batch belongs to exactly one worker; each worker's slots, batch
    after batch, are its own splits' samples in the rank's order (what its iterator yields)."""
    starts, ends = ranges
    order = RankOrder(starts, ends)
    expected = brute_order(starts, ends)
    stripes = [ShareSlots(order, worker, workers, batch) for worker in range(workers)]
    mine: list[list[int]] = [[] for _ in range(workers)]
    for index in range(order.batches(batch)):
        size = stripes[0].size(index)
        taken = sorted(slot for stripe in stripes for slot in stripe.slots(index).tolist())
        assert taken == list(range(size)), f"batch {index}"
        for worker, stripe in enumerate(stripes):
            mine[worker] += [expected[index * batch + slot] for slot in stripe.slots(index).tolist()]
    for worker in range(workers):
        assert mine[worker] == [j for j in expected if j % workers == worker]


@settings(max_examples=300, deadline=None)
@given(
    ranges=ranges,
    workers=st.integers(1, 4),
    lows=st.lists(st.integers(0, 40), max_size=6),
    span=st.integers(0, 40),
)
@example(ranges=([0, 0, 0], [5, 5, 5]), workers=3, lows=[0, 1], span=4)
def test_a_workers_slots_are_the_same_worked_out_or_remembered(ranges, workers, lows, span):
    """``RankOrder.slots`` remembers a stripe per place in a segment's period: asked again,
    for any window, it answers what the definition gives."""
    starts, ends = ranges
    order = RankOrder(starts, ends)
    expected = brute_order(starts, ends)
    for low in [*lows, *lows]:
        for worker in range(workers):
            here = expected[low : low + span]
            wanted = [i for i, j in enumerate(here) if j % workers == worker]
            assert order.slots(low, low + span, worker=worker, workers=workers).tolist() == wanted


@settings(max_examples=300, deadline=None)
@given(
    ranks=st.integers(1, 4),
    per_rank=st.integers(1, 4),
    new_world=st.integers(1, 6),
    level=st.integers(0, 5),
    delivered=st.integers(0, 23),
)
def test_a_partial_cycle_is_evened_out_on_any_world_size(ranks, per_rank, new_world, level, delivered):
    """A state taken with every rank at the same step (a prefix of the global order is one
    sample ahead) gives every rank of any new world size as many samples left, giving
    back at most one sample per rank, none where the ranks already agree."""
    num_splits = ranks * per_rank
    assume(num_splits % new_world == 0)
    ahead = ranks * (delivered % per_rank)  # every old rank's first splits are one ahead
    total = 8
    progress = [
        SplitProgress(level + (split < ahead), level + (split < ahead)) for split in range(num_splits)
    ]
    result, gave = balanced(progress, world_size=new_world, total=total)
    lefts = [
        sum(total - result[split].samples for split in range(rank, num_splits, new_world))
        for rank in range(new_world)
    ]
    assert all(0 <= back <= 1 for back in gave), gave
    assert len(set(lefts)) == 1, lefts
    if ahead % new_world == 0:
        assert not any(gave)


def test_lockstep_follows_the_same_position_of_every_rank():
    """One rank's state, taken inside a cycle, puts every other rank's split where that
    rank stands in synchronous training: the split at the same position."""
    ledger = Ledger([1, 3, 5])  # rank 1 of 2, six splits
    ledger.restart([SplitProgress(2, 2)] * 6, total=10, by_samples=False)
    progress = [SplitProgress(2, 2)] * 6
    progress[1] = progress[3] = SplitProgress(3, 3)  # two of its three splits one ahead
    lockstep = ledger.lockstep(progress, split_length=10)
    assert [split.samples for split in lockstep] == [3, 3, 3, 3, 2, 2]


def test_lockstep_after_a_lagged_merge_follows_the_other_ranks_order():
    """Rank 1 handed out 9 samples; rank 0, from (2, 3), hands out split 0's level 2
    alone, then both splits in turn: 5 and 4 samples."""
    ledger = Ledger([1, 3])
    ledger.restart([SplitProgress(c, c) for c in (2, 6, 3, 5)], total=10, by_samples=False)
    progress = [SplitProgress(c, c) for c in (2, 10, 3, 10)]  # advanced 4 and 5: ran out
    assert [split.samples for split in ledger.lockstep(progress, split_length=10)] == [7, 10, 7, 10]


@settings(max_examples=300, deadline=None)
@given(ranges=ranges, count=st.integers(0, 120))
def test_rank_order_counts_the_first_samples_of_each_split_without_listing_them(ranges, count):
    starts, ends = ranges
    order = RankOrder(starts, ends)
    expected = brute_order(starts, ends)[:count]
    assert order.counts(count).tolist() == [expected.count(j) for j in range(len(starts))]
