"""The loop's waits (``core/stats.py`` ``Waits``): quantiles within the histogram's
resolution of the exact ones, and memory that does not grow with the batches."""

from __future__ import annotations

import random
import tracemalloc

import pytest

from streaming.core import stats
from streaming.core.stats import Waits


def test_quantiles_are_within_three_percent_of_the_exact_ones():
    draw = random.Random(7)
    waits = [draw.lognormvariate(-7, 1.5) for _ in range(20_000)]
    recorded = Waits()
    recorded.add_first(2.5)  # start-up: in the totals, not in the quantiles
    for wait in waits:
        recorded.add(wait)
    ordered = sorted(waits)
    for share in (0.5, 0.95, 0.99):
        exact = ordered[max(0, round(share * len(ordered)) - 1)]
        assert recorded.quantile(share) == pytest.approx(exact, rel=0.03), share
    figures = recorded.as_dict()
    assert figures["wait_batches"] == len(waits) + 1 and figures["wait_first_seconds"] == 2.5
    assert figures["wait_seconds"] == pytest.approx(2.5 + sum(waits))
    assert figures["wait_longest_seconds"] == max(waits)
    recorded.add(1.0)  # read, then more waits: none is counted twice or lost
    assert recorded.as_dict()["wait_batches"] == len(waits) + 2
    assert Waits().as_dict()["wait_p99_seconds"] == 0.0  # nothing measured yet


def test_waits_of_any_size_land_in_a_bucket_and_per_worker_figures_add_up():
    recorded = Waits()
    for wait in (0.0, 1e-12, 3e-7, 0.01, 1e6):
        recorded.add(wait)
    assert recorded.quantile(1.0) == 1e6 and recorded.quantile(0.4) < 2**-20  # below 1 us: one bucket
    recorded.add_worker(2, 0.25)
    recorded.add_worker(0, 0.5)
    recorded.add_worker(2, 0.25)
    assert [recorded.as_dict()[f"wait_worker_{worker}_seconds"] for worker in range(3)] == [0.5, 0.0, 0.5]


def test_recording_a_wait_allocates_nothing_that_stays():
    recorded = Waits()

    def record(batches: int) -> None:
        for index in range(batches):
            recorded.add(1e-4 * (1 + index % 977))
            recorded.add_worker(index % 4, 1e-5)

    tracemalloc.start()
    try:
        record(20_000)
        before = tracemalloc.take_snapshot()
        record(40_000)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    ours = [tracemalloc.Filter(True, stats.__file__)]  # what Waits itself holds (numpy's included)
    grown = sum(
        diff.size_diff for diff in after.filter_traces(ours).compare_to(before.filter_traces(ours), "lineno")
    )
    assert grown < 4096, f"{grown} more bytes held after 40,000 more waits (8 bytes a wait would be 320,000)"
