"""The next read's plan, worked out while this read's Lance takes run.

Reading a window set costs its plan (which rows, in which order: numpy work that
holds the GIL), then its Lance takes (native code, off the GIL), then the
conversion. Reads follow each other, and the next read of splits that advance
together asks for the same splits' following windows, so its plan can be worked
out on a spare thread while the current read's takes run, instead of before the
next read's takes can start. A plan is a pure function of the requests, so one
worked out ahead is the one the read would compute; a read that asks for
anything else computes its own.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Executor, Future

from ..core.plan import EpochPlan, Part, WindowRead

__all__ = ["PlanAhead"]

Key = tuple[int, int]


class PlanAhead:
    """At most one plan worked out ahead, for the windows after a read's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ahead: tuple[EpochPlan, tuple[Key, ...], Future[WindowRead]] | None = None

    def plan(self, plan: EpochPlan, requests: Sequence[Key], *, part: Part | None = None) -> WindowRead:
        """``plan.window_read(requests, part=part)``: the one worked out ahead if it was for these."""
        with self._lock:
            ahead, self._ahead = self._ahead, None
        usable = ahead is not None and ahead[0] is plan and ahead[1] == tuple(requests)
        if ahead is not None and usable and not ahead[2].cancelled():
            return ahead[2].result()
        return plan.window_read(requests, part=part)

    def work_out_next(
        self, plan: EpochPlan, requests: Sequence[Key], executor: Executor, *, part: Part | None = None
    ) -> None:
        """Start the plan of the windows after ``requests`` (those that exist) on ``executor``
        (the same ``part`` of them as this read's)."""
        rows, length = plan.settings.window_rows, plan.split_length
        following = tuple((split, window + 1) for split, window in requests if (window + 1) * rows < length)
        if not following:
            return
        try:
            future = executor.submit(plan.window_read, following, part=part)
        except RuntimeError:  # the readers are closing: no next read
            return
        with self._lock:
            self._ahead = (plan, following, future)
