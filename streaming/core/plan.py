"""Which row sits at every position of every split: pure arithmetic, no torch, no Lance.

An epoch plan is built from the live (filter-matching) row count of every fragment
and the order-defining settings. It never materialises a dataset-sized permutation:
fragment order costs O(fragments), and every permutation below it (block order,
rows within a window) is a seeded bijection evaluated on demand, so locating the
row behind one position is O(1) arithmetic plus one binary search over fragments.

Layout of an epoch, outermost first:

1. Fragments with no planned rows drop out. With ``shuffle`` they are ordered by a
   stable digest of (fragment id, seed, epoch), laid end to end, and the sequence
   is rotated by a seeded offset in [0, N). Without ``shuffle`` storage order is
   kept and nothing is rotated.
2. The first S * L laid-out positions are cut into S splits of L = N // S rows;
   the N - S * L < S surplus rows are left out of this epoch.
3. A split is cut into blocks of ``block_rows`` consecutive rows. The full blocks
   are visited in a seeded order; a short tail block, if any, comes last.
4. Consecutive visited blocks form windows of ``window_rows`` rows; rows (or
   clumps of ``clump_rows`` rows, a short tail clump last) are permuted across the
   whole window with a seed derived from (seed, epoch, split, window). A window's
   permutation is the only array materialised, and it is window-sized.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "PLAN_FORMAT",
    "EpochPlan",
    "PlanSettings",
    "WindowRead",
    "digest",
    "permute",
    "rank_splits",
    "window_rows_for",
    "worker_splits",
]

PLAN_FORMAT = 1
"""Bumped whenever the same inputs would put a different row at some position."""

_MUL_1 = np.uint64(0xBF58476D1CE4E5B9)
_MUL_2 = np.uint64(0x94D049BB133111EB)
_ROUNDS = 4


def digest(*parts: object) -> int:
    """Return a stable unsigned 64-bit digest of ``parts``.

    Unlike Python's ``hash()`` the value is the same in every process and on every
    machine, so it may decide anything that has to reproduce.
    """
    text = "\x1f".join(repr(part) for part in parts).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little")


def _mix(values: np.ndarray, key: np.uint64) -> np.ndarray:
    """Scramble uint64 values with a keyed splitmix64 finaliser (wraps on overflow)."""
    z = values ^ key
    z = (z ^ (z >> np.uint64(30))) * _MUL_1
    z = (z ^ (z >> np.uint64(27))) * _MUL_2
    return z ^ (z >> np.uint64(31))


def _feistel(values: np.ndarray, half_bits: int, keys: Sequence[np.uint64]) -> np.ndarray:
    mask = np.uint64((1 << half_bits) - 1)
    shift = np.uint64(half_bits)
    left, right = values >> shift, values & mask
    for key in keys:
        left, right = right, left ^ (_mix(right, key) & mask)
    result: np.ndarray = (left << shift) | right
    return result


def permute(indices: np.ndarray, n: int, key: int) -> np.ndarray:
    """Map ``indices`` (each in [0, n)) through a seeded bijection of ``range(n)``.

    A balanced Feistel network on the smallest even bit width that covers ``n``,
    with cycle walking to stay inside [0, n). Costs O(len(indices)) time and
    memory whatever ``n`` is; the same ``(n, key)`` always gives the same bijection.
    """
    values = np.asarray(indices, dtype=np.uint64)
    if n <= 1 or values.size == 0:
        return values.astype(np.int64)
    half_bits = max(1, ((n - 1).bit_length() + 1) // 2)
    keys = [np.uint64(digest(key, round_)) for round_ in range(_ROUNDS)]
    result = np.empty_like(values)
    pending = np.arange(values.size)
    current = values
    while pending.size:
        current = _feistel(current, half_bits, keys)
        inside = current < np.uint64(n)
        result[pending[inside]] = current[inside]
        pending, current = pending[~inside], current[~inside]
    return result.astype(np.int64)


@dataclass(frozen=True)
class PlanSettings:
    """Every input besides the fragment row counts that decides the order."""

    num_splits: int
    shuffle: bool
    seed: int
    epoch: int
    block_rows: int
    window_rows: int
    clump_rows: int


def window_rows_for(*, shuffle_buffer_size: int, num_splits: int, block_rows: int) -> int:
    """Rows per split window: ``max(1, shuffle_buffer_size // (S * block_rows))`` blocks."""
    return max(1, shuffle_buffer_size // (num_splits * block_rows)) * block_rows


@dataclass(frozen=True)
class WindowRead:
    """The rows of several windows, as sorted per-fragment offsets plus gather orders.

    Reading ``offsets`` of every piece in turn and concatenating the results gives
    the rows in storage order; row ``q`` of the i-th requested window, in yield
    order, is row ``gathers[i][q]`` of that concatenation.
    """

    pieces: tuple[tuple[int, np.ndarray], ...]
    gathers: tuple[np.ndarray, ...]


class EpochPlan:
    """The fixed map from (split, position) to a planned row for one epoch.

    Offsets are indices into a fragment's planned rows (live rows, or the live rows
    matching the filter), in storage order.
    """

    def __init__(
        self,
        fragment_ids: Sequence[int],
        fragment_rows: Sequence[int],
        settings: PlanSettings,
    ) -> None:
        if len(fragment_ids) != len(fragment_rows):
            raise ValueError("fragment_ids and fragment_rows must have the same length")
        pairs = [(int(f), int(n)) for f, n in zip(fragment_ids, fragment_rows, strict=True) if n > 0]
        if settings.shuffle:
            pairs.sort(key=lambda pair: digest("fragment", pair[0], settings.seed, settings.epoch))
        self.settings = settings
        self.fragment_ids = np.array([f for f, _ in pairs], dtype=np.int64)
        self.bounds = np.concatenate([[0], np.cumsum([n for _, n in pairs], dtype=np.int64)])
        self.total_rows = int(self.bounds[-1])
        num_splits = settings.num_splits
        if self.total_rows == 0:
            raise ValueError(
                "the table has no rows to plan: it is empty, or every row is deleted, or the "
                "filter matches no live row; there must be at least 1 row per split: add rows "
                "or loosen the filter"
            )
        if self.total_rows < num_splits:
            raise ValueError(
                f"the table has {self.total_rows} rows to plan but num_splits={num_splits}; "
                f"there must be at least 1 row per split: use num_splits <= {self.total_rows} "
                "or a filter that matches more rows"
            )
        self.split_length = self.total_rows // num_splits
        self.rotation = (
            digest("rotation", settings.seed, settings.epoch) % self.total_rows if settings.shuffle else 0
        )

    @property
    def num_windows(self) -> int:
        """Windows per split (the last one may be short)."""
        return -(-self.split_length // self.settings.window_rows)

    def window_bounds(self, window: int) -> tuple[int, int]:
        """Split positions [start, stop) covered by ``window``."""
        start = window * self.settings.window_rows
        return start, min(start + self.settings.window_rows, self.split_length)

    def _window_permutation(self, split: int, window: int, length: int) -> np.ndarray:
        """Visit offsets in a window in delivery order: full clumps permuted, tail last."""
        clump = self.settings.clump_rows
        full = length // clump
        seed = digest("window", self.settings.seed, self.settings.epoch, split, window)
        clumps = np.random.Generator(np.random.PCG64(seed)).permutation(full)
        order = (clumps[:, None] * clump + np.arange(clump)).reshape(-1)
        return np.concatenate([order, np.arange(full * clump, length)])

    def _window_blocks(self, split: int, *, first: int, last: int) -> np.ndarray:
        """Split block visited at each block slot touched by visits [first, last)."""
        block_rows = self.settings.block_rows
        full = self.split_length // block_rows
        blocks = np.arange(first // block_rows, -(-last // block_rows), dtype=np.int64)
        if self.settings.shuffle:
            in_full = blocks < full
            key = digest("blocks", self.settings.seed, self.settings.epoch, split)
            blocks[in_full] = permute(blocks[in_full], full, key)
        return blocks

    def laid_out(self, split: int, rows: np.ndarray) -> np.ndarray:
        """Index into the laid-out, rotated sequence for split-local ``rows``."""
        start = split * self.split_length + self.rotation
        result: np.ndarray = (np.asarray(rows, dtype=np.int64) + start) % self.total_rows
        return result

    def window_read(self, requests: Sequence[tuple[int, int]]) -> WindowRead:
        """What to read for the (split, window) ``requests`` and how to order it.

        All requests share one sorted read per fragment, so windows of many splits
        cost one Lance call per fragment rather than one per split. A window's rows
        are whole blocks (cut by the window and split ends), which are runs of
        consecutive laid-out rows, so only the runs are sorted, not every row. A
        request given c times has each of its rows c times in the read.
        """
        keys = list(dict.fromkeys(requests))
        if not keys:
            return WindowRead(pieces=(), gathers=())
        copies = Counter(requests)
        runs = [self._window_runs(split, window) for split, window in keys]
        starts = np.concatenate([run[0] for run in runs])
        lengths = np.concatenate([run[1] for run in runs])
        weights = np.concatenate(
            [np.full(run[0].size, copies[key]) for run, key in zip(runs, keys, strict=True)]
        )
        order = np.argsort(starts, kind="stable")
        lengths, weighted = lengths[order], lengths[order] * weights[order]
        first_rank = np.empty_like(starts)
        first_rank[order] = np.cumsum(weighted) - weighted
        ordered = np.repeat(starts[order] - np.cumsum(lengths) + lengths, lengths) + np.arange(lengths.sum())
        if len(keys) < len(requests):
            ordered = np.repeat(ordered, np.repeat(weights[order], lengths))
        base, ranks = 0, {}
        for key, (run_starts, _, row_run, row_offset) in zip(keys, runs, strict=True):
            ranks[key] = first_rank[base + row_run] + row_offset * copies[key]
            base += run_starts.size
        seen: Counter[tuple[int, int]] = Counter()
        gathers = []
        for key in requests:
            gathers.append(ranks[key] + seen[key] if seen[key] else ranks[key])
            seen[key] += 1
        return WindowRead(pieces=self._pieces(ordered), gathers=tuple(gathers))

    def _window_runs(self, split: int, window: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """One window as runs of consecutive laid-out rows, and where each of its rows sits.

        Returns (run starts, run lengths, run of every row, offset of every row in its
        run), rows in delivery order. Every block slot of the window is one run, cut
        in two where the laid-out sequence wraps past its end; the second part is
        empty for every slot but the one that wraps.
        """
        start, stop = self.window_bounds(window)
        block_rows = self.settings.block_rows
        slots = np.arange(start // block_rows, -(-stop // block_rows), dtype=np.int64)
        low = np.maximum(slots * block_rows, start)
        length = np.minimum(slots * block_rows + block_rows, stop) - low
        blocks = self._window_blocks(split, first=start, last=stop)
        laid = self.laid_out(split, blocks * block_rows + low - slots * block_rows)
        before_wrap = np.minimum(length, self.total_rows - laid)
        if self.settings.shuffle:
            visits = start + self._window_permutation(split, window, stop - start)
        else:
            visits = np.arange(start, stop, dtype=np.int64)
        slot = visits // block_rows - slots[0]
        offset = visits - low[slot]
        wrapped = offset >= before_wrap[slot]
        offset -= wrapped * before_wrap[slot]
        run = slot + wrapped * slots.size
        return (
            np.concatenate([laid, np.zeros_like(laid)]),
            np.concatenate([before_wrap, length - before_wrap]),
            run,
            offset,
        )

    def _pieces(self, ordered: np.ndarray) -> tuple[tuple[int, np.ndarray], ...]:
        """Cut ascending laid-out rows into (fragment id, offsets) per fragment they touch."""
        first, last = np.searchsorted(self.bounds, ordered[[0, -1]], side="right") - 1
        cuts = np.searchsorted(ordered, self.bounds[first : last + 2])
        touched = first + np.flatnonzero(cuts[1:] > cuts[:-1])
        return tuple(
            (int(self.fragment_ids[index]), ordered[low:high] - self.bounds[index])
            for index, low, high in zip(
                touched.tolist(),
                cuts[touched - first].tolist(),
                cuts[touched - first + 1].tolist(),
                strict=True,
            )
        )


def rank_splits(num_splits: int, *, rank: int, world_size: int) -> list[int]:
    """Splits owned by ``rank``: rank, rank + W, rank + 2W, ... (strided)."""
    if num_splits % world_size:
        raise ValueError(
            f"num_splits={num_splits} is not divisible by world_size={world_size}; "
            f"choose num_splits as a multiple of {world_size} so every rank gets as many splits"
        )
    return list(range(rank, num_splits, world_size))


def worker_splits(splits: Sequence[int], *, worker: int, num_workers: int, world_size: int) -> list[int]:
    """Splits of a rank owned by one of its ``num_workers`` workers (strided)."""
    if len(splits) % num_workers:
        num_splits = len(splits) * world_size
        raise ValueError(
            f"num_splits={num_splits} with world_size={world_size} gives each rank "
            f"{len(splits)} splits, which num_workers={num_workers} does not divide; "
            f"choose num_workers dividing {len(splits)} or num_splits a multiple of "
            f"{world_size * num_workers}"
        )
    return list(splits[worker::num_workers])
