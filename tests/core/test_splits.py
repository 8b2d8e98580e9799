"""The default ``num_splits`` and the sizes that follow it (pure rules, ``core/splits.py``)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.core.plan import EpochPlan, PlanSettings
from streaming.core.splits import COMMON_WORLD_SIZES, MIN_SPLIT_ROWS, WINDOW_BLOCKS, default_splits, sizes_for

world_sizes = st.one_of(st.sampled_from(COMMON_WORLD_SIZES), st.integers(1, 2048))


@settings(max_examples=300, deadline=None)
@given(rows=st.integers(1, 10**10), world_size=world_sizes, buffer_rows=st.integers(1, 10**7))
def test_the_default_is_a_multiple_of_the_world_size_that_loses_little_and_fits_the_buffer(
    rows, world_size, buffer_rows
):
    splits = default_splits(rows=rows, world_size=world_size, buffer_rows=buffer_rows)
    assert splits % world_size == 0
    assert math.lcm(192, world_size) % splits == 0
    if splits > world_size:  # more than one split per rank only where it costs little
        assert splits * MIN_SPLIT_ROWS <= rows  # the rows an epoch leaves out: under 0.1%
        assert rows % splits < rows / 1000
        assert splits <= buffer_rows  # a window holds a row of every split
    more = default_splits(rows=rows * 2, world_size=world_size, buffer_rows=buffer_rows)
    assert more >= splits  # a larger table never gets fewer splits


@settings(max_examples=100, deadline=None)
@given(world_size=st.sampled_from(COMMON_WORLD_SIZES), rows=st.integers(192 * MIN_SPLIT_ROWS, 10**10))
def test_a_large_table_moves_between_every_common_world_size(world_size, rows):
    splits = default_splits(rows=rows, world_size=world_size, buffer_rows=32_768)
    assert splits == 192
    assert all(splits % size == 0 for size in COMMON_WORLD_SIZES)


def test_small_tables_keep_one_split_per_rank():
    assert default_splits(rows=2 * MIN_SPLIT_ROWS - 1, world_size=1, buffer_rows=32_768) == 1
    assert default_splits(rows=100, world_size=8, buffer_rows=32_768) == 8
    assert default_splits(rows=50_000, world_size=1, buffer_rows=32_768) == 48  # 1, 2, 3, 4, 6, 8, ...
    assert default_splits(rows=10**9, world_size=1, buffer_rows=64) == 64  # 1 MiB rows: 64 MiB buffer
    assert default_splits(rows=10**9, world_size=5, buffer_rows=10**6) == 960  # lcm(192, 5)


@settings(max_examples=300, deadline=None)
@given(
    splits=st.integers(2, 4096),
    block=st.sampled_from([1, 2, 8, 64, 2048, 8192]),
    buffer=st.integers(1, 10**6),
    allowed=st.integers(1, 10**7),
    given_sizes=st.sampled_from(
        [(), ("block_rows",), ("shuffle_buffer_size",), ("block_rows", "shuffle_buffer_size")]
    ),
)
def test_the_block_and_buffer_follow_s(splits, block, buffer, allowed, given_sizes):
    new_block, new_buffer = sizes_for(
        splits, block_rows=block, buffer_rows=buffer, allowed_rows=allowed, given=given_sizes
    )
    if "shuffle_buffer_size" in given_sizes:
        assert new_buffer == buffer
    else:
        assert buffer <= new_buffer <= max(buffer, allowed, splits * WINDOW_BLOCKS * block)
        assert new_buffer <= max(buffer, splits * WINDOW_BLOCKS * block)
    if "block_rows" in given_sizes:
        assert new_block == block
    else:
        assert new_block <= block and new_block & (new_block - 1) == 0  # a power of two
        assert new_block == 1 or new_block * splits <= new_buffer  # one block of every split fits


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(st.integers(0, 40), min_size=1, max_size=8).filter(lambda rows: sum(rows) >= 6),
    splits=st.integers(1, 6),
    seed=st.integers(0, 2**32),
    shuffle=st.booleans(),
)
def test_format_2_gives_each_split_its_own_segment(rows, splits, seed, shuffle):
    """Plan format 2 takes the segments in a seeded order: every planned row once, and
    without ``shuffle`` (or in format 1) split s is segment s."""
    plans = {
        plan_format: EpochPlan(
            range(len(rows)),
            rows,
            PlanSettings(
                splits, shuffle, seed, 0, block_rows=2, window_rows=4, clump_rows=1, plan_format=plan_format
            ),
        )
        for plan_format in (1, 2)
    }
    new, old = plans[2], plans[1]
    laid = [new.laid_out(split, range(new.split_length)).tolist() for split in range(splits)]
    assert sorted(row for rows_ in laid for row in rows_) == sorted(
        row for split in range(splits) for row in old.laid_out(split, range(old.split_length)).tolist()
    )
    assert sorted(new.segment_order.tolist()) == list(range(splits))
    if not shuffle:
        assert new.segment_order.tolist() == list(range(splits))
    assert old.segment_order.tolist() == list(range(splits))


def test_format_2_rows_stay_where_they_are():
    """Pinned: every row at these positions stays, or format-2 checkpoints would resume onto others."""
    plan = EpochPlan(
        range(3), [50, 0, 70], PlanSettings(6, True, 11, 2, block_rows=4, window_rows=8, clump_rows=1)
    )
    assert plan.segment_order.tolist() == SEGMENTS
    read = plan.window_read([(0, 0), (5, 1)])
    assert [(fragment, offsets.tolist()) for fragment, offsets in read.pieces] == PIECES
    assert [gather.tolist() for gather in read.gathers] == GATHERS


SEGMENTS = [2, 3, 1, 0, 4, 5]
PIECES = [(2, [12, 13, 14, 15, 20, 21, 22, 23]), (0, [2, 3, 4, 5, 18, 19, 20, 21])]
GATHERS = [[14, 11, 12, 9, 15, 8, 10, 13], [2, 1, 5, 7, 6, 3, 0, 4]]
