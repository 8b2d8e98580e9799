"""Live loader statistics: cheap counters, summed over the trainer and its workers."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

__all__ = ["FIELDS", "GAUGES", "Counters", "idle", "timed", "total"]

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
