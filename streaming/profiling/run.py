"""``streaming.profile``: measure a loader on the user's own table and settings.

It builds the ``StreamingDataset`` and ``StreamingDataLoader`` the user would, draws
batches as a trainer does (optionally spending ``step_seconds`` per batch, standing in
for the training step), and reports what it measured: the time to the first batch,
rows and batches per second after it, where the time went (the dataset's ``stats()``
counters, summed over its threads and worker processes, and the trainer's own waits
in ``next()``), peak memory per process, and the read requests per 1,000 rows where
this process can count them, as a ``LoaderProfile`` (``findings.py``), which also says
which settings to change; ``lance-streaming profile`` prints both.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .findings import LoaderProfile

__all__ = ["LoaderProfile", "profile"]

_PAGE = 1024  # /proc reports KiB


def profile(
    table: Any,
    *,
    batch_size: int = 64,
    num_workers: int = 0,
    batches: int = 100,
    step_seconds: float = 0.0,
    progress: bool | None = None,
    **settings: Any,
) -> LoaderProfile:
    """Measure ``StreamingDataLoader(StreamingDataset(table, **settings), batch_size=...,
    num_workers=...)`` over ``batches`` batches (fewer if the epoch ends first).

    ``settings`` are ``StreamingDataset``'s keywords (``num_splits``, ``block_rows``,
    ``shuffle_buffer_size``, ``transform``, ``storage_options``, ``cache_dir``, ...).
    ``step_seconds`` is spent after each batch, as a training step would (without it
    the trainer only waits, and rows/s is the loader's ceiling). ``progress`` shows a
    bar on stderr (``None``: when stderr is a terminal).

    Guaranteed: the numbers are measured, not estimated; reading changes nothing on
    the table and no state is saved. Requests are counted for Lance tables read in
    this process (``num_workers=0``); elsewhere ``requests`` is ``None`` and
    ``requests_note`` says why.
    """
    from ..dataset.dataset import StreamingDataset
    from ..loader.loader import StreamingDataLoader

    if batches < 1:
        raise ValueError(f"batches must be 1 or more, got {batches}; pass batches=100, say")
    start = time.perf_counter()
    dataset = StreamingDataset(table, **settings)
    opened = time.perf_counter()
    loader = StreamingDataLoader(dataset, batch_size=batch_size, num_workers=num_workers)
    handle, note = _counted_handle(dataset, num_workers, settings.get("storage_options"))
    before = _io_requests(handle)
    with _bar(batches, progress) as bar:
        timing = _draw(loader, dataset, batches=batches, step_seconds=step_seconds, bar=bar)
    after = _io_requests(handle)
    timing.start, timing.opened = start, opened
    requests = None if before is None or after is None else after - before
    return _found(dataset, loader, timing, settings, requests=(requests, note), step_seconds=step_seconds)


def _found(
    dataset: Any,
    loader: Any,
    timing: _Timing,
    settings: dict[str, Any],
    *,
    requests: tuple[int | None, str],
    step_seconds: float,
) -> LoaderProfile:
    """What was measured, as one value."""
    plan, stats = dataset.plan.settings, dataset.stats()
    table = _handle(dataset, settings)
    return LoaderProfile(
        table_uri=dataset.table_uri,
        version=dataset.version,
        num_splits=dataset.num_splits,
        block_rows=plan.block_rows,
        shuffle_buffer_size=plan.window_rows * dataset.num_splits,
        batch_size=loader.batch_size,
        num_workers=loader.num_workers,
        step_seconds=step_seconds,
        open_seconds=timing.opened - timing.start,
        first_batch_seconds=timing.first - timing.start,
        batches=timing.batches,
        rows=int(stats["rows_delivered"]) - timing.first_rows,
        loop_seconds=timing.end - timing.first,
        wait_seconds=timing.waits,
        stats=stats,
        trainer_peak_bytes=_own_peak(),
        worker_peak_bytes=timing.worker_peaks,
        requests=requests[0],
        requests_note=requests[1],
        kind=table.kind,
        cache_dir=_cache_dir(settings),
        plain_binary_columns=_plain_binary(table),
    )


@dataclass
class _Timing:
    start: float = 0.0
    opened: float = 0.0
    first: float = 0.0
    first_rows: int = 0
    end: float = 0.0
    batches: int = 0
    waits: float = 0.0
    worker_peaks: tuple[int, ...] = ()


def _draw(loader: Any, dataset: Any, *, batches: int, step_seconds: float, bar: Any) -> _Timing:
    """Draw up to ``batches`` batches as a trainer would; time the waits in ``next()``."""
    timing = _Timing()
    known = _descendants()
    iterator = iter(loader)
    try:
        for index in range(batches):
            asked = time.perf_counter()
            try:
                next(iterator)
            except StopIteration:
                break
            got = time.perf_counter()
            if index == 0:
                timing.first = got
                timing.first_rows = int(dataset.stats()["rows_delivered"])
            else:
                timing.waits += got - asked
            timing.batches += 1
            bar.update(1)
            if step_seconds > 0:
                time.sleep(step_seconds)  # stands in for the training step
        timing.end = time.perf_counter()
        timing.worker_peaks = tuple(_peak(pid) for pid in _workers(known))
    finally:
        iterator.close()
    if timing.batches == 0:
        raise ValueError("the loader delivered no batch: this epoch is already fully delivered")
    return timing


def _parents() -> dict[int, int]:
    """Every process's parent, from /proc (empty where there is no /proc)."""
    parents: dict[int, int] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return parents
    for entry in filter(str.isdigit, entries):
        try:
            with open(f"/proc/{entry}/stat") as file:
                parents[int(entry)] = int(file.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return parents


def _descendants(parents: dict[int, int] | None = None) -> set[int]:
    """Processes below this one (workers, the forkserver, the resource tracker)."""
    parents = _parents() if parents is None else parents
    found: set[int] = set()
    frontier = {os.getpid()}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _workers(known: set[int]) -> list[int]:
    """The loader's worker processes: new descendants that start none of their own (the
    forkserver does) and are not multiprocessing's resource tracker."""
    parents = _parents()
    new = _descendants(parents) - known
    leaves = sorted(pid for pid in new if pid not in parents.values())
    return [pid for pid in leaves if b"resource_tracker" not in _command_line(pid)]


def _command_line(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            return file.read()
    except OSError:
        return b""


def _own_peak() -> int:
    """Peak resident bytes of this process (``ru_maxrss``: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * _PAGE)


def _peak(pid: int) -> int:
    """Peak resident bytes of process ``pid`` (VmHWM), 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as file:
            for line in file:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * _PAGE
    except OSError:
        pass
    return 0


def _handle(dataset: Any, settings: dict[str, Any]) -> Any:
    """This process's ``Table`` of the dataset's snapshot (the one its reads use)."""
    from ..read.source import Snapshot, open_snapshot

    snapshot = Snapshot(dataset.table_uri, dataset.version, settings.get("storage_options"))
    return open_snapshot(snapshot)


def _counted_handle(dataset: Any, num_workers: int, options: Any) -> tuple[Any, str]:
    """The table whose request count sees every read, or None and why not."""
    if num_workers > 0:
        return None, "each worker reads with its own handle; run with num_workers=0 to count them"
    table = _handle(dataset, {"storage_options": options})
    if table.kind == "remote":
        return None, "a LanceDB server's requests are not counted by its client"
    if table.read_requests() is None:
        return None, "this Lance version counts no requests"
    return table, "Lance's read operations in this process"


def _io_requests(table: Any) -> int | None:
    return None if table is None else table.read_requests()


def _cache_dir(settings: dict[str, Any]) -> str | None:
    from ..core.cachesettings import CACHE_DIR_ENV

    folder = settings.get("cache_dir") or os.environ.get(CACHE_DIR_ENV)
    return os.fspath(folder) if folder else None


def _plain_binary(handle: Any) -> tuple[str, ...]:
    """Top-level binary columns Lance stores inline (without ``lance-encoding:blob``)."""
    import pyarrow as pa

    schema = handle.schema
    return tuple(
        field.name
        for field in schema
        if (pa.types.is_binary(field.type) or pa.types.is_large_binary(field.type))
        and b"lance-encoding:blob" not in (field.metadata or {})
    )


@contextmanager
def _bar(total: int, progress: bool | None) -> Iterator[Any]:
    """A tqdm bar of batches on stderr (``None``: only on a terminal)."""
    from tqdm import tqdm

    shown = sys.stderr.isatty() if progress is None else progress
    with tqdm(total=total, unit="batch", disable=not shown, file=sys.stderr, leave=False) as bar:
        yield bar
