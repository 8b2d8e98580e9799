"""Live loader statistics: cheap counters, summed over the trainer and its workers."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

__all__ = ["FIELDS", "Counters", "timed", "total"]

FIELDS = ("rows_read", "bytes_read", "read_seconds", "transform_seconds", "windows_read", "read_ahead")


@dataclass
class Counters:
    """What one process's iterators read, as running totals."""

    rows_read: int = 0
    bytes_read: int = 0
    read_seconds: float = 0.0
    transform_seconds: float = 0.0
    windows_read: int = 0
    read_ahead: int = 0  # windows requested and not yet consumed (a gauge)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(
        self, *, rows: int = 0, nbytes: int = 0, read: float = 0.0, transform: float = 0.0, windows: int = 0
    ) -> None:
        """Add to the totals (called from the read threads)."""
        with self._lock:
            self.rows_read += rows
            self.bytes_read += nbytes
            self.read_seconds += read
            self.transform_seconds += transform
            self.windows_read += windows

    def as_dict(self) -> dict[str, float]:
        """The totals as plain data (sent with worker batches)."""
        with self._lock:
            return {name: getattr(self, name) for name in FIELDS}

    def __getstate__(self) -> dict[str, float]:
        return self.as_dict()

    def __setstate__(self, state: dict[str, float]) -> None:
        self.__init__(**state)  # type: ignore[misc]


@contextmanager
def timed(counters: Counters, kind: str) -> Iterator[None]:
    """Add the duration of the block to ``read_seconds`` (``kind="read"``) or
    ``transform_seconds`` (``kind="transform"``)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        elapsed = time.perf_counter() - start
        if kind == "read":
            counters.add(read=elapsed)
        else:
            counters.add(transform=elapsed)


def total(parts: list[dict[str, float]]) -> dict[str, float]:
    """Sum of several processes' totals."""
    return {name: sum(part.get(name, 0) for part in parts) for name in FIELDS}
