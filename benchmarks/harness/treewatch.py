"""A sampler of a process tree: its peak summed RSS, its CPU seconds, and an RSS limit.

Works in any interpreter with the standard library alone (a contender's runner in
its own virtual environment imports it), reading ``/proc``. Every ``every`` seconds
the tree (the process and its live descendants: loader workers, a fork server) is
walked: the sum of its ``VmRSS`` gives the peak, each process's user + system
time is kept as last seen, so a worker that exits keeps the CPU it had at the
last sample (at most ``every`` seconds of its work are lost; the watched
process's own time is read exactly when it is the caller).
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import threading
from collections.abc import Callable

from benchmarks.harness.measure import tree_pids

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _rss_and_cpu(pid: int) -> tuple[int, float] | None:
    """(VmRSS KiB, user + system CPU seconds) of ``pid``; None once it exited."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/statm", encoding="ascii") as statm:
            resident_pages = int(statm.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return resident_pages * (os.sysconf("SC_PAGE_SIZE") // 1024), (int(fields[11]) + int(fields[12])) / _TICK


class TreeWatch:
    """Sample the tree of ``pid`` (this process by default) in a daemon thread.

    ``limit_kib``: when the tree's RSS passes it, every descendant is killed,
    ``exceeded`` is set and ``on_exceed(watch)`` is called (from the sampling thread:
    it may report and end this process).
    """

    def __init__(
        self,
        pid: int | None = None,
        *,
        every: float = 0.05,
        limit_kib: int = 0,
        on_exceed: Callable[[TreeWatch], None] | None = None,
    ) -> None:
        self.pid = os.getpid() if pid is None else pid
        self.on_exceed = on_exceed
        self.every = every
        self.limit_kib = limit_kib
        self.peak_kib = 0
        self.exceeded = False
        self._cpu: dict[int, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.sample()
        self._thread = threading.Thread(target=self._run, daemon=True, name="treewatch")
        self._thread.start()

    def sample(self) -> int:
        """Read the tree now; its current summed RSS in KiB."""
        total = 0
        pids = tree_pids(self.pid)
        with self._lock:
            for pid in pids:
                found = _rss_and_cpu(pid)
                if found is None:
                    continue
                total += found[0]
                self._cpu[pid] = max(self._cpu.get(pid, 0.0), found[1])
            self.peak_kib = max(self.peak_kib, total)
        if self.limit_kib and total > self.limit_kib and not self.exceeded:
            self.exceeded = True
            for pid in reversed(pids):
                if pid != os.getpid():
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
            if self.on_exceed is not None:
                self.on_exceed(self)
        return total

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()

    def reset_peak(self) -> None:
        """Start a new peak from the tree's RSS now."""
        with self._lock:
            self.peak_kib = 0
        self.sample()

    def cpu_seconds(self) -> float:
        """CPU seconds of the tree so far: each process as last seen (this process exactly)."""
        self.sample()
        with self._lock:
            total = sum(seconds for pid, seconds in self._cpu.items() if pid != os.getpid())
        if self.pid == os.getpid():
            usage = resource.getrusage(resource.RUSAGE_SELF)
            total += usage.ru_utime + usage.ru_stime
        return total

    def stop(self) -> int:
        """Stop sampling (after one last sample); the peak in KiB."""
        self.sample()
        self._stop.set()
        self._thread.join()
        return self.peak_kib
