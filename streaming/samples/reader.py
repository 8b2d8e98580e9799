"""Reading windows of owned splits ahead: ``SplitReaders`` schedules the reads of
``window.WindowSource`` (parallel Lance takes per fragment), one window read ahead."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from .transformed import TransformedRows, Transformer
from .window import Key, Window, WindowSource

__all__ = ["SplitReaders", "open_readers"]


class SplitReaders:
    """The samples of several splits from their start positions to the split end.

    Windows that the splits need next are read together in the background: when
    a split moves into a new window, the next window of every split that has none
    scheduled is requested in one read. Memory is about two windows per split:
    the windows of one read share its converted columns, which live until the
    last of them is consumed (splits that advance in step, as they do unless a
    lagged state was loaded, leave their windows together).

    The gauges are kept as running counts, updated as windows are scheduled,
    entered and consumed, so reading them costs O(reads in flight) (plus one
    look per current window with a transform), not a walk of every window.
    """

    def __init__(
        self,
        windows: WindowSource,
        starts: dict[int, int],
        executor: Executor,
        takes: Executor | None = None,
        transformer: Transformer | None = None,
    ) -> None:
        self._windows = windows
        self._executor = executor
        self._takes = takes
        self._transformer = transformer
        self._length = windows.plan.split_length
        self._window_rows = windows.plan.settings.window_rows
        self.positions = dict(starts)
        self._current: dict[int, Window] = {}
        self._current_start: dict[int, int] = {}
        self._scheduled: dict[Key, Future[dict[Key, Window]]] = {}
        self._lock = threading.Lock()  # the gauges may be read from another thread
        self._pending: dict[Future[dict[Key, Window]], set[Key]] = {}  # reads not seen done: keys not entered
        self._landed: dict[Key, int] = {}  # scheduled windows read, not entered: their rows
        self._landed_rows = 0
        self._left: dict[int, int] = {}  # split: rows of its current untransformed window to come
        self._left_rows = 0  # the sum of max(0, left)
        self._ahead: dict[int, int] = {}
        self._unscanned = 0  # rows of windows not yet requested
        self.held: Callable[[], int] | None = None  # rows the consumer took and has not handed out
        for split, position in starts.items():
            self._move_ahead(split, position // self._window_rows)
        self._schedule()  # the read-ahead starts once the first windows are in

    def remaining(self, split: int) -> int:
        """Samples ``split`` has yet to yield."""
        return self._length - self.positions[split]

    def _schedule(self) -> None:
        """Request the next unscheduled window of every split, in one read."""
        wanted = [
            (split, window)
            for split, window in self._ahead.items()
            if window * self._window_rows < self._length and (split, window) not in self._scheduled
        ]
        if not wanted:
            return
        future = self._executor.submit(
            self._windows.read, wanted, executor=self._takes, transformer=self._transformer
        )
        with self._lock:
            self._pending[future] = set(wanted)
            for key in wanted:
                self._scheduled[key] = future
                self._move_ahead(key[0], key[1] + 1)

    def _move_ahead(self, split: int, window: int) -> None:
        """Make ``window`` the first of ``split`` not requested yet."""
        before = self._ahead.get(split)
        if before is not None:
            self._unscanned -= max(0, self._length - before * self._window_rows)
        self._unscanned += max(0, self._length - window * self._window_rows)
        self._ahead[split] = window

    def _consume(self, split: int, rows: int) -> None:
        """``rows`` more rows of ``split``'s current window were consumed (negative: given back)."""
        left = self._left.get(split)
        if left is not None:
            self._left_rows += max(0, left - rows) - max(0, left)
            self._left[split] = left - rows

    def _enter(self, split: int, window: int) -> None:
        key = (split, window)
        if key not in self._scheduled:
            with self._lock:
                self._move_ahead(split, window)
            self._schedule()
        left = self._current.get(split)
        if isinstance(left, TransformedRows):
            left.close()
        self._make_current(split, window, self._take_scheduled(key))
        if self._ahead[split] <= window + 1:
            self._schedule()

    def _take_scheduled(self, key: Key) -> Window:
        """The window of ``key``, once read; it is no longer scheduled (even if the read failed)."""
        with self._lock:
            future = self._scheduled.pop(key)
            self._landed_rows -= self._landed.pop(key, 0)
            (keys := self._pending.get(future, set())).discard(key)
            if not keys:
                self._pending.pop(future, None)  # every window of the read entered: never look again
        windows = future.result()  # waits for the read, outside the lock
        with self._lock:
            return windows.pop(key)

    def _make_current(self, split: int, window: int, rows: Window) -> None:
        """Make ``rows``, window ``window`` of ``split``, its current one."""
        with self._lock:
            self._current[split] = rows
            self._current_start[split] = window * self._window_rows
            self._left_rows -= max(0, self._left.pop(split, 0))
            if not isinstance(rows, TransformedRows):
                left = len(rows) - (self.positions[split] - window * self._window_rows)
                self._left[split] = left
                self._left_rows += max(0, left)

    def _next(self, split: int, limit: int) -> tuple[Window, int, int, int]:
        """(window, position, start, stop) of up to ``limit`` next rows of ``split``; no advance."""
        position = self.positions[split]
        current = self._current.get(split)
        if current is None or position - self._current_start[split] >= len(current):
            self._enter(split, position // self._window_rows)
            current = self._current[split]
        offset = position - self._current_start[split]
        return current, position, offset, min(len(current), offset + limit)

    def span(self, split: int, limit: int) -> tuple[Window, int, int]:
        """(window, start, stop): up to ``limit`` next rows of ``split`` in one window.

        Advances the split past them. Call only while ``remaining(split)`` is positive.
        """
        current, position, offset, stop = self._next(split, limit)
        if isinstance(current, TransformedRows):
            stop = current.reach(offset, stop)  # transform no further than needed
            self._prime_next(split, position // self._window_rows + 1, len(current) - offset)
        self.positions[split] = position + stop - offset
        self._consume(split, stop - offset)
        return current, offset, stop

    def skip(self, split: int, limit: int) -> tuple[Window, int, int]:
        """Like ``span``, for rows passed over: nothing is transformed or primed for them."""
        current, position, offset, stop = self._next(split, limit)
        self.positions[split] = position + stop - offset
        self._consume(split, stop - offset)
        return current, offset, stop

    def gauges(self) -> dict[str, int]:
        """What these readers hold now: windows requested and not yet consumed
        (``read_ahead``), rows read and waiting for the transform (``raw_rows``),
        rows ready to hand out (``ready_rows``, with the ``held`` ones the consumer
        took and has not handed out yet), rows not yet requested
        (``unscanned_rows``). Zeros if the readers change while this runs (read
        from another thread than the consumer's)."""
        try:
            with self._lock:
                return self._gauges()
        except RuntimeError:  # a dict changed size under another thread's iteration
            return {}

    def _gauges(self) -> dict[str, int]:
        self._land()
        raw, ready = 0, self._left_rows
        if self._transformer is not None:
            raw, ready = self._landed_rows, ready
            for split, window in list(self._current.items()):
                if isinstance(window, TransformedRows):
                    waiting, done = window.waiting(self.positions[split] - self._current_start[split])
                    raw, ready = raw + waiting, ready + done
        else:
            ready += self._landed_rows
        if self.held is not None:
            ready += self.held()
        return {
            "read_ahead": len(self._scheduled),
            "raw_rows": raw,
            "ready_rows": ready,
            "unscanned_rows": self._unscanned,
        }

    def _land(self) -> None:
        """Count the rows of reads that finished since the last look (under the lock)."""
        for future in [future for future in self._pending if future.done()]:
            keys = self._pending.pop(future)
            if future.cancelled() or future.exception() is not None:
                continue
            windows = future.result()
            for key in keys:
                if self._scheduled.get(key) is future:
                    self._landed[key] = len(windows[key])
                    self._landed_rows += self._landed[key]

    def _prime_next(self, split: int, window: int, before: int) -> None:
        """Let window ``window`` of ``split``, once read, start its transforms while
        ``before`` rows of the current one are still to come (no stall at the edge)."""
        future = self._scheduled.get((split, window))
        if future is None or not future.done() or future.cancelled() or future.exception() is not None:
            return
        upcoming = future.result()[(split, window)]
        if isinstance(upcoming, TransformedRows):
            upcoming.prime(before)

    def take(self, split: int, limit: int) -> list[Any]:
        """Up to ``limit`` samples of ``split`` without crossing a window (at least one)."""
        window, start, stop = self.span(split, limit)
        return window.samples(start, stop)

    def take_kept(self, split: int, limit: int) -> tuple[list[Any], list[int] | None, int]:
        """Like ``take``, without rows the transform dropped.

        Returns (samples, kept, taken): ``kept`` holds the offsets among the
        ``taken`` positions of the samples returned (``None``: nothing dropped).
        """
        window, start, stop = self.span(split, limit)
        samples = window.samples(start, stop)
        kept = window.kept(start, stop) if isinstance(window, TransformedRows) else None
        if kept is not None:
            samples = [samples[offset] for offset in kept]
        return samples, kept, stop - start

    def unread(self, split: int, count: int) -> None:
        """Give back the last ``count`` samples taken (they stay in the window)."""
        self.positions[split] -= count
        self._consume(split, -count)

    def close(self) -> None:
        """Drop current windows and cancel reads not yet started."""
        for future in self._scheduled.values():
            future.cancel()
        with self._lock:
            self._scheduled.clear()
            self._pending.clear()
            self._landed.clear()
            self._landed_rows = self._left_rows = 0
            self._left.clear()
        for window in self._current.values():
            if isinstance(window, TransformedRows):
                window.close()
        self._current.clear()


@contextmanager
def open_readers(windows: WindowSource, starts: dict[int, int], *, io_threads: int) -> Iterator[SplitReaders]:
    """``SplitReaders`` with their own read threads, stopped when the block ends.

    ``io_threads`` threads read windows and as many run the per-fragment takes of
    those reads (two pools, so a read waiting for its takes never starves them);
    with a transform, ``windows.transform_threads`` more run it.
    """
    executor = ThreadPoolExecutor(max_workers=io_threads, thread_name_prefix="lance-streaming-read")
    takes = ThreadPoolExecutor(max_workers=io_threads, thread_name_prefix="lance-streaming-take")
    pools = [executor, takes]
    transformer = None
    if windows.transform is not None:
        pools.append(
            ThreadPoolExecutor(
                max_workers=windows.transform_threads, thread_name_prefix="lance-streaming-transform"
            )
        )
        transformer = windows.transformer(pools[-1])
    readers = SplitReaders(windows, starts, executor, takes, transformer)
    windows.counters.watch(readers.gauges)
    try:
        yield readers
    finally:
        windows.counters.watch(None)
        readers.close()
        for pool in pools:
            pool.shutdown(wait=False, cancel_futures=True)
