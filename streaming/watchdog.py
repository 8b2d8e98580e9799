"""Worker processes end cleanly: with their trainer, and without native teardown.

A forkserver worker's parent is the fork server, which every worker keeps alive,
so neither notices when the trainer is killed (SIGKILL, OOM): the workers would
wait for work forever. Each worker runs one daemon thread that checks the trainer
once a second and exits the worker when the trainer is gone or a zombie.

A spawn worker that finishes runs the whole interpreter teardown, C++ static
destructors included, while native threads (Arrow's, Lance's, torch's) may still
be alive; now and then a destructor meets a running thread and aborts the
process ("terminate called without an active exception"), and the trainer's
DataLoader raises "worker killed by signal: Aborted" for a worker that had done
all its work. fork and forkserver children never get there: multiprocessing
ends them with ``os._exit`` once Python's own shutdown is done. Spawn workers
are made to end the same way.
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing.util
import os
import sys
import threading

__all__ = ["end_like_forked_children", "trainer_alive", "watch_trainer"]

_POLL_SECONDS = 1.0
_watched: set[int] = set()
_ending = {"armed": False, "failed": False}


def trainer_alive(pid: int) -> bool:
    """True while process ``pid`` runs (a zombie, killed but not reaped, is dead)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except FileNotFoundError:
        return False
    except OSError:  # no /proc (not Linux): fall back to signal 0
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def _watch(pid: int, stop: threading.Event) -> None:
    while not stop.wait(_POLL_SECONDS):
        if not trainer_alive(pid):
            os._exit(1)


def watch_trainer(pid: int | None) -> None:
    """Start (once per process) the thread that ends this worker with its trainer.

    Also arms ``end_like_forked_children``, so a spawn worker ends as forked ones do.
    """
    end_like_forked_children()
    if pid is None or pid == os.getpid() or pid in _watched:
        return
    _watched.add(pid)
    thread = threading.Thread(
        target=_watch, args=(pid, threading.Event()), name="lance-streaming-watchdog", daemon=True
    )
    thread.start()


def _note_outcome() -> None:
    # Runs in multiprocessing's exit function, inside the ``finally`` right after
    # the process target returned or raised: an exception there means exit code 1.
    _ending["failed"] = sys.exc_info()[0] is not None


def _exit_now() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, OSError, ValueError):
            stream.flush()
    os._exit(1 if _ending["failed"] else 0)


def end_like_forked_children() -> None:
    """End this child process with ``os._exit`` after Python's own shutdown (once per process).

    Python's shutdown (threads joined, exit handlers registered later run) is kept;
    what is skipped is the interpreter's native teardown that fork and forkserver
    children skip too. The exit code stays 0, or 1 when the process target raised.
    In a process that multiprocessing did not start (the trainer) it does nothing.
    """
    if _ending["armed"] or multiprocessing.parent_process() is None:
        return
    _ending["armed"] = True
    multiprocessing.util.Finalize(None, _note_outcome, exitpriority=-1000)
    atexit.register(_exit_now)
