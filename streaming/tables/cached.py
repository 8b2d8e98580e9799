"""Reading a table in a bucket through the local cache (``cache_dir=``): ``CachedTable``.

``CachedTable`` is the ``Table`` (``tables/table.py``) of this way of reading: a
bucket's ``LanceTable`` gives it from ``through_cache`` when the dataset has a cache.
A fragment whose files (data files and deletion file) are all in the cache is read
with a local Lance handle of the same version: the same manifest (serialized from
the bucket's handle, never cached by name), over hard links of the cached files, so
the rows at every offset are the same as the bucket's. Any other fragment is read
from the bucket as without the cache, and its files are downloaded in the
background (whole files, one request each, by Lance's own object store with the
snapshot's options), so the first epoch never waits for a download and later reads
of that fragment are local. ``snapshotcache`` holds a snapshot's cached files and
their downloads; ``diskcache`` keeps the files and coordinates the processes of the
machine.

Nothing here changes which rows are read, only where their bytes come from. Any
failure of the cache (a full disk, a folder that cannot be written, a file Lance
cannot read) warns ``CacheWarning`` once and leaves this process reading the
bucket for that table.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..core.cachesettings import CacheSettings
from ..core.stats import Counters
from ..errors import CacheUnusedWarning
from .snapshotcache import BucketTable, SnapshotCache, snapshot_cache
from .table import PLACES, Table

if TYPE_CHECKING:
    pass


__all__ = ["CachedTable", "reading", "warn_unused"]


_UNUSED: set[tuple[str, int]] = set()
"""(table URI, pid) pairs already warned that their ``cache_dir=`` is not used."""


def warn_unused(table: Table, *, cache_dir: object) -> None:
    """Warn ``CacheUnusedWarning`` once per process and table when ``cache_dir=`` was
    passed for a table not in a bucket, which is read where it is (there is nothing
    a copy would gain, or no file to copy)."""
    uri = table.uri
    if cache_dir is None or table.kind == "bucket" or (uri, os.getpid()) in _UNUSED:
        return
    _UNUSED.add((uri, os.getpid()))
    place = PLACES[table.kind]
    warnings.warn(
        f"cache_dir={str(cache_dir)!r} is not used for {uri!r}: the table is {place}, "
        "and the cache keeps copies of tables on object storage only; leave cache_dir unset "
        f"for tables {place}",
        CacheUnusedWarning,
        stacklevel=4,  # the caller of StreamingDataset() (through build_engine)
    )


def reading(table: BucketTable, settings: CacheSettings, counters: Counters) -> Table:
    """What to read ``table`` (in a bucket) through: its cache, or ``table`` itself when
    the cache cannot serve it (warned once)."""
    cache = snapshot_cache(table, settings)
    return table if cache is None else CachedTable(table, cache, counters)


class CachedTable:
    """A table in a bucket read through the local cache (a ``Table``): its fragments' rows
    from the cache when their files are there (counted as cached rows), else from the
    bucket; everything else is the bucket table's."""

    reads_blobs = True

    def __init__(self, table: BucketTable, cache: SnapshotCache, counters: Counters) -> None:
        self._table = table
        self._cache = cache
        self._counters = counters
        self.uri, self.version, self.kind = table.uri, table.version, table.kind

    @property
    def schema(self) -> pa.Schema:
        """The bucket table's columns."""
        return self._table.schema

    @property
    def tags(self) -> Any:
        """The bucket table's tags."""
        return self._table.tags

    def get_fragments(self) -> list[_Fragment]:
        """Every fragment, read through the cache."""
        return [self.get_fragment(int(fragment.fragment_id)) for fragment in self._table.get_fragments()]

    def get_fragment(self, fragment_id: int) -> _Fragment:
        """The fragment ``fragment_id``, read through the cache."""
        return _Fragment(self._cache, fragment_id, self._counters)

    def scanner(self, *, filter: str, columns: Sequence[str], with_row_address: bool) -> Any:  # noqa: A002
        """The bucket table's scanner."""
        return self._table.scanner(filter=filter, columns=columns, with_row_address=with_row_address)

    def to_table(
        self,
        *,
        columns: Sequence[str],
        filter: str | None = None,  # noqa: A002
        limit: int | None = None,
    ) -> pa.Table:
        """The bucket table's rows."""
        return self._table.to_table(columns=columns, filter=filter, limit=limit)

    def read_blobs(self, column: str, *, indices: Any, preserve_order: bool) -> Any:
        """The bucket table's blobs (blob files are not cached)."""
        return self._table.read_blobs(column, indices=indices, preserve_order=preserve_order)

    def take_blobs(self, column: str, *, indices: Any, buffer_size: int | None = None) -> Any:
        """The bucket table's blob files."""
        return self._table.take_blobs(column, indices=indices, buffer_size=buffer_size)

    def through_cache(self, settings: CacheSettings | None, counters: Counters) -> Table:
        """Itself: already read through the cache."""
        return self

    def read_requests(self) -> int | None:
        """The bucket table's count (reads from the cache send none)."""
        return self._table.read_requests()


class _Fragment:
    """One fragment of a ``CachedTable``: its metadata from the bucket, its rows from the
    cache when its files are there."""

    def __init__(self, cache: SnapshotCache, fragment_id: int, counters: Counters) -> None:
        self._cache = cache
        self.fragment_id = fragment_id
        self._counters = counters

    @property
    def physical_rows(self) -> int:
        """Its rows, deleted ones included (the bucket's metadata)."""
        return int(self._cache.bucket_fragment(self.fragment_id).physical_rows)

    @property
    def num_deletions(self) -> int:
        """Its deleted rows (the bucket's metadata)."""
        return int(self._cache.bucket_fragment(self.fragment_id).num_deletions)

    def data_files(self) -> Sequence[Any]:
        """Its data files on object storage."""
        files: Sequence[Any] = self._cache.bucket_fragment(self.fragment_id).data_files()
        return files

    def take(self, offsets: Any, *, columns: Sequence[str]) -> pa.Table:
        """The rows at ``offsets``: from the cache when the fragment is there, else the bucket."""
        local = self._cache.take_local(self.fragment_id, offsets, columns)
        if local is not None:
            self._counters.add(cached=local.num_rows)
            return local
        found: pa.Table = self._cache.bucket_fragment(self.fragment_id).take(offsets, columns=list(columns))
        return found
