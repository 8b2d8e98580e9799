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

A worker the trainer gave up on while it started (SIGINT or an error in the
trainer as ``iter()`` started its workers) finds the semaphores of its queues
unlinked as it unpickles them, and would print a ``FileNotFoundError``
traceback from ``multiprocessing/synchronize.py``: nothing was lost, and it
ends without a word.
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing.util
import os
import sys
import threading
from types import FrameType, TracebackType

from .. import _compat

__all__ = ["end_like_forked_children", "quiet_abandoned_starts", "trainer_alive", "watch_trainer"]

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


def _abandoned_start(kind: type[BaseException], trace: TracebackType | None) -> bool:
    """True for an exception a starting worker raised while unpickling what it was sent
    because its trainer had let go of it: the semaphores it was sent are gone (or a
    SIGINT meant for the trainer reached it)."""
    frames = []
    while trace is not None:
        frames.append(trace.tb_frame.f_code)
        trace = trace.tb_next
    if _compat.spawn_main_code() not in frames:
        return False
    if issubclass(kind, KeyboardInterrupt):
        return True
    return issubclass(kind, FileNotFoundError) and frames[-1].co_filename.endswith("synchronize.py")


def _quiet_hook(previous: object) -> object:
    def hook(kind: type[BaseException], value: BaseException, trace: TracebackType | None) -> None:
        if not _abandoned_start(kind, trace):
            previous(kind, value, trace)  # type: ignore[operator]

    hook.quiets_abandoned_starts = True  # type: ignore[attr-defined]
    return hook


def _starting_workers() -> bool:
    """True in a process that starts workers: a fork server importing its preloaded modules,
    or a spawned (or fork-server) child still unpickling what it was sent."""
    if _compat.inheriting():
        return True
    serve = getattr(sys.modules.get("multiprocessing.forkserver"), "main", None)
    frame: FrameType | None = _compat.caller_frame()
    while frame is not None:
        if serve is not None and frame.f_code is serve.__code__:
            return True
        frame = frame.f_back
    return False


def quiet_abandoned_starts() -> None:
    """In a process that starts workers, wrap ``sys.excepthook`` so that a worker
    abandoned by its trainer while it started ends without a traceback (any other
    exception is printed as before). Elsewhere (the trainer) it does nothing."""
    if getattr(sys.excepthook, "quiets_abandoned_starts", False) or not _starting_workers():
        return
    sys.excepthook = _quiet_hook(sys.excepthook)  # type: ignore[assignment]


quiet_abandoned_starts()  # runs as a worker or a fork server imports this module
