"""The local cache of one snapshot of a table in a bucket (``SnapshotCache``), as this
process uses it: which of its fragments' files are cached, reading a fragment whose
files all are with a local Lance handle of the same version, and downloading the others
in the background (whole files, one request each, by Lance's own object store with the
snapshot's options). ``diskcache`` keeps the files and coordinates the processes of the
machine; ``cached.CachedTable`` reads a table through this.

A failure of the cache (a full disk, a folder that cannot be written, a file Lance
cannot read) warns ``CacheWarning`` once and leaves this process reading the bucket.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from ..core.cachesettings import CacheSettings
from ..errors import CacheWarning
from .diskcache import DiskCache, Entry, table_key
from .table import Table

if TYPE_CHECKING:
    from collections.abc import Mapping


__all__ = [
    "FILL_THREADS",
    "FILL_USER_AGENT",
    "RETRY_SECONDS",
    "BucketTable",
    "SnapshotCache",
    "snapshot_cache",
]


_LOG = logging.getLogger("streaming")
FILL_THREADS = 8
"""Downloads one process runs at once."""
FILL_USER_AGENT = "lance-streaming-cache"
"""The HTTP user agent of fills, so a store's access log tells them from reads."""
RETRY_SECONDS = 2.0
"""How soon a process asks again for a fragment it could not fill (another process
was filling it, or it did not fit)."""
_MAX_TABLES = 8

_TABLES: dict[tuple[str, int, int, CacheSettings], SnapshotCache | None] = {}
_DISKS: dict[tuple[CacheSettings, int], DiskCache | None] = {}
_LOCK = threading.Lock()


class BucketTable(Table, Protocol):
    """What the cache reads of a bucket's ``LanceTable`` (``tables/lancetable.py``): a
    ``Table`` with its ``lance.LanceDataset`` and storage options (declared here, so
    that the cache imports only the protocol)."""

    dataset: Any
    storage_options: Mapping[str, str] | None


def _warn(message: str) -> None:
    _LOG.warning("%s", message)
    warnings.warn(message, CacheWarning, stacklevel=3)


def _disk(settings: CacheSettings) -> DiskCache | None:
    """This process's ``DiskCache`` of ``settings`` (``None``, warned once, if it cannot exist)."""
    key = (settings, os.getpid())
    if key not in _DISKS:
        try:
            _DISKS[key] = DiskCache(settings.directory, limit=settings.limit)
        except OSError as error:
            _DISKS[key] = None
            _warn(
                f"the local cache cannot use cache_dir={settings.directory!r} ({error}); this "
                "process reads from object storage instead; pass a folder you can write on a local disk"
            )
    return _DISKS[key]


def snapshot_cache(table: BucketTable, settings: CacheSettings) -> SnapshotCache | None:
    key = (table.uri, table.version, os.getpid(), settings)
    with _LOCK:
        if key not in _TABLES:
            disk = _disk(settings)
            _TABLES[key] = None if disk is None else SnapshotCache.open(table, disk)
            while len(_TABLES) > _MAX_TABLES:
                del _TABLES[next(iter(_TABLES))]
        return _TABLES[key]


class _Filler:
    """This process's background downloads, on daemon threads (an exit never waits for
    one; what it leaves half done is a temporary file the next process removes)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._stopped = False
        atexit.register(self.stop)

    def submit(self, job: Callable[[], None]) -> None:
        """Run ``job`` on a download thread."""
        if len(self._threads) < FILL_THREADS:
            thread = threading.Thread(target=self._run, name="lance-streaming-cache-fill", daemon=True)
            self._threads.append(thread)
            thread.start()
        self._jobs.put(job)

    def stop(self) -> None:
        """Start no more downloads (at exit)."""
        self._stopped = True

    def _run(self) -> None:
        while not self._stopped:
            job = self._jobs.get()
            if not self._stopped:
                job()


_FILLERS: dict[int, _Filler] = {}


def _filler() -> _Filler:
    with _LOCK:
        return _FILLERS.setdefault(os.getpid(), _Filler())


def _fragment_entries(handle: Any, table: str) -> dict[int, tuple[Entry, ...]]:
    """The cache entries of every fragment whose files all live under the table's root."""
    entries = {}
    for fragment in handle.get_fragments():
        files = fragment.data_files()
        if any(getattr(file, "base_id", None) is not None for file in files):
            continue  # a file under another base path: always read from the bucket
        try:
            found = [Entry(table, f"data/{file.path}", file.file_size_bytes) for file in files]
            deletions = fragment.deletion_file()
            if deletions:
                found.append(Entry(table, str(deletions), None))
        except ValueError:
            continue
        entries[int(fragment.fragment_id)] = tuple(found)
    return entries


class SnapshotCache:
    """The cached files of one snapshot of one table in a bucket, as this process uses them."""

    def __init__(self, table: BucketTable, disk: DiskCache, manifest: bytes) -> None:
        handle = table.dataset
        self.uri = table.uri
        self.version = table.version
        self.key = table_key(self.uri)
        self.disk = disk
        self._bucket = handle
        self._manifest = manifest
        options = table.storage_options
        self._options = dict(options) if options else None
        self.files = _fragment_entries(handle, self.key)
        self._local: Any = None
        self._session: Any = None
        self._lock = threading.Lock()
        self._filling: set[int] = set()
        self._retry_at: dict[int, float] = {}
        self._fills_failed = self._reads_failed = False

    @classmethod
    def open(cls, table: BucketTable, disk: DiskCache) -> SnapshotCache | None:
        """The snapshot's cache, or ``None`` (warned) when its manifest or the disk fails."""
        handle = table.dataset
        try:
            manifest = handle._ds.serialized_manifest()  # the pinned version's, from Lance itself
            cache = cls(table, disk, bytes(manifest))
            files = {entry.relpath: entry.size for entries in cache.files.values() for entry in entries}
            disk.record_version(cache.key, cache.uri, cache.version, files)
        except (OSError, AttributeError) as error:
            _warn(
                f"the local cache cannot hold table {table.uri!r} ({error}); this process reads it "
                "from object storage"
            )
            return None
        return cache

    def bucket_fragment(self, fragment_id: int) -> Any:
        """The fragment on object storage."""
        return self._bucket.get_fragment(fragment_id)

    def take_local(self, fragment_id: int, offsets: Any, columns: Sequence[str]) -> pa.Table | None:
        """Rows at ``offsets`` of a fragment whose files are all cached, read locally;
        ``None`` (and a fill scheduled) when some file is not cached."""
        entries = self.files.get(fragment_id)
        if entries is None or self._reads_failed:
            return None
        held: list[Entry] = []
        try:
            for entry in entries:
                if not self.disk.hold(entry):
                    self.schedule(fragment_id)
                    return None
                held.append(entry)
            fragment = self._local_handle().get_fragment(fragment_id)
            result: pa.Table = fragment.take(offsets, columns=list(columns))
            return result
        except Exception as error:  # any failure of the local copy: read the bucket
            self._reads_failed = True
            _warn(
                f"the local cache at {self.disk.root!r} could not be read for table {self.uri!r} "
                f"({type(error).__name__}: {error}); this process reads it from object storage instead"
            )
            return None
        finally:
            for entry in held:
                self.disk.release(entry)

    def _local_handle(self) -> Any:
        import lance

        with self._lock:
            if self._local is None:
                root = self.disk.pin_root(self.key)
                manifest = self._manifest
                self._local = lance.LanceDataset(root, version=self.version, serialized_manifest=manifest)
            return self._local

    def schedule(self, fragment_id: int) -> None:
        """Download the fragment's files in the background, unless that is under way or
        was tried a moment ago."""
        with self._lock:
            soon = time.monotonic() < self._retry_at.get(fragment_id, 0.0)
            if self._fills_failed or fragment_id in self._filling or soon:
                return
            self._filling.add(fragment_id)
        _filler().submit(lambda: self._fill(fragment_id))

    def _fill(self, fragment_id: int) -> None:
        try:
            for entry in self.files[fragment_id]:
                if not self.disk.fill(entry, self._downloader(entry)):
                    break
        except Exception as error:  # the bucket still serves every read
            self._fills_failed = True
            _warn(
                f"the local cache at {self.disk.root!r} stopped filling for table {self.uri!r} "
                f"({type(error).__name__}: {error}); this process reads what is not cached from "
                "object storage (free disk space or pass a smaller cache_limit)"
            )
        finally:
            with self._lock:
                self._filling.discard(fragment_id)
                self._retry_at[fragment_id] = time.monotonic() + RETRY_SECONDS

    def _downloader(self, entry: Entry) -> Callable[[str], None]:
        def download(path: str) -> None:
            with self._lock:
                if self._session is None:
                    from lance.lance import LanceFileSession

                    options = {**(self._options or {}), "user_agent": FILL_USER_AGENT}
                    self._session = LanceFileSession(self.uri, storage_options=options)
                session = self._session
            session.download_file(entry.relpath, path)

        return download
