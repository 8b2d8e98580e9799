"""Peak memory of the trainer and of each worker process, from each process's own
high-water mark (``VmHWM`` of ``/proc/<pid>/status``).

A process's ``VmHWM`` belongs to its address space: ``exec`` starts a new one, so
unlike ``ru_maxrss`` it never carries the peak of the program that launched the
trainer. The trainer's mark is reset to its current size when a run starts (Linux's
``clear_refs``), so its peak is the run's; a worker's is its whole life, read while
it runs (every few batches and at the end), so a worker that has exited by the end
of the run keeps the last figure read.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

__all__ = ["PeakWatch", "high_water", "reset_high_water"]

_KIB = 1024
_EVERY_S = 0.02
"""Least time between two readings of the workers' marks (a reading costs ~20 us a process)."""


def high_water(pid: int | str = "self") -> int | None:
    """Peak resident bytes of process ``pid`` (``VmHWM``); ``None`` when gone or unknown."""
    try:
        with open(f"/proc/{pid}/status") as file:
            for line in file:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * _KIB
    except (OSError, ValueError, IndexError):
        pass
    return None


def reset_high_water() -> bool:
    """Reset this process's ``VmHWM`` to its present size; False where Linux does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        return False
    return True


class PeakWatch:
    """The highest ``VmHWM`` read of the trainer and of each worker process during a run."""

    def __init__(self) -> None:
        self.reset = reset_high_water()
        self.trainer = high_water() or 0
        self.workers: dict[int, int] = {}  # worker index -> peak bytes
        self._read_at = 0.0

    def read(self, workers: Iterable[tuple[int, int]], *, now: float | None = None) -> None:
        """Read the marks of ``workers`` ((pid, worker index) pairs), at most every 20 ms
        (``now=None``: read now whatever the time)."""
        if now is not None and now - self._read_at < _EVERY_S:
            return
        self._read_at = time.perf_counter() if now is None else now
        self.trainer = max(self.trainer, high_water() or 0)
        for pid, worker in list(workers):
            peak = high_water(pid)
            if peak is not None:
                self.workers[worker] = max(self.workers.get(worker, 0), peak)

    def worker_peaks(self) -> tuple[int, ...]:
        """Each worker's peak bytes, worker 0 first."""
        return tuple(self.workers[worker] for worker in sorted(self.workers))
