"""Tables on a LanceDB server (LanceDB Cloud and Enterprise) read like a Lance snapshot.

A ``RemoteTable`` exposes no fragments or files, only the server's API: versions,
counts, queries and takes by row offset. A pinned version's live rows have fixed
offsets 0 .. N-1 (the server's ``take_offsets``), so this module presents them as
*virtual fragments*, consecutive runs of ``FRAGMENT_ROWS`` offsets: the plan
(shuffled fragment order, rotation, blocks, windows) is the one a Lance table of
that shape gets, and a block read is one take of consecutive offsets. Start-up
costs one ``count_rows`` and one ``describe`` whatever the table's size: no row-id
scan. A filter costs one narrow query (the matching rows' offsets, once).

``RemoteSnapshot`` answers what ``read/source.py`` asks of a Lance handle
(``version``, ``schema``, ``get_fragments``, ``get_fragment(id).take``, ``scanner``
for a filter, ``to_table``, ``tags``), so nothing above ``read/`` knows which kind
of table it reads. ``Connection`` is what travels to other processes: lancedb's
serialized connection (it holds the API key) lives only in memory, out of every
``repr``, state and message; each process opens its own client from it.

Transient failures (5xx, timeouts, dropped connections that outlast the client's
own retries) are retried here with backoff and logged; a take is idempotent and
its rows are used only when the whole answer arrived, so nothing is lost or
repeated. What cannot succeed (a refused key, a missing table or version) raises
at once with the fix.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import SnapshotGoneError

__all__ = ["FRAGMENT_ROWS", "Connection", "RemoteSnapshot", "is_remote", "open_remote", "remote_uri"]

_LOG = logging.getLogger("streaming")
FRAGMENT_ROWS = 65_536
"""Offsets per virtual fragment. Part of the plan: changing it changes the order."""
RETRIES = 4
"""Attempts after the first for a transient failure (on top of the client's own)."""
BACKOFF_S = 0.25
"""The first wait before a retry; doubled each time."""
_OFFSET = "_rowoffset"


def is_remote(table: Any) -> bool:
    """True for a table handle of a LanceDB server (``lancedb.connect("db://...")``).

    Imports nothing: such a handle exists only once lancedb's remote client has been
    imported, so a URI or a ``lance.LanceDataset`` never pays lancedb's import (about
    a second).
    """
    module = sys.modules.get("lancedb.remote.table")
    remote_table = getattr(module, "RemoteTable", None)
    return remote_table is not None and isinstance(table, remote_table)


@dataclass(frozen=True)
class Connection:
    """How any process of the job opens the table on the server; held in memory only.

    ``state`` is lancedb's serialized connection (database URI, API key, region,
    host override, client config); ``factory`` the user's ``connection_factory``,
    used instead when given. Neither appears in a ``repr``.
    """

    uri: str
    name: str
    state: str | None = field(default=None, repr=False)
    namespace: tuple[str, ...] = ()
    branch: str | None = None
    factory: Callable[[str], Any] | None = field(default=None, repr=False)

    def open(self, version: int) -> Any:
        """A new ``RemoteTable`` of this process at ``version``.

        Raises:
            SnapshotGoneError: the server no longer has ``version``.
            PermissionError: the server refused the API key.
            ValueError: the server has no such table.
        """
        return _call(f"open table {self.uri!r} at version {version}", lambda: self._open(version), self)

    def _open(self, version: int) -> Any:
        if self.factory is not None:
            table = self.factory(self.name)
            table.checkout(version)
            return table
        import lancedb

        database = lancedb.deserialize_conn(self.state or "", for_worker=True)
        return database.open_table(
            self.name, namespace_path=list(self.namespace) or None, branch=self.branch, version=version
        )

    def latest(self) -> int:
        """The newest version of the table on the server now."""
        factory = self.factory
        if factory is not None:
            return int(_call(f"read the version of {self.uri!r}", lambda: factory(self.name).version, self))
        import lancedb

        def newest() -> int:
            database = lancedb.deserialize_conn(self.state or "", for_worker=True)
            return int(database.open_table(self.name, namespace_path=list(self.namespace) or None).version)

        return int(_call(f"read the version of {self.uri!r}", newest, self))


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
        else int(_call("read the version", lambda: table.version, connection))
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
        """The rows at ``offsets`` (of this fragment) in that order: one request."""
        return self.snapshot.take(
            np.asarray(offsets, dtype=np.int64) + self.fragment_id * FRAGMENT_ROWS, columns
        )

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
    """One version of a table on a LanceDB server, opened by this process."""

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

    def __repr__(self) -> str:
        return f"RemoteSnapshot(uri={self.uri!r}, version={self.version}, rows={self.count})"

    def call(self, what: str, action: Callable[[], Any]) -> Any:
        """``action`` with transient failures retried (see the module's docstring)."""
        return _call(f"{what} (table {self.uri!r}, version {self.version})", action, self.connection)

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

    def take(self, offsets: np.ndarray, columns: Sequence[str]) -> pa.Table:
        """The rows at ascending ``offsets`` in that order: one ``take_offsets`` request.

        Raises:
            RuntimeError: the server answered other rows than those asked for.
        """
        wanted = [int(value) for value in offsets]
        names = [name for name in columns if name != _OFFSET]

        def take() -> pa.Table:
            return self.table.take_offsets(wanted).select([*names, _OFFSET]).to_arrow()

        table = self.call(f"take {len(wanted)} rows", take)
        if _OFFSET not in table.column_names:
            raise RuntimeError(
                f"the LanceDB server answered a take of {len(wanted)} offsets of table {self.uri!r} without "
                f"their {_OFFSET} column, so the rows cannot be checked or ordered; this server does not "
                "support take_offsets, which reading a remote table needs"
            )
        got = table.column(_OFFSET).to_numpy().astype(np.int64)
        order = np.argsort(got, kind="stable")
        if len(got) != len(wanted) or not np.array_equal(got[order], np.asarray(wanted, dtype=np.int64)):
            raise RuntimeError(
                f"the LanceDB server answered {len(got)} rows for a take of {len(wanted)} offsets of table "
                f"{self.uri!r} at version {self.version}: not the rows asked for; the server may not "
                "honour take_offsets at a pinned version"
            )
        if np.array_equal(order, np.arange(len(order))):  # answered in the order asked: no copy
            return table.select(names)
        return table.take(pa.array(order)).select(names)


def _status(error: BaseException) -> int | None:
    status = getattr(error, "status_code", None)
    return int(status) if isinstance(status, int) else None


def _transient(error: BaseException) -> bool:
    """True for what a later attempt may get past: 5xx, 429, timeouts, dropped connections."""
    from lancedb.remote.errors import HttpError, RetryError

    if isinstance(error, RetryError | TimeoutError | ConnectionError):
        return True
    status = _status(error)
    if isinstance(error, HttpError) and status is not None:
        return status >= 500 or status in (408, 429)
    text = str(error).lower()
    return isinstance(error, RuntimeError) and any(
        word in text for word in ("timed out", "timeout", "connection", "error sending request")
    )


def _call(what: str, action: Callable[[], Any], connection: Connection) -> Any:
    for attempt in range(RETRIES + 1):
        try:
            return action()
        except Exception as error:
            if not _transient(error):
                raise _final(error, what, connection) from None
            if attempt == RETRIES:
                raise RuntimeError(
                    f"could not {what} on the LanceDB server after {RETRIES + 1} attempts: {error}; "
                    "the server keeps failing, check its health (the run can resume from its last checkpoint)"
                ) from None
            wait = BACKOFF_S * 2**attempt
            _LOG.warning("LanceDB server: could not %s (%s); retrying in %.2f s", what, error, wait)
            time.sleep(wait)
    raise AssertionError("unreachable")  # pragma: no cover


def _final(error: BaseException, what: str, connection: Connection) -> BaseException:
    """The error to raise for a failure that no retry can get past, naming the fix."""
    status = _status(error)
    text = str(error)
    if status in (401, 403):
        return PermissionError(
            f"the LanceDB server refused the API key (HTTP {status}) when asked to {what}; pass a valid "
            "api_key to lancedb.connect (or a connection_factory that opens the table with one)"
        )
    if "(version:" in text and "not found" in text.lower():
        return SnapshotGoneError(
            f"could not {what}: the server no longer has that version of table {connection.uri!r}, so this "
            "checkpoint cannot be resumed exactly; tag the versions you may resume from "
            "(table.tags.create(name, version)) so the server keeps them"
        )
    if "not found" in text.lower():
        return ValueError(
            f"could not {what}: the LanceDB server has no table {connection.name!r} ({text}); check the "
            "table's name and the database of lancedb.connect"
        )
    return error
