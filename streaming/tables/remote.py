"""Tables on a LanceDB server (LanceDB Cloud and Enterprise) read like a Lance snapshot.

A ``RemoteTable`` exposes no fragments or files, only the server's API: versions,
counts, queries and takes by row offset or row id. A pinned version's live rows
have fixed offsets 0 .. N-1, so this module presents them as *virtual fragments*,
consecutive runs of ``FRAGMENT_ROWS`` offsets: the plan (shuffled fragment order,
rotation, blocks, windows) is the one a Lance table of that shape gets. A block
read is one take by row id (``take_row_ids``) of the rows at its offsets; a
fragment's row ids are asked once, on its first read (``tables/remoteids.py``): by
offset, a server's take costs offsets x rows in a fragment with deleted rows.
Start-up costs one ``count_rows`` and one ``describe`` whatever the table's size.
A filter costs one narrow query (the matching rows' offsets, once).

``RemoteSnapshot`` is the ``Table`` (``tables/table.py``) of this kind, ``"remote"``:
it answers what the reader asks of any table (``version``, ``schema``,
``get_fragments``, ``get_fragment(id).take``, ``scanner`` for a filter, ``to_table``,
``tags``), so no other module knows which kind of table it reads. ``Connection`` is
what travels to other processes: lancedb's serialized connection (it holds the API
key) lives only in memory, out of every ``repr``, state and message; each process
opens its own client from it.

Every request goes through ``tables/remoteretry.py``, the one place that says which
failures are retried and which are final.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from ..core.uris import Kind
from .remoteconn import Connection
from .remoteids import RowIdCache
from .remoteretry import call

if TYPE_CHECKING:
    from ..core.cachesettings import CacheSettings
    from ..core.stats import Counters

__all__ = ["FRAGMENT_ROWS", "Connection", "RemoteSnapshot", "is_remote", "open_remote", "remote_uri"]

_LOG = logging.getLogger("streaming")
FRAGMENT_ROWS = 65_536
"""Offsets per virtual fragment. Part of the plan: changing it changes the order."""
_OFFSET = "_rowoffset"
_ROWID = "_rowid"


def is_remote(table: Any) -> bool:
    """True for a table handle of a LanceDB server (``lancedb.connect("db://...")``).

    Imports nothing: such a handle exists only once lancedb's remote client has been
    imported, so a URI or a ``lance.LanceDataset`` never pays lancedb's import (about
    a second).
    """
    module = sys.modules.get("lancedb.remote.table")
    remote_table = getattr(module, "RemoteTable", None)
    return remote_table is not None and isinstance(table, remote_table)


def remote_uri(table: Any) -> str:
    """The URI a state records for a remote table: ``db://DATABASE/[NAMESPACE/]NAME``, no secret."""
    try:
        path = table.__getstate__().get("namespace_path") or ()
    except (RuntimeError, ValueError):  # a connection that cannot travel (it needs a connection_factory)
        path = ()
    namespace = "".join(f"{part}/" for part in path)
    return f"db://{table.db_name}/{namespace}{table.name}"


def _connection(table: Any, factory: Callable[[str], Any] | None) -> Connection:
    uri = remote_uri(table)
    name = str(table.name)
    if factory is not None:
        return Connection(uri, name, factory=factory)
    try:
        state = table.__getstate__()
    except (RuntimeError, ValueError) as error:  # a header provider or OAuth cannot travel
        raise ValueError(
            f"table {uri!r}: its LanceDB connection cannot be reopened in other processes ({error}); "
            "pass connection_factory=, a picklable function that returns the table by name"
        ) from None
    return Connection(
        uri,
        name,
        state=str(state["connection_state"]),
        namespace=tuple(state.get("namespace_path") or ()),
        branch=state.get("branch"),
    )


def open_remote(
    table: Any, *, version: int | None, factory: Callable[[str], Any] | None
) -> tuple[Connection, RemoteSnapshot]:
    """The connection settings of ``table`` and this process's snapshot at ``version``
    (default: the version the handle reads now). The user's handle is never changed."""
    connection = _connection(table, factory)
    pinned = (
        int(version)
        if version is not None
        else int(call("read the version", lambda: table.version, connection))
    )
    return connection, RemoteSnapshot(connection, pinned)


class _VirtualFragment:
    """``FRAGMENT_ROWS`` consecutive offsets of a remote snapshot, read like a Lance fragment."""

    num_deletions = 0

    def __init__(self, snapshot: RemoteSnapshot, fragment_id: int) -> None:
        self.snapshot = snapshot
        self.fragment_id = fragment_id
        start = fragment_id * FRAGMENT_ROWS
        self.physical_rows = min(FRAGMENT_ROWS, snapshot.count - start)

    def take(self, offsets: np.ndarray, *, columns: Sequence[str]) -> pa.Table:
        """The rows at ``offsets`` (of this fragment) in that order: one take by row id."""
        ids = self.snapshot.row_ids.ids(self.fragment_id, offsets)
        return self.snapshot.take(ids, columns)

    def data_files(self) -> list[Any]:
        """No file is known (so the row size is not either)."""
        return [_UnknownFile()]


class _UnknownFile:
    file_size_bytes = None


class _Matching:
    """The rows a filter matches, as ``scanner(...).to_table()`` gives them (``_rowaddr``)."""

    def __init__(self, snapshot: RemoteSnapshot, predicate: str) -> None:
        self.snapshot, self.predicate = snapshot, predicate

    def to_table(self) -> pa.Table:
        table = self.snapshot.call(
            f"find the rows matching {self.predicate!r}",
            lambda: self.snapshot.table.search().where(self.predicate).select([_OFFSET]).to_arrow(),
        )
        offsets = table.column(_OFFSET).to_numpy().astype(np.uint64)
        fragment = offsets // np.uint64(FRAGMENT_ROWS)
        addresses = (fragment << np.uint64(32)) | (offsets % np.uint64(FRAGMENT_ROWS))
        return pa.table({"_rowaddr": pa.array(addresses, pa.uint64())})


class RemoteSnapshot:
    """One version of a table on a LanceDB server, opened by this process (a ``Table``).

    Its blob columns are not read (``reads_blobs``), it has no local cache
    (``through_cache``) and its client counts no requests (``read_requests``).
    """

    kind: Kind = "remote"
    reads_blobs = False

    def __init__(self, connection: Connection, version: int) -> None:
        self.connection = connection
        self.uri = connection.uri
        self.version = version
        self.table = connection.open(version)
        self.count = int(self.call("count its rows", self.table.count_rows))
        self.schema: pa.Schema = self.call("read its schema", lambda: self.table.schema)
        self._fragments = [
            _VirtualFragment(self, index)
            for index in range((self.count + FRAGMENT_ROWS - 1) // FRAGMENT_ROWS)
        ]
        self.row_ids = RowIdCache(self.fragment_ids)
        self._every_id: np.ndarray | None = None

    def __repr__(self) -> str:
        return f"RemoteSnapshot(uri={self.uri!r}, version={self.version}, rows={self.count})"

    def call(self, what: str, action: Callable[[], Any]) -> Any:
        """``action`` with transient failures retried (see the module's docstring)."""
        return call(
            f"{what} (table {self.uri!r}, version {self.version})",
            action,
            self.connection,
            version=self.version,
        )

    def get_fragments(self) -> list[_VirtualFragment]:
        """The virtual fragments, in offset order."""
        return list(self._fragments)

    def get_fragment(self, fragment_id: int) -> _VirtualFragment:
        """The virtual fragment ``fragment_id``."""
        return self._fragments[fragment_id]

    def count_rows(self) -> int:
        """Live rows of the pinned version."""
        return self.count

    def scanner(self, *, filter: str, columns: Sequence[str], with_row_address: bool) -> _Matching:  # noqa: A002
        """The rows matching ``filter`` (only what ``source.build_filter_index`` asks)."""
        return _Matching(self, filter)

    def to_table(
        self,
        *,
        columns: Sequence[str],
        filter: str | None = None,  # noqa: A002
        limit: int | None = None,
    ) -> pa.Table:
        """Up to ``limit`` rows of ``columns`` matching ``filter``, in the server's order: one query."""
        query = self.table.search().select(list(columns))
        if filter:
            query = query.where(filter)
        if limit is not None:
            query = query.limit(limit)
        result: pa.Table = self.call("read rows", query.to_arrow)
        return result

    @property
    def tags(self) -> Any:
        """The table's tags on the server (``list``, ``create``, ``delete``)."""
        return self.table.tags

    def read_blobs(self, column: str, *, indices: Any, preserve_order: bool) -> Any:
        """Never called: ``reads_blobs`` is False (``samples/blobs.py`` refuses the column first)."""
        raise TypeError(f"blob column {column!r} of {self.uri!r} is not read through a LanceDB server")

    def take_blobs(self, column: str, *, indices: Any, buffer_size: int | None = None) -> Any:
        """Never called: ``reads_blobs`` is False."""
        return self.read_blobs(column, indices=indices, preserve_order=True)

    def through_cache(self, settings: CacheSettings | None, counters: Counters) -> RemoteSnapshot:
        """Itself: the server reads the storage, there are no files to keep."""
        return self

    def read_requests(self) -> None:
        """Not counted: lancedb's client counts no requests."""
        return None

    def fragment_ids(self, fragment_id: int) -> np.ndarray:
        """The row ids of virtual fragment ``fragment_id``'s offsets, in offset order: one narrow query.

        The page (``offset``/``limit``) also names each row's ``_rowoffset``, so a server that
        scans in another order is noticed: then the whole table's ids are read once instead.
        """
        start, rows = fragment_id * FRAGMENT_ROWS, self._fragments[fragment_id].physical_rows
        if self._every_id is None:

            def page() -> pa.Table:
                query = self.table.search().select([_ROWID, _OFFSET]).offset(start).limit(rows)
                found: pa.Table = query.to_arrow()
                return found

            what = f"read the row ids of offsets {start} to {start + rows - 1}"
            ids = _in_offset_order(self.call(what, page))
            if ids is not None and len(ids) == rows and ids.offsets[0] == start and ids.contiguous:
                return ids.ids
            self._every_id = self._scan_ids()
        return self._every_id[start : start + rows]

    def _scan_ids(self) -> np.ndarray:
        """Every row id in offset order (8 bytes a row): one narrow scan of the whole table."""
        _LOG.info("LanceDB server: %s answers pages out of storage order; reading all its row ids", self.uri)
        query = self.table.search().select([_ROWID, _OFFSET])
        scan = self.call("read every row id", query.to_arrow)
        ids = _in_offset_order(scan)
        if ids is None or len(ids) != self.count or not ids.contiguous or ids.offsets[0] != 0:
            raise RuntimeError(
                f"the LanceDB server answered {scan.num_rows} row ids with their _rowoffset for table "
                f"{self.uri!r} at version {self.version}, which has {self.count} rows; the server must "
                "answer _rowid and _rowoffset at a pinned version, which reading a remote table needs"
            )
        return ids.ids

    def take(self, ids: np.ndarray, columns: Sequence[str]) -> pa.Table:
        """The rows with row ``ids`` in that order: one ``take_row_ids`` request.

        Raises:
            RuntimeError: the server answered other rows than those asked for.
        """
        wanted = np.asarray(ids, dtype=np.uint64)
        names = [name for name in columns if name not in (_OFFSET, _ROWID)]

        def take() -> pa.Table:
            found: pa.Table = self.table.take_row_ids(wanted.tolist()).select([*names, _ROWID]).to_arrow()
            return found

        table = self.call(f"take {len(wanted)} rows", take)
        got = table.column(_ROWID).to_numpy().astype(np.uint64) if _ROWID in table.column_names else None
        if got is not None and np.array_equal(got, wanted):  # answered in the order asked: no copy
            return table.select(names)
        order = np.argsort(wanted, kind="stable")
        if got is None or len(got) != len(wanted) or not np.array_equal(np.sort(got), wanted[order]):
            raise RuntimeError(
                f"the LanceDB server answered {table.num_rows} rows for a take of {len(wanted)} row ids of "
                f"table {self.uri!r} at version {self.version}: not the rows asked for (a row missing at the "
                "pinned version, or no _rowid column); the server must honour take_row_ids at a pinned "
                "version, which reading a remote table needs"
            )
        where = np.empty(len(wanted), dtype=np.int64)  # where = answer row of each row asked, in order
        where[order] = np.argsort(got, kind="stable")
        return table.take(pa.array(where)).select(names)


@dataclass(frozen=True)
class _Ids:
    """Row ids and their offsets, sorted by offset."""

    ids: np.ndarray
    offsets: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def contiguous(self) -> bool:
        """True when the offsets are consecutive (no gap, no repeat)."""
        return bool(len(self.offsets) == 0 or self.offsets[-1] - self.offsets[0] == len(self.offsets) - 1)


def _in_offset_order(table: pa.Table) -> _Ids | None:
    """``table``'s ``_rowid`` sorted by its ``_rowoffset`` (None: a column is missing, offsets repeat)."""
    if _ROWID not in table.column_names or _OFFSET not in table.column_names or table.num_rows == 0:
        return None
    offsets = table.column(_OFFSET).to_numpy().astype(np.int64)
    order = np.argsort(offsets, kind="stable")
    offsets = offsets[order]
    if len(offsets) > 1 and not bool(np.all(np.diff(offsets) > 0)):
        return None
    return _Ids(table.column(_ROWID).to_numpy().astype(np.uint64)[order], offsets)
