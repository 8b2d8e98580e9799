"""The default ``num_splits``: a number the world sizes jobs move between divide.

A checkpoint resumes on world size W' only if W' divides its S. One split per rank
(the old default) ties a run to divisors of the world size it started on; S = 192
is divided by every world size of ``COMMON_WORLD_SIZES`` (1 to 64 GPUs, in the
steps clusters are sized in), so a run with the default moves between all of them.

Larger S is not free, so the default is the largest S that is
- a multiple of W dividing lcm(192, W) (W's own multiples of the common sizes),
- at most ``rows // MIN_SPLIT_ROWS``: the N - S * L < S rows an epoch leaves out
  stay under 0.1% of the table (a table too small for any such S keeps S = W),
- at most ``buffer_rows`` (what the shuffle buffer's bytes allow): a window holds
  at least one row of every split, and the block then follows S (``sizes_for``)
  so the first windows of every split stay within the buffer's bytes.

Pure: no torch, no Lance.
"""

from __future__ import annotations

import math

__all__ = [
    "COMMON_WORLD_SIZES",
    "MIN_SPLIT_ROWS",
    "WINDOW_BLOCKS",
    "default_splits",
    "sizes_for",
]

COMMON_WORLD_SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
"""The world sizes a defaulted ``num_splits`` is chosen to move between (lcm: 192)."""
MIN_SPLIT_ROWS = 1_024
"""Rows per split at least for a default above one split per rank (surplus < 0.1%)."""
WINDOW_BLOCKS = 4
"""Blocks a split's window holds at most by growing the buffer for a larger default S."""
_COMMON = math.lcm(*COMMON_WORLD_SIZES)


def _divisors(number: int) -> list[int]:
    """Every divisor of ``number``, ascending."""
    low = [d for d in range(1, math.isqrt(number) + 1) if number % d == 0]
    return sorted({*low, *(number // d for d in low)})


def default_splits(*, rows: int, world_size: int, buffer_rows: int) -> int:
    """The ``num_splits`` of a dataset that was not given one (see the module docstring).

    ``rows``: the planned rows (live, matching the filter) of the snapshot;
    ``buffer_rows``: the shuffle buffer in rows. Always a multiple of ``world_size``;
    ``world_size`` itself when the table is too small for more.
    """
    candidates = [d for d in _divisors(math.lcm(_COMMON, world_size)) if d % world_size == 0]
    fits = [d for d in candidates if d * MIN_SPLIT_ROWS <= rows and d <= buffer_rows]
    return max(fits, default=world_size)


def sizes_for(
    num_splits: int, *, block_rows: int, buffer_rows: int, allowed_rows: int, given: tuple[str, ...]
) -> tuple[int, int]:
    """(block, buffer) rows for a default ``num_splits`` above one split per rank.

    The sizes named in ``given`` (the user's) are kept. The buffer grows up to
    ``WINDOW_BLOCKS`` blocks a split within ``allowed_rows`` (what its bytes allow:
    narrow rows), so the windows of many splits are read in reads as large as one
    split's; the block then shrinks to the largest power of two of rows with one
    block of every split within the buffer (wide rows), one row at least.
    """
    buffer = buffer_rows
    if "shuffle_buffer_size" not in given:
        buffer = max(buffer_rows, min(allowed_rows, num_splits * WINDOW_BLOCKS * block_rows))
    block = block_rows
    if "block_rows" not in given:
        fit = max(1, buffer // num_splits)
        block = min(block_rows, 1 << (fit.bit_length() - 1))
    return block, buffer
