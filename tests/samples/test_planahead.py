"""A read's plan worked out ahead (``samples/planahead.py``) is the plan the read would compute."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from streaming.core.plan import EpochPlan, PlanSettings
from streaming.samples.planahead import PlanAhead


def make_plan(*, epoch: int = 0) -> EpochPlan:
    settings = PlanSettings(
        num_splits=4, shuffle=True, seed=3, epoch=epoch, block_rows=4, window_rows=12, clump_rows=1
    )
    return EpochPlan([10, 11, 12], [50, 37, 41], settings)


def same(found, expected) -> bool:
    pairs = zip(found.pieces, expected.pieces, strict=True)
    pieces = len(found.pieces) == len(expected.pieces) and all(
        a[0] == b[0] and np.array_equal(a[1], b[1]) for a, b in pairs
    )
    return pieces and all(np.array_equal(a, b) for a, b in zip(found.gathers, expected.gathers, strict=True))


def test_every_read_of_an_epoch_gets_the_plan_it_would_compute():
    """Reads of every split's next window in turn, as splits in step ask for them."""
    plan, ahead = make_plan(), PlanAhead()
    with ThreadPoolExecutor(2) as executor:
        for window in range(plan.num_windows):
            requests = [(split, window) for split in range(4)]
            found = ahead.plan(plan, requests)
            ahead.work_out_next(plan, requests, executor)
            assert same(found, plan.window_read(requests)), f"window {window}"


def test_other_requests_or_another_plan_are_computed_afresh():
    plan, other, ahead = make_plan(), make_plan(epoch=1), PlanAhead()
    with ThreadPoolExecutor(1) as executor:
        ahead.work_out_next(plan, [(0, 0), (1, 0)], executor)  # works out (0, 1), (1, 1)
        assert same(ahead.plan(plan, [(1, 1)]), plan.window_read([(1, 1)]))
        ahead.work_out_next(plan, [(0, 0), (1, 0)], executor)
        assert same(ahead.plan(other, [(0, 1), (1, 1)]), other.window_read([(0, 1), (1, 1)]))
        ahead.work_out_next(plan, [(0, plan.num_windows - 1)], executor)  # nothing follows the last
        assert same(ahead.plan(plan, [(0, 0)]), plan.window_read([(0, 0)]))


def test_a_closed_executor_plans_nothing_ahead():
    plan, ahead = make_plan(), PlanAhead()
    executor = ThreadPoolExecutor(1)
    executor.shutdown()
    ahead.work_out_next(plan, [(0, 0)], executor)
    assert same(ahead.plan(plan, [(0, 1)]), plan.window_read([(0, 1)]))
