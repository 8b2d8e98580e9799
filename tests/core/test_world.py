"""``World``: one process's place, and the splits it reads (the loader's worker split)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from streaming.core.ownership import worker_splits
from streaming.core.plan import Part
from streaming.core.world import World


@given(st.integers(1, 12), st.integers(1, 9), st.integers(1, 3))
def test_the_workers_of_a_rank_read_each_of_its_splits_once(splits, workers, world_size):
    """Owning whole splits, any worker count: each split is one worker's (extra ones idle)."""
    rank_splits = list(range(3, 3 + splits))
    places = [World(0, world_size, worker, workers) for worker in range(workers)]
    read = [place.splits(rank_splits) for place in places]
    assert sorted(split for splits in read for split in splits) == rank_splits
    for place, mine in zip(places, read, strict=True):
        assert mine == worker_splits(rank_splits, worker=place.worker, num_workers=workers)
        assert mine == [split for index, split in enumerate(rank_splits) if place.owns(index)]
        assert place.part is None


def test_a_lone_process_reads_every_split_of_its_rank():
    assert World().splits([4, 1, 7]) == [4, 1, 7]
    assert World().owns(5) and not World().in_worker


def test_parted_workers_walk_every_split_and_read_their_own_block_slots():
    place = World(0, 1, 1, 3, in_worker=True, parted=True)
    assert place.splits([0, 1]) == [0, 1]
    assert place.owns(0) and place.owns(5)
    assert place.part == Part(1, 3, 1)
    assert World(2, 4, 1, 3, in_worker=True, parted=True).part == Part(1, 3, 4)
    assert World(0, 1, 0, 1, parted=True).part is None  # a lone reader reads everything
