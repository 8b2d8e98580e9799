"""Live loader statistics: cheap counters, summed over the trainer and its workers."""

from __future__ import annotations

import array
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

__all__ = ["FIELDS", "GAUGES", "Counters", "Waits", "idle", "rows_per_worker", "timed", "total"]

GAUGES = ("read_ahead", "raw_rows", "ready_rows", "unscanned_rows")
"""What the running iterator holds right now; zero while none runs."""

FIELDS = (
    "rows_read",
    "bytes_read",
    "read_seconds",
    "transform_seconds",
    "convert_seconds",
    "windows_read",
    "rows_dropped",
    "rows_cached",
    *GAUGES,
)

Gauges = Callable[[], dict[str, int]]

_STEPS = 16
"""Histogram buckets per doubling of a wait: a quantile is within 1/32 (3%) of the truth."""
_LOWEST, _HIGHEST = -20, 13
"""Waits below 2**-20 s (1 us) share the first bucket, waits above 2**13 s the last."""
_BUCKETS = (_HIGHEST - _LOWEST) * _STEPS
_RING = 1024
"""Waits kept as they come before they are sorted into the histogram, all at once."""
QUANTILES = (("p50", 0.50), ("p95", 0.95), ("p99", 0.99))


def buckets(seconds: np.ndarray) -> np.ndarray:
    """The histogram bucket of each wait: ``_STEPS`` equal steps per doubling."""
    mantissa, exponent = np.frexp(seconds)  # seconds = mantissa * 2**exponent, 0.5 <= mantissa < 1
    index = (exponent.astype(np.int64) - _LOWEST) * _STEPS + ((mantissa - 0.5) * 2 * _STEPS).astype(np.int64)
    return np.where(seconds > 0, np.clip(index, 0, _BUCKETS - 1), 0)


def _middle(index: int) -> float:
    """The middle of a bucket's range of seconds."""
    exponent, step = divmod(index, _STEPS)
    return (0.5 + (step + 0.5) / (2 * _STEPS)) * 2.0 ** (exponent + _LOWEST)


class Waits:
    """How long the training loop waited in ``next()`` for each batch of a loader.

    Always on, so it costs a few hundred nanoseconds a batch and fixed memory: the
    latest waits in a ring of 1,024, sorted into a histogram of fixed size (16
    buckets per doubling, so a quantile is within 3% of the measured wait) each time
    the ring fills and whenever the figures are read, and one total per worker. The
    first batch of each iterator (start-up: workers starting, the first windows
    read) counts in the totals and in ``wait_first_seconds``, not in the quantiles.
    Written by the thread that iterates the loader; read from any thread.
    """

    __slots__ = (
        "_counts",
        "_folded",
        "_lock",
        "_ring",
        "_seen",
        "first_batches",
        "first_seconds",
        "longest",
        "seconds",
        "workers",
    )

    def __init__(self) -> None:
        self._ring = array.array("d", bytes(8 * _RING))
        self._seen = 0  # waits ever put in the ring
        self._folded = 0  # of them, sorted into the histogram
        self._counts = np.zeros(_BUCKETS, dtype=np.int64)
        self._lock = threading.Lock()
        self.first_batches = 0
        self.first_seconds = 0.0
        self.seconds = 0.0  # of the folded waits
        self.longest = 0.0
        self.workers: list[float] = []

    def add(self, seconds: float) -> None:
        """One batch after an iterator's first reached the loop after ``seconds`` in ``next()``."""
        seen = self._seen
        self._ring[seen % _RING] = seconds
        self._seen = seen + 1
        if seen % _RING == _RING - 1:
            self._fold()

    def add_first(self, seconds: float) -> None:
        """An iterator's first batch reached the loop after ``seconds`` (start-up)."""
        self.first_batches += 1
        self.first_seconds += seconds

    def add_worker(self, worker: int, seconds: float) -> None:
        """Part of a wait spent waiting for worker ``worker``'s message of shares."""
        workers = self.workers
        while len(workers) <= worker:
            workers.append(0.0)
        workers[worker] += seconds

    def _fold(self) -> None:
        """Sort the ring's waits not yet counted into the histogram."""
        with self._lock:
            seen, folded = self._seen, self._folded
            if seen == folded:
                return
            start, stop = folded % _RING, (seen - 1) % _RING + 1
            fresh = np.frombuffer(self._ring, dtype=np.float64)[start:stop]
            self._counts += np.bincount(buckets(fresh), minlength=_BUCKETS)
            self.seconds += float(fresh.sum())
            self.longest = max(self.longest, float(fresh.max()))
            self._folded = seen

    def quantile(self, share: float) -> float:
        """The wait that ``share`` (0 to 1) of the batches after each first one stayed under."""
        self._fold()
        counts = self._counts
        steady = int(counts.sum())
        if not steady:
            return 0.0
        rank = max(1, math.ceil(share * steady))
        index = int(np.searchsorted(np.cumsum(counts), rank))
        # the last bucket holds every longer wait: the longest is its bound
        return self.longest if index == _BUCKETS - 1 else min(_middle(index), self.longest)

    def as_dict(self) -> dict[str, float]:
        """The figures ``stats()`` gives, in seconds (see ``StreamingDataset.stats``)."""
        found = {f"wait_{name}_seconds": self.quantile(share) for name, share in QUANTILES}
        found = {
            "wait_batches": self._folded + self.first_batches,
            "wait_seconds": self.seconds + self.first_seconds,
            "wait_first_seconds": self.first_seconds,
            **found,
            "wait_longest_seconds": self.longest,
        }
        found.update({f"wait_worker_{worker}_seconds": value for worker, value in enumerate(self.workers)})
        return found


@dataclass
class Counters:
    """What one process's iterators read, as running totals."""

    rows_read: int = 0
    bytes_read: int = 0
    read_seconds: float = 0.0
    transform_seconds: float = 0.0
    convert_seconds: float = 0.0
    windows_read: int = 0
    rows_dropped: int = 0
    rows_cached: int = 0
    waits: Waits = field(default_factory=Waits, repr=False, compare=False)
    """The loop's waits for a loader's batches (the trainer's counters only)."""
    _gauges: Gauges | None = field(default=None, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(
        self,
        *,
        rows: int = 0,
        nbytes: int = 0,
        read: float = 0.0,
        transform: float = 0.0,
        convert: float = 0.0,
        windows: int = 0,
        dropped: int = 0,
        cached: int = 0,
    ) -> None:
        """Add to the totals (called from the read and transform threads)."""
        with self._lock:
            self.rows_read += rows
            self.bytes_read += nbytes
            self.read_seconds += read
            self.transform_seconds += transform
            self.convert_seconds += convert
            self.windows_read += windows
            self.rows_dropped += dropped
            self.rows_cached += cached

    def absorb(self, other: Counters) -> None:
        """Add ``other``'s totals to these: a persistent worker keeps its own totals when
        it takes over the trainer's copy of a source, whose counters start at zero."""
        self.add(
            rows=other.rows_read,
            nbytes=other.bytes_read,
            read=other.read_seconds,
            transform=other.transform_seconds,
            convert=other.convert_seconds,
            windows=other.windows_read,
            dropped=other.rows_dropped,
            cached=other.rows_cached,
        )

    def watch(self, gauges: Gauges | None) -> None:
        """Read the gauges from ``gauges`` (the running iterator's); ``None``: all zero."""
        self._gauges = gauges

    def as_dict(self) -> dict[str, float]:
        """The totals and gauges as plain data (sent with worker batches).

        Call from the thread that consumes the running iterator (the gauges read
        its windows).
        """
        gauges = {} if self._gauges is None else self._gauges()
        with self._lock:
            totals: dict[str, float] = {name: getattr(self, name) for name in FIELDS if name not in GAUGES}
        return {**totals, **{name: gauges.get(name, 0) for name in GAUGES}}

    def __getstate__(self) -> dict[str, float]:
        with self._lock:  # the totals only: gauges belong to this process's iterator
            return {name: getattr(self, name) for name in FIELDS if name not in GAUGES}

    def __setstate__(self, state: dict[str, float]) -> None:
        self.__init__(**state)  # type: ignore[misc]


@contextmanager
def timed(counters: Counters, kind: str) -> Iterator[None]:
    """Add the duration of the block to ``read_seconds`` (``kind="read"``),
    ``transform_seconds`` (``kind="transform"``) or ``convert_seconds``
    (``kind="convert"``: Arrow columns to samples, reads without a transform)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        elapsed = time.perf_counter() - start
        if kind == "read":
            counters.add(read=elapsed)
        elif kind == "convert":
            counters.add(convert=elapsed)
        else:
            counters.add(transform=elapsed)


def row_bytes(counters: Iterable[Counters]) -> float:
    """Bytes read per row so far by these counters together (0 before the first read)."""
    parts = list(counters)
    rows = sum(part.rows_read for part in parts)
    return sum(part.bytes_read for part in parts) / rows if rows else 0.0


def total(parts: list[dict[str, float]]) -> dict[str, float]:
    """Sum of several processes' totals."""
    return {name: sum(part.get(name, 0) for part in parts) for name in FIELDS}


def idle(reports: dict[tuple[int, int], dict[str, float]]) -> None:
    """Zero the gauges of stopped processes' last reports (their totals stay)."""
    for key, report in reports.items():
        reports[key] = {**report, **dict.fromkeys(GAUGES, 0)}


def rows_per_worker(reports: Mapping[tuple[int, int], Mapping[str, float]]) -> dict[str, float]:
    """``rows_read_worker_<w>``: the rows each worker read, over the processes that were
    worker w (the latest counters of each, keyed (pid, worker))."""
    found: dict[int, float] = {}
    for (_, worker), counters in reports.items():
        found[worker] = found.get(worker, 0) + counters.get("rows_read", 0)
    return {f"rows_read_worker_{worker}": found[worker] for worker in sorted(found)}
