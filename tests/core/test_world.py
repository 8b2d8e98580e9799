"""``World``: one process's place, and the splits it reads (the loader's worker split)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streaming.core.plan import worker_splits
from streaming.core.world import World


@given(st.integers(1, 6), st.integers(1, 4), st.integers(1, 3))
def test_the_workers_of_a_rank_read_each_of_its_splits_once(per_worker, workers, world_size):
    rank_splits = list(range(3, 3 + per_worker * workers))
    places = [World(0, world_size, worker, workers) for worker in range(workers)]
    read = [place.splits(rank_splits) for place in places]
    assert sorted(split for splits in read for split in splits) == rank_splits
    for place, splits in zip(places, read, strict=True):
        assert splits == worker_splits(
            rank_splits, worker=place.worker, num_workers=workers, world_size=world_size
        )
        assert splits == [split for index, split in enumerate(rank_splits) if place.owns(index)]


def test_a_lone_process_reads_every_split_of_its_rank():
    assert World().splits([4, 1, 7]) == [4, 1, 7]
    assert World().owns(5) and not World().in_worker


def test_a_worker_count_that_does_not_divide_the_splits_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="3 splits, which num_workers=2 does not divide"):
        World(0, 1, 1, 2).splits([0, 1, 2])
