"""Timing and memory primitives: steady-state rates after the first item, CPU and RSS from /proc."""

from __future__ import annotations

import gc
import math
import os
import re
import resource
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

_CHECK_EVERY = 256  # per-row loops look at the clock once per this many rows


@dataclass(frozen=True)
class Caps:
    """When to stop a contender: after ``rows`` rows or ``seconds`` of steady state."""

    rows: int
    seconds: float


@dataclass(frozen=True)
class Run:
    """One contender's measurement.

    ``first_s`` runs from before the loader/dataset is built to the first item
    (batch or sample); the steady-state rate counts only the rows after it.
    """

    rows: int
    first_s: float
    steady_rows: int
    steady_s: float
    stopped_by: str
    note: str = ""
    cpu_s: float = math.nan
    own_cpu_s: float = math.nan
    """CPU seconds of this process alone (the trainer's: its threads, not its workers)."""

    @property
    def rate(self) -> float:
        """Steady-state rows per second (0 when nothing came after the first item)."""
        return self.steady_rows / self.steady_s if self.steady_s > 0 else 0.0

    @property
    def cpu_per_row_us(self) -> float:
        """CPU time of the whole process tree per steady-state row, in microseconds."""
        return self.cpu_s / self.steady_rows * 1e6 if self.steady_rows else math.nan

    @property
    def own_cpu_per_row_us(self) -> float:
        """CPU time of this process alone (the trainer) per steady-state row, in microseconds."""
        return self.own_cpu_s / self.steady_rows * 1e6 if self.steady_rows else math.nan

    @property
    def cores(self) -> float:
        """Cores the process tree kept busy on average during the steady state."""
        return self.cpu_s / self.steady_s if self.steady_s > 0 else math.nan


def _drain_rows(items: Iterator[Any], caps: Caps, done: int) -> tuple[int, str]:
    """Count per-row items until exhausted or a cap is hit; returns (rows, why stopped)."""
    deadline = time.perf_counter() + caps.seconds
    rows = 0
    for _ in items:
        rows += 1
        if rows % _CHECK_EVERY == 0:
            if done + rows >= caps.rows:
                return rows, "row cap"
            if time.perf_counter() >= deadline:
                return rows, "time cap"
    return rows, "end of epoch"


def _drain_batches(
    items: Iterator[Any], size: Callable[[Any], int], caps: Caps, done: int
) -> tuple[int, str]:
    """Count the rows of batch items until exhausted or a cap is hit."""
    deadline = time.perf_counter() + caps.seconds
    rows = 0
    for item in items:
        rows += size(item)
        if done + rows >= caps.rows:
            return rows, "row cap"
        if time.perf_counter() >= deadline:
            return rows, "time cap"
    return rows, "end of epoch"


def close_iterator(items: Any) -> str:
    """Close a generator or a DataLoader iterator so its workers shut down.

    Returns "" or what went wrong: a worker that dies while being shut down is
    reported (torch raises from its SIGCHLD handler, after cleaning up) rather
    than ending the benchmark.
    """
    try:
        for name in ("close", "_shutdown_workers"):
            method = getattr(items, name, None)
            if callable(method):
                method()
    except RuntimeError as error:
        return f"error while shutting down: {error}"
    finally:
        gc.collect()
    return ""


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: str) -> tuple[int, float] | None:
    """(parent pid, user + system CPU seconds) of a process from ``/proc/PID/stat``."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / _TICK


def tree_cpu_seconds() -> tuple[float, frozenset[int]]:
    """CPU seconds used so far by this process and its live descendants, and their pids.

    This process's time (all threads) comes from ``getrusage`` (microseconds); its
    descendants' (loader workers: a forkserver's workers are its children, so the
    whole tree is walked) from ``/proc/PID/stat``, in clock ticks. A descendant's
    time is lost once it exits, so callers compare the pids. NaN without ``/proc``.
    """
    usage = resource.getrusage(resource.RUSAGE_SELF)
    total = usage.ru_utime + usage.ru_stime
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return math.nan, frozenset()
    stats = {int(pid): stat for pid in pids if (stat := _stat(pid)) is not None}
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    seen, todo = set(), list(children.get(os.getpid(), []))
    while todo:
        pid = todo.pop()
        seen.add(pid)
        total += stats[pid][1]
        todo.extend(children.get(pid, []))
    return total, frozenset(seen)


def unreaped(pids: frozenset[int]) -> list[int]:
    """The pids among ``pids`` whose process exited but is not reaped yet (state ``Z``).

    A closed loader's workers stay in the tree until their parent (the fork server)
    reaps them; one reaped during a later steady state makes its CPU reading NaN.
    """
    found = []
    for pid in sorted(pids):
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
                state = stat.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state == "Z":
            found.append(pid)
    return found


def _cpu_between(start: tuple[float, frozenset[int]], stop: tuple[float, frozenset[int]]) -> float:
    """CPU seconds between two ``tree_cpu_seconds`` readings; NaN if a descendant exited."""
    if not start[1] <= stop[1]:
        return math.nan
    return stop[0] - start[0]


def time_items(make: Callable[[], Iterator[Any]], *, size: Callable[[Any], int] | None, caps: Caps) -> Run:
    """Time ``make()`` to its first item, then the steady state until a cap or the end.

    ``size(item)`` gives the rows of a batch item; ``None`` means one row per item.
    The CPU time of the process tree is taken over the same steady state (NaN
    when a worker process exited before its end, e.g. at the end of an epoch).
    """
    start = time.perf_counter()
    items = make()
    try:
        first = next(items)
    except StopIteration:
        return Run(
            rows=0, first_s=time.perf_counter() - start, steady_rows=0, steady_s=0.0, stopped_by="empty"
        )
    first_s = time.perf_counter() - start
    first_rows = 1 if size is None else size(first)
    del first
    cpu_start = tree_cpu_seconds()
    own_start = time.process_time()
    steady_start = time.perf_counter()
    if size is None:
        steady_rows, stopped = _drain_rows(items, caps, first_rows)
    else:
        steady_rows, stopped = _drain_batches(items, size, caps, first_rows)
    steady_s = time.perf_counter() - steady_start
    own_cpu_s = time.process_time() - own_start
    cpu_s = _cpu_between(cpu_start, tree_cpu_seconds())
    note = close_iterator(items)
    del items
    gc.collect()
    return Run(first_rows + steady_rows, first_s, steady_rows, steady_s, stopped, note, cpu_s, own_cpu_s)


def proc_status_kib(field: str) -> int:
    """A ``/proc/self/status`` memory field in KiB (``VmRSS``, ``VmHWM``)."""
    with open("/proc/self/status", encoding="ascii") as status:
        match = re.search(rf"^{field}:\s+(\d+) kB", status.read(), re.MULTILINE)
    if match is None:
        raise RuntimeError(f"/proc/self/status has no {field} line")
    return int(match.group(1))


def reset_peak() -> int:
    """Reset ``VmHWM`` to the current RSS (Linux ``clear_refs`` 5); return that RSS in KiB.

    Without the reset (older kernels, no permission) the import peak may stay the
    high-water mark, which can only overstate later growth.
    """
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as refs:
            refs.write("5")
    except OSError:
        pass
    return proc_status_kib("VmRSS")


def _children(pid: int) -> list[int]:
    """Child pids of ``pid`` from ``/proc/PID/task/TID/children`` (empty once it exited)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    found = []
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as children:
                found += [int(child) for child in children.read().split()]
        except OSError:
            continue
    return found


def tree_pids(pid: int | None = None) -> list[int]:
    """A process (this one by default) and its live descendants, the process first."""
    found, todo = [], [os.getpid() if pid is None else pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo += _children(current)
    return found


def tree_rss_kib(pid: int | None = None) -> int:
    """Resident memory of a process and all its live descendants (workers, a forkserver), in KiB.

    A sum of ``VmRSS``: pages shared between processes (libraries) count once per process.
    """
    total, todo = 0, [os.getpid() if pid is None else pid]
    while todo:
        current = todo.pop()
        try:
            with open(f"/proc/{current}/status", encoding="ascii") as status:
                match = re.search(r"^VmRSS:\s+(\d+) kB", status.read(), re.MULTILINE)
        except OSError:
            continue  # exited between the listing and the read
        total += int(match.group(1)) if match else 0
        todo += _children(current)
    return total
