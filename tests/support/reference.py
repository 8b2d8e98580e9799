"""Reference arithmetic for tests: where one position's row comes from, row by row.

The package reads whole windows at once (``EpochPlan.window_read``, runs of
consecutive rows); these functions locate one position at a time, the slow and
obvious way, from the same seeded primitives, so tests can compare the two.
"""

from __future__ import annotations

import numpy as np

from streaming.core.plan import EpochPlan


def window_rows_order(plan: EpochPlan, split: int, window: int) -> np.ndarray:
    """Split-local rows of ``window`` in the order they are delivered."""
    start, stop = plan.window_bounds(window)
    if not plan.settings.shuffle:
        return np.arange(start, stop, dtype=np.int64)
    visits = start + plan._window_permutation(split, window, stop - start)
    block_rows = plan.settings.block_rows
    blocks = plan._window_blocks(split, first=start, last=stop)
    result: np.ndarray = blocks[visits // block_rows - start // block_rows] * block_rows + visits % block_rows
    return result


def split_rows(plan: EpochPlan, split: int, positions: np.ndarray) -> np.ndarray:
    """Split-local row index (in [0, L)) delivered at each of ``positions``."""
    positions = np.asarray(positions, dtype=np.int64)
    windows = positions // plan.settings.window_rows
    rows = np.empty_like(positions)
    for window in np.unique(windows):
        chosen = windows == window
        start, _ = plan.window_bounds(int(window))
        rows[chosen] = window_rows_order(plan, split, int(window))[positions[chosen] - start]
    return rows


def locate(plan: EpochPlan, split: int, position: int) -> tuple[int, int]:
    """(fragment id, offset among its planned rows) of one position."""
    if not 0 <= split < plan.settings.num_splits:
        raise IndexError(f"split {split} is outside [0, {plan.settings.num_splits})")
    if not 0 <= position < plan.split_length:
        raise IndexError(f"position {position} is outside [0, {plan.split_length})")
    laid = int(plan.laid_out(split, split_rows(plan, split, np.array([position])))[0])
    index = int(np.searchsorted(plan.bounds, laid, side="right")) - 1
    return int(plan.fragment_ids[index]), laid - int(plan.bounds[index])
