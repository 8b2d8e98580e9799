"""The plan's window read is the same, bit for bit, as the algorithm it replaced.

``FrozenPlan`` below is ``EpochPlan`` of plan format 1 as it was before its window
read was worked out for all requests at once (one request at a time, the Feistel
network evaluated round by round): a frozen copy kept here only as the reference.
Every row at every position must stay where it was, or old checkpoints would
resume onto other rows.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.core import keyed
from streaming.core.plan import EpochPlan, PlanSettings, WindowRead, digest, permute

# -- the frozen reference (do not edit: it defines plan format 1) ----------------------

_MUL_1 = np.uint64(0xBF58476D1CE4E5B9)
_MUL_2 = np.uint64(0x94D049BB133111EB)
_ROUNDS = 4


def frozen_digest(*parts: object) -> int:
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


def frozen_permute(indices: np.ndarray, n: int, key: int) -> np.ndarray:
    """Map ``indices`` (each in [0, n)) through a seeded bijection of ``range(n)``.

    A balanced Feistel network on the smallest even bit width that covers ``n``,
    with cycle walking to stay inside [0, n). Costs O(len(indices)) time and
    memory whatever ``n`` is; the same ``(n, key)`` always gives the same bijection.
    """
    values = np.asarray(indices, dtype=np.uint64)
    if n <= 1 or values.size == 0:
        return values.astype(np.int64)
    half_bits = max(1, ((n - 1).bit_length() + 1) // 2)
    keys = [np.uint64(frozen_digest(key, round_)) for round_ in range(_ROUNDS)]
    result = np.empty_like(values)
    pending = np.arange(values.size)
    current = values
    while pending.size:
        current = _feistel(current, half_bits, keys)
        inside = current < np.uint64(n)
        result[pending[inside]] = current[inside]
        pending, current = pending[~inside], current[~inside]
    return result.astype(np.int64)


class FrozenPlan:
    """EpochPlan as of plan format 1 before the vectorised window read, verbatim."""

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
            pairs.sort(key=lambda pair: frozen_digest("fragment", pair[0], settings.seed, settings.epoch))
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
            frozen_digest("rotation", settings.seed, settings.epoch) % self.total_rows
            if settings.shuffle
            else 0
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
        seed = frozen_digest("window", self.settings.seed, self.settings.epoch, split, window)
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
            key = frozen_digest("blocks", self.settings.seed, self.settings.epoch, split)
            blocks[in_full] = frozen_permute(blocks[in_full], full, key)
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


# -- the comparisons -------------------------------------------------------------------


def assert_same_read(got: WindowRead, want: WindowRead, context: object) -> None:
    """Same pieces (fragment ids, offsets, dtypes) and gathers (values, dtypes)."""
    assert [f for f, _ in got.pieces] == [f for f, _ in want.pieces], f"fragments differ for {context}"
    for (fragment, offsets), (_, expected) in zip(got.pieces, want.pieces, strict=True):
        assert offsets.dtype == expected.dtype, f"dtype of fragment {fragment}'s offsets for {context}"
        assert np.array_equal(offsets, expected), f"offsets of fragment {fragment} differ for {context}"
    assert len(got.gathers) == len(want.gathers), f"number of gathers differs for {context}"
    for i, (gather, expected) in enumerate(zip(got.gathers, want.gathers, strict=True)):
        assert gather.dtype == expected.dtype, f"dtype of gather {i} for {context}"
        assert np.array_equal(gather, expected), f"gather {i} differs for {context}"


def both(rows: Sequence[int], plan_settings: PlanSettings) -> tuple[EpochPlan, FrozenPlan]:
    ids = list(range(100, 100 + len(rows)))
    plan, frozen = EpochPlan(ids, rows, plan_settings), FrozenPlan(ids, rows, plan_settings)
    assert plan.fragment_ids.tolist() == frozen.fragment_ids.tolist()
    assert plan.bounds.tolist() == frozen.bounds.tolist()
    assert (plan.split_length, plan.rotation) == (frozen.split_length, frozen.rotation)
    return plan, frozen


def wrapping(plan: FrozenPlan) -> list[tuple[int, int]]:
    """The (split, window) whose rows cross the end of the laid-out sequence, if any."""
    found = []
    for split in range(plan.settings.num_splits):
        start = (split * plan.split_length + plan.rotation) % plan.total_rows
        if start + plan.split_length > plan.total_rows:
            found.append((split, (plan.total_rows - start) // plan.settings.window_rows))
    return found


fragment_rows = st.lists(
    st.one_of(st.integers(0, 40), st.sampled_from([0, 1]), st.integers(2**21, 2**23)),
    min_size=1,
    max_size=8,
)


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[int], PlanSettings, list[tuple[int, int]]]:
    rows = draw(fragment_rows.filter(lambda rows: sum(rows) >= 1))
    plan_settings = PlanSettings(
        num_splits=draw(st.integers(1, min(12, sum(rows)))),
        shuffle=draw(st.booleans()),
        seed=draw(st.integers(0, 2**64 - 1)),
        epoch=draw(st.integers(0, 5)),
        block_rows=draw(st.sampled_from([1, 2, 3, 4, 5, 7, 8, 64])),
        window_rows=draw(st.integers(1, 30)),
        clump_rows=draw(st.integers(1, 5)),
        plan_format=1,
    )
    frozen = FrozenPlan(list(range(len(rows))), rows, plan_settings)
    windows = frozen.num_windows
    window = st.one_of(st.integers(0, windows - 1), st.just(windows - 1))
    key = st.tuples(st.integers(0, plan_settings.num_splits - 1), window)
    keys = draw(
        st.lists(st.one_of(key, st.sampled_from(wrapping(frozen) or [(0, 0)])), min_size=1, max_size=6)
    )
    requests = draw(st.lists(st.sampled_from(keys), min_size=1, max_size=8))  # repeats too
    return rows, plan_settings, requests


@settings(max_examples=300, deadline=None)
@given(cases())
def test_window_read_is_the_frozen_one_bit_for_bit(case):
    """Any rows (0- and 1-row fragments, splits past the round tables' width), any settings,
    windows cut by the split end and the wrap-around, requests given several times."""
    rows, plan_settings, requests = case
    plan, frozen = both(rows, plan_settings)
    assert_same_read(plan.window_read(requests), frozen.window_read(requests), (plan_settings, requests))
    alone = requests[-1:]  # another grouping of the same plan: nothing it kept changes a read
    assert_same_read(plan.window_read(alone), frozen.window_read(alone), (plan_settings, alone))


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 2**44), st.integers(0, 2**64 - 1), st.lists(st.integers(0, 2**44), max_size=20))
def test_permute_is_the_frozen_bijection(n, key, picks):
    indices = np.array([pick % n for pick in picks] + [0, n - 1], dtype=np.int64)
    assert np.array_equal(permute(indices, n, key), frozen_permute(indices, n, key))
    assert digest("blocks", key, n) == frozen_digest("blocks", key, n)


def test_round_tables_stop_at_their_width():
    keys = keyed.round_keys(7)
    assert keyed.round_tables(keys, 2 ** (2 * keyed.TABLE_BITS)) is not None
    assert keyed.round_tables(keys, 2 ** (2 * keyed.TABLE_BITS) + 1) is None


def profile_plans(*, block_rows: int, buffer: int, shuffle: bool = True, clump_rows: int = 1):
    """A 2,000,000-row table of 200 uneven fragments in 16 splits, like a dataset's plan."""
    rows = [int(n) for n in np.random.default_rng(7).integers(5_000, 15_000, size=200)]
    return both(
        rows,
        PlanSettings(
            num_splits=16,
            shuffle=shuffle,
            seed=3,
            epoch=1,
            block_rows=block_rows,
            window_rows=max(1, buffer // (16 * block_rows)) * block_rows,
            clump_rows=clump_rows,
            plan_format=1,
        ),
    )


@pytest.mark.parametrize(
    "profile",
    [
        {"block_rows": 64, "buffer": 32_768},
        {"block_rows": 64, "buffer": 32_768, "shuffle": False},
        {"block_rows": 64, "buffer": 32_768, "clump_rows": 8},
        {"block_rows": 2_048, "buffer": 262_144},
    ],
    ids=["local", "local-in-order", "local-clumps", "remote"],
)
def test_the_profiles_windows_are_the_frozen_ones(profile):
    """Every split's first, fourth and last window, the wrapping one, together and alone."""
    plan, frozen = profile_plans(**profile)
    last = plan.num_windows - 1
    for requests in (
        [(split, 3) for split in range(16)],
        [(split, last) for split in range(16)] + [(5, last), (5, last)],
        [(split, 0) for split in range(16)] + wrapping(frozen),
        wrapping(frozen) or [(0, 0)],
        [(9, 1)],
    ):
        assert_same_read(plan.window_read(requests), frozen.window_read(requests), requests)
