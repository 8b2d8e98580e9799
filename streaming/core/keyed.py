"""Seeded primitives of the plan: a stable digest and a keyed bijection of ``range(n)``.

Both are pure functions of their inputs, the same in every process and on every
machine. The bijection is a balanced Feistel network on the smallest even bit
width that covers ``n``, with cycle walking to stay inside [0, n); ``walk``
evaluates it for many values at once, each under its own key, so every split's
blocks of a read are placed in one pass. Where a half is at most ``TABLE_BITS``
wide, ``walk_tables`` looks each round's function up in a table of all its values
(``round_tables``: at most 32 KiB per key) instead of working it out; both give
exactly what ``permute`` gives.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np

__all__ = [
    "ROUNDS",
    "TABLE_BITS",
    "digest",
    "half_bits",
    "permute",
    "round_keys",
    "round_tables",
    "walk",
    "walk_tables",
]

ROUNDS = 4
"""Feistel rounds; each round has its own 64-bit key."""

TABLE_BITS = 10
"""Widest half for which ``round_tables`` keeps each round's function as a table."""

_MUL_1 = np.uint64(0xBF58476D1CE4E5B9)
_MUL_2 = np.uint64(0x94D049BB133111EB)
_SHIFTS = (np.uint64(30), np.uint64(27), np.uint64(31))


def digest(*parts: object) -> int:
    """Return a stable unsigned 64-bit digest of ``parts``.

    Unlike Python's ``hash()`` the value is the same in every process and on every
    machine, so it may decide anything that has to reproduce.
    """
    text = "\x1f".join(repr(part) for part in parts).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little")


def round_keys(key: int) -> np.ndarray:
    """The ``ROUNDS`` uint64 round keys of the bijection keyed by ``key``."""
    return np.array([digest(key, round_) for round_ in range(ROUNDS)], dtype=np.uint64)


def _mix(values: np.ndarray, key: np.ndarray, mask: np.uint64) -> np.ndarray:
    """Keyed splitmix64 finaliser of ``values`` (wraps on overflow), cut to ``mask``."""
    z = values ^ key
    spare = z >> _SHIFTS[0]
    z ^= spare
    z *= _MUL_1
    np.right_shift(z, _SHIFTS[1], out=spare)
    z ^= spare
    z *= _MUL_2
    np.right_shift(z, _SHIFTS[2], out=spare)
    z ^= spare
    z &= mask
    return z


def _feistel(values: np.ndarray, bits: int, keys: np.ndarray) -> np.ndarray:
    mask = np.uint64((1 << bits) - 1)
    shift = np.uint64(bits)
    left, right = values >> shift, values & mask
    for key in keys:
        mixed = _mix(right, key, mask)
        mixed ^= left
        left, right = right, mixed
    left <<= shift
    left |= right
    return left


def half_bits(n: int) -> int:
    """Bits of each half of the Feistel network over ``range(n)``."""
    return max(1, ((n - 1).bit_length() + 1) // 2)


def round_tables(keys: np.ndarray, n: int) -> np.ndarray | None:
    """Each round's function of ``keys`` at every half value, or None past ``TABLE_BITS``.

    Row ``r`` holds the round function ``r`` (the mix cut to the half width) of
    every value of a half, so ``walk_tables`` looks a round up instead of working
    it out; the values are exactly those ``walk`` works out.
    """
    bits = half_bits(n)
    if bits > TABLE_BITS:
        return None
    mask = np.uint64((1 << bits) - 1)
    values = np.arange(1 << bits, dtype=np.uint64)
    return np.stack([_mix(values, key, mask) for key in keys]).astype(np.int64)


def _cycle_walk(
    values: np.ndarray, n: int, step: Callable[..., np.ndarray], each: np.ndarray | None
) -> np.ndarray:
    """Apply ``step`` to each value until it lands in [0, n); ``each``: per-value step input."""
    result = np.empty(values.size, dtype=np.int64)
    pending = np.arange(values.size)
    current = values
    while True:
        current = step(current, each)
        inside = current < n
        if inside.all():
            result[pending] = current
            return result
        result[pending[inside]] = current[inside]
        outside = ~inside
        pending, current = pending[outside], current[outside]
        if each is not None:
            each = each[..., outside]


def walk(values: np.ndarray, n: int, keys: np.ndarray) -> np.ndarray:
    """Map ``values`` (uint64, each in [0, n)) through the bijections keyed by ``keys``.

    ``keys`` holds round keys, ``ROUNDS`` rows by one column per value (or one
    column for all). Value ``i`` goes through the bijection of column ``i`` exactly
    as ``permute`` would take it alone. Returns int64.
    """
    if n <= 1 or values.size == 0:
        return values.astype(np.int64)
    bits = half_bits(n)
    if keys.shape[1] == 1:
        return _cycle_walk(values, n, lambda current, _: _feistel(current, bits, keys), None)
    return _cycle_walk(values, n, lambda current, each: _feistel(current, bits, each), keys)


def walk_tables(values: np.ndarray, n: int, tables: np.ndarray, offsets: np.ndarray | None) -> np.ndarray:
    """``walk`` with the round functions looked up in ``tables`` (``round_tables`` side by side).

    Value ``i`` uses the tables starting at column ``offsets[i]`` (all the first
    ones when ``offsets`` is None). Values and result are int64.
    """
    if n <= 1 or values.size == 0:
        return values.astype(np.int64)
    bits = half_bits(n)
    mask = (1 << bits) - 1

    def step(current: np.ndarray, offsets: np.ndarray | None) -> np.ndarray:
        left, right = current >> bits, current & mask
        for table in tables:
            mixed = table.take(right if offsets is None else right + offsets)
            mixed ^= left
            left, right = right, mixed
        left <<= bits
        left |= right
        return left

    return _cycle_walk(values, n, step, offsets)


def permute(indices: np.ndarray, n: int, key: int) -> np.ndarray:
    """Map ``indices`` (each in [0, n)) through a seeded bijection of ``range(n)``.

    Costs O(len(indices)) time and memory whatever ``n`` is; the same ``(n, key)``
    always gives the same bijection.
    """
    values = np.asarray(indices, dtype=np.uint64)
    if n <= 1 or values.size == 0:
        return values.astype(np.int64)
    return walk(values, n, round_keys(key)[:, None])
