"""The disk cache's file-system side: folders, locks, claims, scans and leftovers.

What ``tables/diskcache.py`` builds its guarantees on: an exclusive ``claim`` (one
filler per entry over every process of the machine), a waiting lock (one eviction
at a time), a ``scan`` of the complete entries and the bytes fills in progress
reserved, and ``reap_dead``, which removes what processes that ended left. The
folder layout is drawn in ``tables/diskcache.py``.

No Lance here: only the file system.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = [
    "KINDS",
    "Found",
    "claim",
    "is_dead",
    "ended",
    "listdir",
    "locked",
    "make_dir",
    "reap_dead",
    "reserved_bytes",
    "scan",
    "write_json",
]

KINDS = ("data", "_deletions")
"""The folders of a Lance table whose files are immutable and cached."""


def make_dir(path: str) -> None:
    """Create ``path`` and any missing parent, each owner-only."""
    if not os.path.isdir(path):
        make_dir(os.path.dirname(path))
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, 0o700)


def write_json(path: str, value: object) -> None:
    """Write ``value`` to ``path`` atomically (a temporary name, then a rename)."""
    temp = f"{path}.{secrets.token_hex(6)}.tmp"
    with open(temp, "w") as file:
        json.dump(value, file)
    os.replace(temp, path)


@dataclass
class Found:
    """One complete entry in the store, as ``scan`` saw it."""

    path: str
    size: int
    mtime: float
    links: int


def scan(store: str) -> list[Found]:
    """Every complete entry under ``store``."""
    found = []
    for table in listdir(store):
        for kind in KINDS:
            folder = os.path.join(store, table, kind)
            for name in listdir(folder):
                path = os.path.join(folder, name)
                with contextlib.suppress(FileNotFoundError):
                    status = os.stat(path)
                    found.append(Found(path, status.st_size, status.st_mtime, status.st_nlink))
    return found


def reserved_bytes(temps: str, own: str | None) -> int:
    """Bytes that fills in progress (other than ``own``) have reserved."""
    total = 0
    for name in listdir(temps):
        if own is None or os.path.join(temps, name) != own:
            with contextlib.suppress(ValueError, IndexError):
                total += int(name.rsplit("~", 2)[-2])
    return total


def listdir(folder: str) -> list[str]:
    """The names in ``folder``, sorted; none when it is missing."""
    try:
        return sorted(os.listdir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return []


@contextlib.contextmanager
def claim(path: str) -> Iterator[bool]:
    """Yield True while this process alone holds the claim at ``path``; False at once
    when another process holds it. The claim file is removed when released."""
    make_dir(os.path.dirname(path))
    while True:
        descriptor = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            yield False
            return
        try:
            current = os.stat(path).st_ino == os.fstat(descriptor).st_ino
        except FileNotFoundError:
            current = False
        if current:
            break
        os.close(descriptor)  # the previous holder removed that file as we opened it: again
    try:
        yield True
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.close(descriptor)


@contextlib.contextmanager
def locked(path: str) -> Iterator[None]:
    """Hold the exclusive lock at ``path`` (waiting for it)."""
    descriptor = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)


def is_dead(lock: str) -> bool:
    """True when the process that held ``lock`` for its life has ended."""
    try:
        descriptor = os.open(lock, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(descriptor)  # releases the lock if we took it
    return True


def ended(pins: str, token: str) -> bool:
    """True when the process of ``token`` has ended (its liveness lock is gone or free)."""
    lock = os.path.join(pins, f"{token}.lock")
    return not os.path.exists(lock) or is_dead(lock)


def reap_dead(root: str) -> list[str]:
    """Remove the holds and temporary files of processes that ended; their tokens."""
    pins, temps = os.path.join(root, "pins"), os.path.join(root, "tmp")
    dead = []
    for name in listdir(pins):
        if name.endswith(".lock") and is_dead(os.path.join(pins, name)):
            token = name.removesuffix(".lock")
            shutil.rmtree(os.path.join(pins, token), ignore_errors=True)
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(pins, name))
            dead.append(token)
    for name in listdir(temps):
        if ended(pins, name.rsplit("~", 1)[-1]):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(temps, name))
    for name in listdir(pins):
        if name.endswith(".new") and is_dead(os.path.join(pins, name)):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(pins, name))
        elif not name.endswith((".lock", ".new")) and ended(pins, name):
            shutil.rmtree(os.path.join(pins, name), ignore_errors=True)
    return dead
