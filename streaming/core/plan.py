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
2. The first S * L laid-out positions are cut into S segments of L = N // S rows;
   the N - S * L < S surplus rows are left out of this epoch. Split s is segment
   s, or, with ``shuffle`` from plan format 2 on, segment ``segment_order[s]``, a
   seeded permutation of the segments: a batch of fewer samples than S draws its
   consecutive splits from all over the table, not from one stretch of it.
3. A split is cut into blocks of ``block_rows`` consecutive rows. The full blocks
   are visited in a seeded order; a short tail block, if any, comes last.
4. Consecutive visited blocks form windows of ``window_rows`` rows; rows (or
   clumps of ``clump_rows`` rows, a short tail clump last) are permuted across the
   whole window with a seed derived from (seed, epoch, split, window). A window's
   permutation is the only array materialised, and it is window-sized.

One idea in one module: the layout above and the one read that follows it
(``window_read``: the rows of many windows as sorted runs), which must agree row
for row; splitting them would put one arithmetic in two places.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .keyed import digest, permute, round_keys, round_tables, walk, walk_tables
from .parts import NOT_READ, Part

__all__ = [
    "PLAN_FORMAT",
    "NOT_READ",
    "EpochPlan",
    "Part",
    "PlanSettings",
    "WindowRead",
    "digest",
    "permute",
    "window_rows_for",
]

PLAN_FORMAT = 2
"""Bumped whenever the same inputs would put a different row at some position (a
state of an older format resumes with the plan of its format). 2: the segments of
a shuffled plan are taken by the splits in a seeded order."""


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
    plan_format: int = PLAN_FORMAT


def window_rows_for(*, shuffle_buffer_size: int, num_splits: int, block_rows: int) -> int:
    """Rows per split window: ``max(1, shuffle_buffer_size // (S * block_rows))`` blocks."""
    return max(1, shuffle_buffer_size // (num_splits * block_rows)) * block_rows


@dataclass(frozen=True)
class WindowRead:
    """The rows of several windows, as sorted per-fragment offsets plus gather orders.

    Reading ``offsets`` of every piece in turn and concatenating the results gives
    the rows in storage order; row ``q`` of the i-th requested window, in yield
    order, is row ``gathers[i][q]`` of that concatenation, or ``NOT_READ`` when
    the read is one ``Part``'s and that row is another reader's.
    """

    pieces: tuple[tuple[int, np.ndarray], ...]
    gathers: tuple[np.ndarray, ...]


_GROUP_ROWS = 32_768
"""Rows of a read whose ranks are worked out together (``EpochPlan._ranks``)."""


def _groups(bounds: Sequence[int], rows: int) -> list[tuple[int, int]]:
    """Consecutive [first, last) ranges of requests ending at ``bounds``: at most ``rows``
    rows each, or one request."""
    found, first, low = [], 0, 0
    for index, high in enumerate(bounds):
        if high - low > rows and index > first:
            found.append((first, index))
            first, low = index, bounds[index - 1]
    found.append((first, len(bounds)))
    return found


class _Runs(NamedTuple):
    """The block slots of some windows, numbered one after another over all of them."""

    owner: np.ndarray  # the request each slot belongs to
    starts: np.ndarray  # laid-out start of each slot's run, then of its wrapped part
    lengths: np.ndarray  # rows of each slot before the wrap, then after it (mostly 0)
    low: np.ndarray  # first row of each slot, in the slot numbering (``shift`` applied)
    cut: np.ndarray  # where each slot wraps, in the slot numbering
    shift: np.ndarray  # per request: add to a split position for the slot numbering
    sizes: np.ndarray  # rows per request
    wraps: bool  # whether some slot wraps past the end of the laid-out sequence
    read: np.ndarray | None = None  # per slot: whether it is read (a ``Part``'s); None: every slot


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
        self._rounds: dict[int, np.ndarray] = {}  # each split's block order (_block_rounds)
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
        self.segment_order = np.arange(num_splits, dtype=np.int64)
        """The segment of the laid-out rows each split takes (see the module docstring)."""
        if settings.shuffle and settings.plan_format >= 2:
            seed = digest("segments", settings.seed, settings.epoch)
            self.segment_order = np.random.Generator(np.random.PCG64(seed)).permutation(num_splits)

    @property
    def num_windows(self) -> int:
        """Windows per split (the last one may be short)."""
        return -(-self.split_length // self.settings.window_rows)

    def part_rows(self, split: int, part: Part) -> int:
        """Rows of ``split`` that ``part`` reads (its block slots')."""
        block = self.settings.block_rows
        slots = np.arange(-(-self.split_length // block), dtype=np.int64)
        mine = slots[part.owns(slots, np.full_like(slots, split))]
        return int(np.minimum(block, self.split_length - mine * block).sum())

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
        if clump == 1:
            return clumps
        order = (clumps[:, None] * clump + np.arange(clump)).reshape(-1)
        return np.concatenate([order, np.arange(full * clump, length)])

    def _block_rounds(self, split: int) -> np.ndarray:
        """The rounds of the bijection that orders ``split``'s full blocks (kept per split).

        Its round tables where they are small enough (``round_tables``), else its
        round keys.
        """
        rounds = self._rounds.get(split)
        if rounds is None:
            keys = round_keys(digest("blocks", self.settings.seed, self.settings.epoch, split))
            tables = round_tables(keys, self.split_length // self.settings.block_rows)
            rounds = keys if tables is None else tables
            self._rounds[split] = rounds
        return rounds

    def _blocks(self, slots: np.ndarray, splits: Sequence[int], owner: np.ndarray | None) -> np.ndarray:
        """Split block visited at each block slot; slot ``i`` is of split ``splits[owner[i]]``."""
        if not self.settings.shuffle:
            return slots
        full = self.split_length // self.settings.block_rows
        in_full = slots < full
        chosen = None if in_full.all() else np.flatnonzero(in_full)
        if chosen is not None:
            owner = None if owner is None else owner[chosen]
        rounds = [self._block_rounds(split) for split in splits]
        inside = slots if chosen is None else slots[chosen]
        if rounds[0].dtype == np.uint64:
            keys = np.stack(rounds, axis=1)
            placed = walk(inside.astype(np.uint64), full, keys if owner is None else keys[:, owner])
        else:
            tables = np.concatenate(rounds, axis=1) if len(rounds) > 1 else rounds[0]
            placed = walk_tables(inside, full, tables, None if owner is None else owner * rounds[0].shape[1])
        if chosen is None:
            return placed
        blocks = slots.copy()
        blocks[chosen] = placed
        return blocks

    def _window_blocks(self, split: int, *, first: int, last: int) -> np.ndarray:
        """Split block visited at each block slot touched by visits [first, last)."""
        block_rows = self.settings.block_rows
        slots = np.arange(first // block_rows, -(-last // block_rows), dtype=np.int64)
        return self._blocks(slots, [split], None)

    def split_start(self, split: int) -> int:
        """Index into the laid-out, rotated sequence of ``split``'s row 0."""
        return (int(self.segment_order[split]) * self.split_length + self.rotation) % self.total_rows

    def laid_out(self, split: int, rows: np.ndarray) -> np.ndarray:
        """Index into the laid-out, rotated sequence for split-local ``rows``."""
        result: np.ndarray = (np.asarray(rows, dtype=np.int64) + self.split_start(split)) % self.total_rows
        return result

    def window_read(self, requests: Sequence[tuple[int, int]], *, part: Part | None = None) -> WindowRead:
        """What to read for the (split, window) ``requests`` and how to order it.

        All requests share one sorted read per fragment, so windows of many splits
        cost one Lance call per fragment rather than one per split. A window's rows
        are whole blocks (cut by the window and split ends), which are runs of
        consecutive laid-out rows, so only the runs are sorted, not every row. A
        request given c times has each of its rows c times in the read. With a
        ``part`` only that reader's block slots are read (the others' rows gather
        ``NOT_READ``), in the same yield order.
        """
        keys = list(dict.fromkeys(requests))
        if not keys:
            return WindowRead(pieces=(), gathers=())
        copies = Counter(requests)
        runs = self._runs(keys, part)
        weights = np.tile(np.array([copies[key] for key in keys], dtype=np.int64)[runs.owner], 2)
        order = np.argsort(runs.starts, kind="stable")
        lengths, weighted = runs.lengths[order], runs.lengths[order] * weights[order]
        first_rank = np.empty_like(runs.starts)
        first_rank[order] = np.cumsum(weighted) - weighted
        ordered = np.repeat(runs.starts[order] - np.cumsum(lengths) + lengths, lengths)
        ordered += np.arange(ordered.size)
        if ordered.size == 0:  # a part with no slot in these windows
            return WindowRead(
                pieces=(),
                gathers=tuple(np.full(size, NOT_READ, dtype=np.int64) for size in self._sizes(requests)),
            )
        if len(keys) < len(requests):
            ordered = np.repeat(ordered, np.repeat(weights[order], lengths))
        ranks = self._ranks(keys, runs, first_rank, weights if len(keys) < len(requests) else None)
        seen: Counter[tuple[int, int]] = Counter()
        gathers = []
        for key in requests:
            gathers.append(ranks[key] + seen[key] if seen[key] else ranks[key])
            seen[key] += 1
        return WindowRead(pieces=self._pieces(ordered), gathers=tuple(gathers))

    def _sizes(self, requests: Sequence[tuple[int, int]]) -> list[int]:
        """Rows of each requested window."""
        return [self.window_bounds(window)[1] - self.window_bounds(window)[0] for _, window in requests]

    def _runs(self, keys: Sequence[tuple[int, int]], part: Part | None = None) -> _Runs:
        """The requested windows' block slots as runs of consecutive laid-out rows (of
        ``part``'s slots only: the others' runs are empty and ``read`` says which)."""
        block_rows, total = self.settings.block_rows, self.total_rows
        splits = np.array([split for split, _ in keys], dtype=np.int64)
        start = np.array([window for _, window in keys], dtype=np.int64) * self.settings.window_rows
        stop = np.minimum(start + self.settings.window_rows, self.split_length)
        first = start // block_rows
        count = -(-stop // block_rows) - first
        owner = np.repeat(np.arange(len(keys)), count)
        renumber = np.cumsum(count) - count - first  # a request's slots -> indices into all slots
        slots = np.arange(owner.size) - renumber[owner]
        low = np.maximum(slots * block_rows, start[owner])
        length = np.minimum(slots * block_rows + block_rows, stop[owner]) - low
        read = None if part is None else part.owns(slots, splits[owner])
        if read is not None:
            length = length * read
        blocks = self._blocks(slots, splits.tolist(), owner if len(keys) > 1 else None)
        laid = (
            blocks * block_rows
            + low
            - slots * block_rows
            + self.segment_order[splits][owner] * self.split_length
            + self.rotation
        ) % total
        before = np.minimum(length, total - laid)
        low += renumber[owner] * block_rows
        return _Runs(
            owner=owner,
            starts=np.concatenate([laid, np.zeros_like(laid)]),
            lengths=np.concatenate([before, length - before]),
            low=low,
            cut=low + before,
            shift=start + renumber * block_rows,
            sizes=stop - start,
            wraps=bool((length > before).any()),
            read=read,
        )

    def _ranks(
        self, keys: Sequence[tuple[int, int]], runs: _Runs, first_rank: np.ndarray, weights: np.ndarray | None
    ) -> dict[tuple[int, int], np.ndarray]:
        """Rank in the read of every row of every requested window, rows in delivery order.

        A row visited at split position ``v`` is ``v + shift`` of its request in the
        slot numbering of ``runs``, so its slot is that over ``block_rows``; the rows
        past a slot's ``cut`` are in its wrapped part, run ``slot + len(slots)``.
        Worked out for groups of requests of about ``_GROUP_ROWS`` rows, so that no
        temporary is read-sized.
        """
        sizes, bounds = runs.sizes.tolist(), np.cumsum(runs.sizes).tolist()
        run_low = np.concatenate([runs.low, runs.cut])
        base = first_rank - (run_low if weights is None else run_low * weights)
        ranks = np.empty(bounds[-1], dtype=np.int64)
        for first, last in _groups(bounds, _GROUP_ROWS):
            visits = self._visits(keys[first:last], runs.shift[first:last], runs.sizes[first:last])
            run = visits // self.settings.block_rows
            skipped = None if runs.read is None else ~runs.read.take(run)
            if runs.wraps:
                np.add(run, runs.owner.size, out=run, where=visits >= runs.cut.take(run))
            if weights is not None:
                visits *= weights.take(run)
            out = ranks[bounds[first] - sizes[first] : bounds[last - 1]]
            base.take(run, out=out, mode="clip")  # every run is in range: clip only skips a copy
            out += visits
            if skipped is not None:
                out[skipped] = NOT_READ
        return {key: ranks[high - n : high] for key, n, high in zip(keys, sizes, bounds, strict=True)}

    def _visits(self, keys: Sequence[tuple[int, int]], shifts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """The split positions of ``keys``' rows in delivery order, each plus its request's shift."""
        if not self.settings.shuffle:
            visits = np.repeat(shifts - np.cumsum(sizes) + sizes, sizes)
            visits += np.arange(visits.size)
            return visits
        visits = np.empty(int(sizes.sum()), dtype=np.int64)
        low = 0
        for (split, window), shift, n in zip(keys, shifts.tolist(), sizes.tolist(), strict=True):
            np.add(self._window_permutation(split, window, n), shift, out=visits[low : low + n])
            low += n
        return visits

    def _pieces(self, ordered: np.ndarray) -> tuple[tuple[int, np.ndarray], ...]:
        """Cut ascending laid-out rows into (fragment id, offsets) per fragment they touch.

        ``ordered`` becomes the offsets: the pieces are consecutive slices of it.
        """
        first, last = np.searchsorted(self.bounds, ordered[[0, -1]], side="right") - 1
        cuts = np.searchsorted(ordered, self.bounds[first : last + 2])
        touched = np.flatnonzero(cuts[1:] > cuts[:-1])
        lows, highs = cuts[touched], cuts[touched + 1]
        ordered -= np.repeat(self.bounds[first + touched], highs - lows)
        return tuple(
            (fragment, ordered[low:high])
            for fragment, low, high in zip(
                self.fragment_ids[first + touched].tolist(), lows.tolist(), highs.tolist(), strict=True
            )
        )
