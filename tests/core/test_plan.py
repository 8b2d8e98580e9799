"""The pure plan: disjoint, complete, equal-length splits for any input (hypothesis)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.core.ownership import rank_splits, worker_splits
from streaming.core.plan import (
    NOT_READ,
    EpochPlan,
    Part,
    PlanSettings,
    WindowRead,
    digest,
    permute,
    window_rows_for,
)

from reference import locate, window_rows_order


def make_plan(rows, *, splits, seed=0, epoch=0, shuffle=True, block_rows=4, window_blocks=2, clump=1):
    settings = PlanSettings(
        num_splits=splits,
        shuffle=shuffle,
        seed=seed,
        epoch=epoch,
        block_rows=block_rows,
        window_rows=window_blocks * block_rows,
        clump_rows=clump,
    )
    return EpochPlan(list(range(100, 100 + len(rows))), rows, settings)


def all_rows(plan: EpochPlan, split: int) -> list[tuple[int, int]]:
    """(fragment id, offset) of every position of ``split``, via window reads."""
    rows = []
    for window in range(plan.num_windows):
        read = plan.window_read([(split, window)])
        flat = [(fragment, int(offset)) for fragment, offsets in read.pieces for offset in offsets]
        rows.extend(flat[index] for index in read.gathers[0])
    return rows


plan_inputs = st.fixed_dictionaries(
    {
        "rows": st.lists(st.integers(0, 40), min_size=1, max_size=8),
        "splits": st.integers(1, 12),
        "seed": st.integers(0, 2**40),
        "epoch": st.integers(0, 5),
        "shuffle": st.booleans(),
        "block_rows": st.integers(1, 9),
        "window_blocks": st.integers(1, 4),
        "clump": st.integers(1, 5),
    }
).filter(lambda d: sum(d["rows"]) >= d["splits"])


@settings(max_examples=150, deadline=None)
@given(plan_inputs)
def test_splits_are_disjoint_complete_equal_and_reproducible(inputs):
    plan = make_plan(**inputs)
    total, splits = sum(inputs["rows"]), inputs["splits"]
    length = total // splits
    assert plan.split_length == length
    seen: set[tuple[int, int]] = set()
    for split in range(splits):
        rows = all_rows(plan, split)
        assert len(rows) == length, f"split {split} has {len(rows)} rows, expected {length}"
        assert not seen & set(rows), f"split {split} shares rows with an earlier split"
        seen |= set(rows)
        assert rows == all_rows(make_plan(**inputs), split), f"split {split} not reproducible"
        assert rows == [locate(plan, split, p) for p in range(length)], f"locate disagrees on {split}"
    universe = {(100 + f, o) for f, n in enumerate(inputs["rows"]) for o in range(n)}
    assert seen <= universe
    assert len(universe - seen) == total - splits * length < splits


@settings(max_examples=60, deadline=None)
@given(plan_inputs, st.data())
def test_global_step_is_the_same_for_every_topology(inputs, data):
    """Step t is positions [t*m, (t+1)*m) of every split, whatever W and k are."""
    plan = make_plan(**inputs)
    splits = inputs["splits"]
    world_size = data.draw(st.sampled_from([w for w in range(1, splits + 1) if splits % w == 0]))
    per_rank = splits // world_size
    workers = data.draw(st.integers(1, per_rank + 2))  # any count: extra workers own nothing
    m = data.draw(st.integers(1, 3))
    owners = [
        worker_splits(rank_splits(splits, rank=r, world_size=world_size), worker=w, num_workers=workers)
        for r in range(world_size)
        for w in range(workers)
    ]
    assert sorted(s for group in owners for s in group) == list(range(splits)), "ownership is a partition"
    for step in range(min(3, plan.split_length // m)):
        positions = range(step * m, (step + 1) * m)
        single = {locate(plan, s, p) for s in range(splits) for p in positions}
        spread = {locate(plan, s, p) for group in owners for s in group for p in positions}
        assert spread == single, f"step {step} differs for W={world_size}, k={workers}"


def reference_window_read(plan: EpochPlan, requests) -> WindowRead:
    """The plain definition of a window read: sort every requested row (stable argsort)."""
    laid = np.concatenate([plan.laid_out(s, window_rows_order(plan, s, w)) for s, w in requests])
    order = np.argsort(laid, kind="stable")
    ordered = laid[order]
    fragment_index = np.searchsorted(plan.bounds, ordered, side="right") - 1
    cuts = np.flatnonzero(np.diff(fragment_index)) + 1
    pieces = tuple(
        (int(plan.fragment_ids[indices[0]]), chunk - plan.bounds[indices[0]])
        for chunk, indices in zip(np.split(ordered, cuts), np.split(fragment_index, cuts))
    )
    inverse = np.empty_like(order)
    inverse[order] = np.arange(order.size)
    sizes = [plan.window_bounds(w)[1] - plan.window_bounds(w)[0] for _, w in requests]
    return WindowRead(pieces=pieces, gathers=tuple(np.split(inverse, np.cumsum(sizes)[:-1])))


@settings(max_examples=150, deadline=None)
@given(plan_inputs, st.data())
def test_window_read_sorts_blocks_like_sorting_every_row(inputs, data):
    """Blocks cut by fragments, the split end and the wrap-around, repeated requests too."""
    plan = make_plan(**inputs)
    key = st.tuples(st.integers(0, inputs["splits"] - 1), st.integers(0, plan.num_windows - 1))
    requests = data.draw(st.lists(key, min_size=1, max_size=6))
    got, want = plan.window_read(requests), reference_window_read(plan, requests)
    assert [f for f, _ in got.pieces] == [f for f, _ in want.pieces], f"fragments differ for {requests}"
    for (fragment, offsets), (_, expected) in zip(got.pieces, want.pieces):
        assert offsets.tolist() == expected.tolist(), f"offsets of fragment {fragment} differ for {requests}"
    assert len(got.gathers) == len(requests)
    for i, (gather, expected) in enumerate(zip(got.gathers, want.gathers)):
        assert gather.tolist() == expected.tolist(), f"gather of request {i} {requests[i]} differs"


def test_window_read_of_nothing_is_empty():
    assert make_plan([5, 7], splits=2).window_read([]) == WindowRead(pieces=(), gathers=())


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 5000), st.integers(0, 2**63))
def test_permute_is_a_bijection(n, key):
    image = permute(np.arange(n), n, key)
    assert sorted(image.tolist()) == list(range(n))
    assert image.tolist() == permute(np.arange(n), n, key).tolist()


def test_shuffle_false_is_storage_order():
    plan = make_plan([5, 0, 7], splits=3, shuffle=False)
    assert [locate(plan, 0, p) for p in range(4)] == [(100, 0), (100, 1), (100, 2), (100, 3)]
    assert [locate(plan, 1, p) for p in range(4)] == [(100, 4), (102, 0), (102, 1), (102, 2)]
    assert plan.rotation == 0


def test_epochs_and_seeds_change_the_order():
    orders = {
        (seed, epoch): tuple(all_rows(make_plan([30, 50, 20], splits=2, seed=seed, epoch=epoch), 0))
        for seed in (0, 1)
        for epoch in (0, 1)
    }
    assert len(set(orders.values())) == 4


def test_one_fragment_drops_different_rows_each_epoch():
    dropped = []
    for epoch in range(6):
        plan = make_plan([10], splits=3, epoch=epoch)
        kept = {row for split in range(3) for row in all_rows(plan, split)}
        dropped.append(frozenset({(100, o) for o in range(10)} - kept))
    assert len(set(dropped)) > 1


def test_n_below_s_is_a_clear_error():
    with pytest.raises(ValueError, match=r"3 rows to plan but num_splits=4"):
        make_plan([1, 0, 2], splits=4)


def test_n_equal_s_gives_one_row_per_split():
    plan = make_plan([2, 1], splits=3)
    assert plan.split_length == 1
    assert len({locate(plan, s, 0) for s in range(3)}) == 3


def test_divisibility_errors_name_the_numbers():
    with pytest.raises(ValueError, match=r"num_splits=10 is not divisible by world_size=4.*num_splits=12\)"):
        rank_splits(10, rank=0, world_size=4)
    assert worker_splits([1, 3, 5, 7], worker=1, num_workers=2) == [3, 7]
    # any worker count: which worker reads which split is not a rule the user meets
    assert worker_splits([0, 2, 4, 6, 8, 10], worker=0, num_workers=4) == [0, 8]
    assert worker_splits([0, 2], worker=3, num_workers=4) == []


def test_window_rows_formula():
    assert window_rows_for(shuffle_buffer_size=32768, num_splits=4, block_rows=64) == 8192
    assert window_rows_for(shuffle_buffer_size=10, num_splits=4, block_rows=64) == 64


def test_digest_is_stable_across_processes():
    """Python's hash() is salted per process; the plan's digest must not be."""
    code = "from streaming.core.plan import digest; print(digest('fragment', 3, 0, 1))"
    values = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": salt},
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.strip()
        for salt in ("1", "2")
    }
    assert values == {str(digest("fragment", 3, 0, 1))}


def test_plan_for_a_billion_rows_is_cheap():
    fragments = 100_000
    rows = [10_000] * fragments
    plan = make_plan(rows, splits=64, block_rows=64, window_blocks=8)
    assert plan.total_rows == 10**9
    read = plan.window_read([(63, plan.num_windows - 1)])
    assert sum(len(offsets) for _, offsets in read.pieces) == len(read.gathers[0])


def _rows_of(read: WindowRead) -> np.ndarray:
    """(fragment id, offset) of every row of a read, in the read's order."""
    if not read.pieces:
        return np.zeros((0, 2), dtype=np.int64)
    return np.concatenate(
        [np.stack([np.full(len(offsets), f), offsets], axis=1) for f, offsets in read.pieces]
    )


@settings(max_examples=120, deadline=None)
@given(plan_inputs, st.data())
def test_parts_read_every_row_of_a_window_once_and_put_it_where_the_whole_read_does(inputs, data):
    """k readers of the same windows (``Part``): each row is read by exactly one of them,
    and lands at the same position of the window as in the whole read."""
    plan = make_plan(**inputs)
    everything = [(s, w) for s in range(inputs["splits"]) for w in range(plan.num_windows)]
    requests = data.draw(st.lists(st.sampled_from(everything), min_size=1, max_size=6, unique=True))
    readers = data.draw(st.integers(1, 6))
    whole = plan.window_read(requests)
    rows = _rows_of(whole)
    reader_of = [np.full(len(gather), -1) for gather in whole.gathers]
    read = 0
    for reader in range(readers):
        mine = plan.window_read(requests, part=Part(reader, readers))
        mine_rows = _rows_of(mine)
        read += len(mine_rows)
        for index, (gather, part_gather) in enumerate(zip(whole.gathers, mine.gathers, strict=True)):
            here = part_gather != NOT_READ
            assert (reader_of[index][here] == -1).all(), f"window {requests[index]} read twice"
            reader_of[index][here] = reader
            assert (mine_rows[part_gather[here]] == rows[gather[here]]).all(), (
                f"reader {reader} of {readers} puts other rows in window {requests[index]}"
            )
    assert all((owners >= 0).all() for owners in reader_of), "a row nobody read"
    assert read == len(rows), f"{read} rows read by the parts, {len(rows)} by the whole read"


@given(st.integers(1, 5000), st.sampled_from([1, 8, 64, 256]), st.integers(1, 8))
def test_parts_read_a_split_in_equal_shares_of_blocks(length, block_rows, readers):
    """A part's rows of a split differ from the average by at most one block."""
    plan = make_plan([length], splits=1, block_rows=block_rows, window_blocks=2)
    shares = [plan.part_rows(0, Part(reader, readers)) for reader in range(readers)]
    assert sum(shares) == plan.split_length
    assert max(shares) - min(shares) <= block_rows
