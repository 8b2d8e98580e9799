"""The local cache's files: entries, fills, holds and eviction, shared by every process.

An entry is one immutable file of a remote table (a data file or a deletion file,
named as the table names it), kept under the table's digest::

    ROOT/                            created 0o700
      store/TABLE/data/NAME          complete entries only
      store/TABLE/_deletions/NAME
      tables/TABLE/table.json        the table's URI (without credentials)
      tables/TABLE/vVERSION.json     the files of one version (for ``usage``)
      claims/TABLE/KIND~NAME.lock    flock: the one process filling the entry
      tmp/TABLE~KIND~NAME~SIZE~TOKEN a fill in progress (never read), SIZE bytes reserved
      pins/TOKEN.lock                flock held for the life of a process
      pins/TOKEN/TABLE/KIND/NAME     hard links: entries the process is reading
      evict.lock                     flock: one eviction at a time

Guarantees. A fill downloads to a temporary name and renames the complete file
into ``store/`` (fsynced first), under an exclusive claim, so over every process
of the machine an entry is downloaded once and no reader ever sees a partial
entry; a process killed mid-fill leaves only a temporary file, which no reader
looks at and the next process removes. A reader reads through its own hard link
of the entry (a *hold*), so eviction, which removes only entries no process holds
(link count 1), never pulls a file from under a read. Holds of a process that died
are removed with its ``pins/TOKEN`` folder by the next process that looks.

The locks, claims and scans live in ``tables/cachefs.py``; what the command line
shows (``usage``, ``clear``) in ``tables/cacheusage.py``, importable from here too.

No Lance here: only the file system.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import hashlib
import os
import secrets
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from .cachefs import KINDS, Found, claim, locked, make_dir, reap_dead, reserved_bytes, scan, write_json
from .cacheusage import clear, usage

__all__ = ["DiskCache", "Entry", "clear", "safe_uri", "table_key", "usage"]

RESERVE_BYTES = 1 << 30
"""A fill never leaves less free space on the cache's disk than this (or 5% of the disk)."""


def safe_uri(uri: str) -> str:
    """``uri`` without user information, query or fragment (where credentials may sit)."""
    parts = urlsplit(uri)
    if not parts.scheme or not parts.netloc:
        return uri.split("?", 1)[0]
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return f"{parts.scheme}://{netloc}{parts.path}"


def table_key(uri: str) -> str:
    """The folder name of a table's entries: a digest of its credential-free URI."""
    return hashlib.sha256(safe_uri(uri).encode()).hexdigest()[:24]


@dataclass(frozen=True)
class Entry:
    """One immutable file of a table: ``relpath`` is ``data/NAME`` or ``_deletions/NAME``."""

    table: str
    relpath: str
    size: int | None  # from the manifest where Lance records it (data files)

    def __post_init__(self) -> None:
        kind, _, name = self.relpath.partition("/")
        if kind not in KINDS or not name or "/" in name or name in (".", ".."):
            raise ValueError(f"not a cacheable file of a Lance table: {self.relpath!r}")

    @property
    def flat(self) -> str:
        """The entry as one file name (for claims and temporary files)."""
        return self.relpath.replace("/", "~")


class DiskCache:
    """One process's view of the cache at ``root`` (at most ``limit`` bytes of entries).

    Creating it creates the folders (owner-only) and removes what processes that
    died left behind. Thread-safe.

    Raises:
        OSError: the folder cannot be created or written.
    """

    def __init__(self, root: str, *, limit: int | None) -> None:
        self.root = root
        self.limit = limit
        self.token = f"{os.getpid()}-{secrets.token_hex(4)}"
        self._lock = threading.Lock()
        self._held: dict[Entry, int] = {}
        if not os.path.isdir(root):
            make_dir(root)
            os.chmod(root, 0o700)  # whatever the umask
        for folder in ("store", "tables", "claims", "tmp", "pins"):
            make_dir(self._path(folder))
        self._alive = self._announce()
        atexit.register(self.close)
        reap_dead(root)

    def _path(self, *parts: str) -> str:
        return os.path.join(self.root, *parts)

    def _announce(self) -> int:
        """Hold ``pins/TOKEN.lock`` for the life of this process (locked before it is visible)."""
        final = self._path("pins", f"{self.token}.lock")
        while True:
            temp = f"{final}.{secrets.token_hex(4)}.new"
            descriptor = os.open(temp, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            try:
                os.rename(temp, final)
                return descriptor
            except FileNotFoundError:  # taken for a dead process's before we locked it: again
                os.close(descriptor)

    def close(self) -> None:
        """Drop this process's holds and its liveness lock (at exit)."""
        shutil.rmtree(self._path("pins", self.token), ignore_errors=True)
        with contextlib.suppress(OSError):
            os.unlink(self._path("pins", f"{self.token}.lock"))
        with contextlib.suppress(OSError):
            os.close(self._alive)

    # -- entries -------------------------------------------------------------

    def stored(self, entry: Entry) -> str:
        """Where the complete entry lives."""
        return self._path("store", entry.table, entry.relpath)

    def present(self, entry: Entry) -> bool:
        """True when the complete entry is in the cache now."""
        return os.path.exists(self.stored(entry))

    def pin_root(self, table: str) -> str:
        """The folder this process reads ``table``'s held entries from (a Lance table root)."""
        return self._path("pins", self.token, table)

    def hold(self, entry: Entry) -> bool:
        """Keep ``entry`` from eviction and readable under ``pin_root`` until ``release``.

        False when the entry is not in the cache (never filled, or evicted).
        """
        with self._lock:
            count = self._held.get(entry, 0)
            if count == 0:
                pin = os.path.join(self.pin_root(entry.table), entry.relpath)
                make_dir(os.path.dirname(pin))
                try:
                    os.link(self.stored(entry), pin)
                except FileNotFoundError:
                    return False
                except FileExistsError:
                    pass  # a link left by a hold that failed half way: the same immutable file
                with contextlib.suppress(OSError):
                    os.utime(pin)  # the entry's last use, for eviction (same inode)
            self._held[entry] = count + 1
            return True

    def release(self, entry: Entry) -> None:
        """End one ``hold`` of ``entry``."""
        with self._lock:
            count = self._held.get(entry, 0) - 1
            if count > 0:
                self._held[entry] = count
                return
            self._held.pop(entry, None)
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.pin_root(entry.table), entry.relpath))

    # -- fills -----------------------------------------------------------------

    def fill(self, entry: Entry, download: Callable[[str], None]) -> bool:
        """Make ``entry`` present, downloading it with ``download(path)`` at most once
        over every process of the machine.

        Room is made (and reserved, so processes filling at once never overrun the
        limit together) before the download; the entry goes into the store only if
        its real size still fits. Returns True when the entry is present afterwards;
        False when another process is filling it right now, or it does not fit the
        limit or the disk.

        Raises:
            OSError: the cache's disk failed (full, read-only); nothing partial is left.
            Exception: whatever ``download`` raised; nothing partial is left.
        """
        if self.present(entry):
            return True
        with claim(self._path("claims", entry.table, f"{entry.flat}.lock")) as claimed:
            if not claimed:
                return False
            if self.present(entry):
                return True  # filled by the process that held the claim before
            reserved = entry.size or 0
            temp = self._path("tmp", f"{entry.table}~{entry.flat}~{reserved}~{self.token}")
            with locked(self._path("evict.lock")):
                if not self._make_room(reserved, own=temp):
                    return False
                os.close(os.open(temp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            try:
                return self._download(entry, temp, download)
            finally:
                with contextlib.suppress(OSError):
                    os.unlink(temp)

    def _download(self, entry: Entry, temp: str, download: Callable[[str], None]) -> bool:
        """Download into ``temp`` and rename it into the store if it still fits."""
        download(temp)
        size = os.path.getsize(temp)
        if entry.size is not None and size != entry.size:
            raise OSError(f"{entry.relpath} came with {size} bytes, the manifest says {entry.size}")
        with open(temp, "rb+") as file:
            os.fsync(file.fileno())
        final = self.stored(entry)
        make_dir(os.path.dirname(final))
        with locked(self._path("evict.lock")):
            if not self._make_room(size, own=temp):
                return False
            os.rename(temp, final)
        return True

    def make_room(self, size: int) -> bool:
        """Evict entries no process holds, least recently used first, until ``size`` more
        bytes fit the limit and the disk's free space; False when they cannot."""
        with locked(self._path("evict.lock")):
            return self._make_room(size, own=None)

    def _make_room(self, size: int, *, own: str | None) -> bool:
        """``make_room`` with the eviction lock held; ``own``: this fill's reservation."""
        if self.limit is not None and size > self.limit:
            return False
        entries = scan(self._path("store"))
        reserved = reserved_bytes(self._path("tmp"), own)
        if self._fits(entries, size + reserved):
            return True
        reap_dead(self.root)
        entries = sorted(scan(self._path("store")), key=lambda found: found.mtime)
        reserved = reserved_bytes(self._path("tmp"), own)
        for found in list(entries):
            if self._fits(entries, size + reserved):
                return True
            if found.links == 1:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(found.path)
                entries.remove(found)
        return self._fits(entries, size + reserved)

    def _fits(self, entries: list[Found], size: int) -> bool:
        used = sum(found.size for found in entries)
        if self.limit is not None and used + size > self.limit:
            return False
        disk = shutil.disk_usage(self.root)
        return disk.free - size >= min(RESERVE_BYTES, disk.total // 20)

    # -- what the command line shows ---------------------------------------------

    def record_version(self, table: str, uri: str, version: int, files: dict[str, int | None]) -> None:
        """Note which files version ``version`` of ``table`` (at ``uri``) reads, for ``usage``."""
        folder = self._path("tables", table)
        make_dir(folder)
        if not os.path.exists(os.path.join(folder, "table.json")):
            write_json(os.path.join(folder, "table.json"), {"uri": safe_uri(uri)})
        path = os.path.join(folder, f"v{version}.json")
        if not os.path.exists(path):
            write_json(path, {"version": version, "files": files})
