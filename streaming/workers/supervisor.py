"""The trainer's watch over the worker processes of one DataLoader iterator.

Every wait of the iterator for a worker's message goes through ``Supervisor``
(``_compat.intercept_receive``), which does what torch does not:

- **A dead worker never deadlocks the trainer.** A worker killed while it held the
  lock of the iterator's "workers done" event (workers read it once per index)
  would block torch's ``is_set()`` and ``set()`` in the trainer forever; the
  trainer's side of that event waits a bounded time for its lock
  (``_compat.guard_done_event``).
- **A dead worker is named at once.** torch notices a dead worker only when a wait
  times out: after the DataLoader ``timeout``, or every 5 s with ``timeout=0``;
  forkserver workers are not the trainer's children, so torch's SIGCHLD handler
  never fires for them. The supervisor cuts each wait into slices of
  ``CHECK_SECONDS``, so torch's own check runs after every slice, and turns its
  error into one that names the worker, its pid and how it ended, and says that
  ``iter()`` again continues from the committed position.
- **The queues' semaphore names leave ``/dev/shm`` early.** Under spawn and
  forkserver the named POSIX semaphores of the DataLoader's queues stay in
  ``/dev/shm`` until the iterator is freed, and a SIGKILL of the whole job (what a
  scheduler does) leaves them there for good. A worker opens them all when it
  starts, before it can send anything, so once every worker has sent a message or
  died, no process will open them again: the names are removed then. Any message
  counts (a batch, an error, the end of its splits), so a worker with nothing to
  deliver does not keep the names; the trainer learns of a worker's
  ``worker_init_fn`` only through such a message anyway. An iterator closed
  before that removes them when its workers have stopped
  (``_compat.shutdown_workers``).
- **The workers stop at once however the iterator is freed.** torch's ``__del__``
  stops each worker with a final ``None`` on its index queue; an iterator freed by the
  cycle collector (a loader with persistent workers in a reference cycle) would lose
  its queues' feeder threads first, and torch would wait 5 s for each worker, then kill
  it. The queues are held until the iterator is gone (``_compat.hold_index_queues``).

Pure bookkeeping on top of ``_compat``; the data and its order are not touched.
"""

from __future__ import annotations

import multiprocessing.connection
import signal
import time
import weakref
from typing import Any

from .. import _compat

__all__ = ["CHECK_SECONDS", "DEATH_SECONDS", "Supervisor", "supervise"]

CHECK_SECONDS = 0.1
"""The longest a wait for a batch goes on without checking that the workers live."""

DEATH_SECONDS = 2.0
"""How long a broken pipe from a worker waits for that worker's death to show."""


def _how_it_ended(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited with code {exitcode}"


class Supervisor:
    """Watches the workers of one ``_MultiProcessingDataLoaderIter`` (held weakly)."""

    def __init__(self, iterator: Any, *, description: str) -> None:
        self._iterator = weakref.ref(iterator)
        self._workers = _compat.worker_processes(iterator)
        self._unheard = set(range(len(self._workers)))  # may still have to open the queues
        self._description = description

    def receive(self, once: _compat.Receive, timeout: float) -> tuple[bool, Any]:
        """Wait up to ``timeout`` seconds for a worker's message, in short slices."""
        iterator = self._iterator()
        delivering = _compat.delivering_workers(iterator)
        deadline = time.monotonic() + timeout
        while True:
            wait = max(0.0, min(CHECK_SECONDS, deadline - time.monotonic()))
            try:
                received, message = once(wait)
            except (RuntimeError, OSError, EOFError) as error:  # a dying sender breaks its fd pipe
                if not isinstance(error, RuntimeError):  # the pipe may break before the death shows
                    self._await_death(delivering)
                self._raise_if_dead(delivering, error)
                raise
            if received:
                self._heard(iterator, message)
                return received, message
            if time.monotonic() >= deadline:
                return False, None

    def _await_death(self, delivering: list[int]) -> None:
        """Wait (up to ``DEATH_SECONDS``) until one of ``delivering`` is seen to have ended."""
        sentinels = [self._workers[worker].sentinel for worker in delivering]
        multiprocessing.connection.wait(sentinels, timeout=DEATH_SECONDS)

    def _raise_if_dead(self, delivering: list[int], error: Exception) -> None:
        dead = [worker for worker in delivering if not self._workers[worker].is_alive()]
        if not dead:
            return
        pids = ", ".join(str(self._workers[worker].pid) for worker in dead)
        named = "; ".join(
            f"worker {worker} (pid {self._workers[worker].pid}) "
            f"{_how_it_ended(self._workers[worker].exitcode)}"
            for worker in dead
        )
        raise RuntimeError(
            f"DataLoader worker (pid {pids}) exited unexpectedly while {self._description} "
            f"waited for its batches: {named}. The batches not handed to the loop were never "
            "counted: call iter() on the loader again to continue from the committed position "
            "(nothing is lost or repeated)"
        ) from error

    def _heard(self, iterator: Any, message: Any) -> None:
        if not self._unheard:
            return
        self._unheard.discard(_compat.sender(iterator, message))
        self._unheard = {worker for worker in self._unheard if self._workers[worker].is_alive()}
        if not self._unheard:
            _compat.forget_queue_names(iterator)


def supervise(iterator: Any, *, description: str) -> Supervisor:
    """Watch the workers of a DataLoader ``iterator``; a no-op without workers."""
    supervisor = Supervisor(iterator, description=description)
    if supervisor._workers:
        _compat.intercept_receive(iterator, supervisor.receive)
        _compat.guard_done_event(iterator)
        _compat.hold_index_queues(iterator)  # its workers stop at once even in cyclic garbage
    return supervisor
