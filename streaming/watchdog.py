"""Worker processes exit when the trainer process dies, instead of lingering.

A forkserver worker's parent is the fork server, which every worker keeps alive,
so neither notices when the trainer is killed (SIGKILL, OOM): the workers would
wait for work forever. Each worker runs one daemon thread that checks the trainer
once a second and exits the worker when the trainer is gone or a zombie.
"""

from __future__ import annotations

import os
import threading

__all__ = ["trainer_alive", "watch_trainer"]

_POLL_SECONDS = 1.0
_watched: set[int] = set()


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
    """Start (once per process) the thread that ends this worker with its trainer."""
    if pid is None or pid == os.getpid() or pid in _watched:
        return
    _watched.add(pid)
    thread = threading.Thread(
        target=_watch, args=(pid, threading.Event()), name="lance-streaming-watchdog", daemon=True
    )
    thread.start()
