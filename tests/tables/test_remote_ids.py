"""The row ids of a remote snapshot's virtual fragments, kept as runs (``streaming/tables/remoteids.py``)."""

from __future__ import annotations

import threading

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.tables.remoteids import RowIdCache, RowIds


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=300), st.integers(0, 2**40), st.randoms())
def test_runs_give_back_every_id_at_every_offset(steps, first, rnd):
    """Ids with gaps (deleted rows) and jumps (another fragment): any offsets, any order."""
    ids = np.uint64(first) + np.cumsum(np.asarray(steps, dtype=np.uint64))
    runs = RowIds(ids)
    offsets = np.asarray(rnd.sample(range(len(ids)), rnd.randint(0, len(ids))), dtype=np.int64)
    assert np.array_equal(runs.of(offsets), ids[offsets])
    assert len(runs.starts) == 1 + int(np.count_nonzero(np.diff(ids.astype(np.int64)) != 1))


def test_a_fragment_without_deletions_is_one_run():
    runs = RowIds(np.arange(5 << 32, (5 << 32) + 65_536, dtype=np.uint64))
    assert runs.nbytes == 12 and runs.of(np.array([65_535]))[0] == (5 << 32) + 65_535


def test_the_cache_fetches_each_fragment_once_and_keeps_its_budget():
    """Threads asking for one fragment at once send one fetch; past the budget the least recently
    used fragment is dropped (and fetched again when asked)."""
    fetched: list[int] = []
    gate = threading.Barrier(4)

    def fetch(fragment_id: int) -> np.ndarray:
        fetched.append(fragment_id)
        return np.arange(0, 2_000, 2, dtype=np.uint64) + np.uint64(fragment_id << 32)  # 1,000 runs

    cache = RowIdCache(fetch, budget_bytes=2 * 12_000)

    def ask() -> None:
        gate.wait()
        assert cache.ids(7, np.array([3]))[0] == (7 << 32) + 6

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert fetched == [7]
    cache.ids(8, np.array([0]))
    cache.ids(7, np.array([0]))  # 7 is now the most recent
    cache.ids(9, np.array([0]))  # over budget: 8 goes
    cache.ids(7, np.array([0]))
    assert fetched == [7, 8, 9]
    cache.ids(8, np.array([0]))
    assert fetched == [7, 8, 9, 8]
