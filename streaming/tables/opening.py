"""Opening tables: the one place that tells the kinds of table apart.

``open_table`` turns what the user passed (a LanceDB table, embedded or on a
LanceDB server, a ``lance.LanceDataset`` or a URI) into a ``Snapshot`` and this
process's ``Table`` (``tables/table.py``): a ``LanceTable`` for a Lance table on local
disk or in a bucket, a ``RemoteSnapshot`` for a table of a LanceDB server. Nothing
else asks which kind a table is: the ``Table`` answers.

Open tables never travel between processes. A ``Snapshot`` (URI, version, storage
options, or the server's connection) does, and every process opens its own
``Table`` from it (``open_snapshot``), once (the few most recent are kept). A
process forked from one that used Lance refuses to use it (``check_fork_safety``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..core.uris import kind_of, scheme_of
from ..errors import SnapshotGoneError
from . import remote
from .lancetable import LanceTable, chosen_options, handle_options
from .table import Table

__all__ = [
    "Snapshot",
    "check_fork_safety",
    "handle_options",
    "latest_version",
    "mark_used",
    "open_dataset",
    "open_snapshot",
    "open_table",
    "table_uri",
]

_MAX_TABLES = 8
_TABLES: dict[tuple[str, int, int], Table] = {}
_lance_used_in_pid: int | None = None


@dataclass(frozen=True)
class Snapshot:
    """Where to find one version of a table; picklable, holds no handle.

    ``storage_options`` (which may hold credentials) are kept out of ``repr`` and
    out of every state dict.
    """

    uri: str
    version: int
    storage_options: Mapping[str, str] | None = field(default=None, repr=False, compare=False)
    table_name: str | None = field(default=None, compare=False)
    connection_factory: Callable[[str], Any] | None = field(default=None, repr=False, compare=False)
    remote: remote.Connection | None = field(default=None, repr=False, compare=False)
    """How to reach a table on a LanceDB server (``tables/remote.py``); None for a Lance table.

    The one mark of a snapshot's kind: ``open_snapshot`` and ``latest_version`` read it."""

    def at_version(self, version: int) -> Snapshot:
        """The same table at another version."""
        return Snapshot(
            self.uri, version, self.storage_options, self.table_name, self.connection_factory, self.remote
        )


def check_fork_safety() -> None:
    """Raise if this process was forked from one that had already used Lance.

    Lance is not fork-safe: a forked child that touches it can crash or hang, even
    with a handle of its own. Called before any Lance call in a worker.
    """
    if _lance_used_in_pid is not None and _lance_used_in_pid != os.getpid():
        raise RuntimeError(
            "this DataLoader worker was forked from a process that had already used "
            "Lance, which is not fork-safe (the worker could hang or crash); use "
            "streaming.StreamingDataLoader, or pass multiprocessing_context='forkserver' "
            "(or 'spawn') to DataLoader; with the Hugging Face Trainer (train_dataset= with "
            "dataloader_num_workers > 0), return a StreamingDataLoader from get_train_dataloader "
            "and mix streaming.StreamingTrainerMixin into the Trainer (docs/interop.md, "
            "'Hugging Face Trainer'), or set dataloader_num_workers=0"
        )


def mark_used() -> None:
    """Note that this process has used Lance (``check_fork_safety`` reads it)."""
    global _lance_used_in_pid
    _lance_used_in_pid = os.getpid()


def open_dataset(uri: str, version: int | None, storage_options: Mapping[str, str] | None) -> Any:
    """A new ``lance.LanceDataset`` of ``uri`` at ``version`` (the latest when None).

    Raises:
        SnapshotGoneError: ``version`` no longer exists.
    """
    import lance

    mark_used()
    options = dict(storage_options) if storage_options else None
    try:
        return lance.dataset(uri, version=version, storage_options=options)
    except ValueError as error:
        raise _open_error(uri, version, options, error) from None


_RUST_SOURCE = re.compile(r",?\s*/\S+\.rs:\d+:\d+")
"""Lance appends the Rust source lines an error passed through; users need none of them."""


def _open_error(uri: str, version: int | None, options: Any, error: ValueError) -> Exception:
    """Our sentence with the fix in front of what Lance said when ``uri`` did not open."""
    said = _RUST_SOURCE.sub("", " ".join(str(error).split()))
    lowered, kind = said.lower(), kind_of(uri)
    if version is not None and "not found" in lowered and ".manifest" in lowered:
        return SnapshotGoneError(
            f"version {version} of table {uri!r} no longer exists (it was cleaned up "
            "or the table was recreated), so this checkpoint cannot be resumed "
            "exactly; build datasets with tag_snapshot=True (or tag a version yourself: "
            "lance.dataset(uri).tags.create(name, version)) to keep the versions you may "
            "resume from when old versions are cleaned up"
        )
    if "no object store provider found for scheme" in lowered:
        if kind == "remote":
            return ValueError(
                f"{uri!r} is a table on a LanceDB server, not a Lance dataset URI: pass the table, "
                "lancedb.connect('db://DATABASE', api_key=...).open_table(NAME)"
            )
        return ValueError(
            f"cannot open table {uri!r}: Lance reads no {scheme_of(uri)!r} URIs; pass a local path or an "
            f"s3://, gs:// or az:// URI (Lance said: {said})"
        )
    if "not found" in lowered:
        return ValueError(f"no Lance table at {uri!r}: check the URI (Lance said: {said})")
    if kind == "bucket":
        fix = "check storage_options=" if options else "pass storage_options="
        return ValueError(
            f"cannot open table {uri!r} on object storage: {fix} (credentials, region, and "
            f"endpoint for a store other than the cloud's own; see docs/object-storage.md) "
            f"(Lance said: {said})"
        )
    return ValueError(f"cannot open table {uri!r}: {said}")


def open_table(
    table: Any,
    *,
    version: int | None,
    storage_options: Mapping[str, str] | None,
    connection_factory: Callable[[str], Any] | None = None,
) -> tuple[Snapshot, Table]:
    """Turn a LanceDB table, a ``lance.LanceDataset`` or a URI into a snapshot.

    Returns the snapshot (pinned to ``version``, default the latest now) and this
    process's ``Table`` of it. The snapshot takes the user's ``storage_options``, else
    those the Lance handle was opened with (``chosen_options``); a handle opened with
    other options is opened again with the snapshot's, so that every reader of the table
    uses the same. A table on a LanceDB server (``tables/remote.py``) is pinned by its
    version on the server.
    """
    mark_used()
    if remote.is_remote(table):
        return _open_remote(table, version=version, options=storage_options, factory=connection_factory)
    table_name = str(table.name) if hasattr(table, "to_lance") and hasattr(table, "name") else None
    dataset = _as_dataset(table, storage_options=storage_options)
    uri = str(dataset.uri)
    pinned = int(version) if version is not None else int(dataset.version)
    options = chosen_options(storage_options, dataset)
    snapshot = Snapshot(uri, pinned, options, table_name, connection_factory)
    if options != handle_options(dataset):  # a handle opened with other options: open it again
        return snapshot, open_snapshot(snapshot, fresh=True)
    if int(dataset.version) != pinned:
        return snapshot, open_snapshot(snapshot)
    table = LanceTable(dataset, storage_options=options)
    _remember(_key(snapshot), table)
    return snapshot, table


def _open_remote(
    table: Any,
    *,
    version: int | None,
    options: Mapping[str, str] | None,
    factory: Callable[[str], Any] | None,
) -> tuple[Snapshot, Table]:
    """``open_table`` for a table on a LanceDB server, pinned by its version there."""
    if options:
        raise ValueError(
            "storage_options= does not apply to a remote LanceDB table (its server reads the storage); "
            "leave it out: the table's connection settings reach every process by themselves"
        )
    connection, opened = remote.open_remote(table, version=version, factory=factory)
    snapshot = Snapshot(connection.uri, opened.version, table_name=connection.name, remote=connection)
    _remember(_key(snapshot), opened)
    return snapshot, opened


def _as_dataset(table: Any, *, storage_options: Mapping[str, str] | None) -> Any:
    """A ``lance.LanceDataset`` for a LanceDB table, a dataset or a URI (at its latest version)."""
    if hasattr(table, "to_lance") and hasattr(table, "name"):
        return table.to_lance()
    if hasattr(table, "get_fragments") and hasattr(table, "uri"):
        return table
    if isinstance(table, (str, os.PathLike)):
        return open_dataset(os.fspath(table), None, storage_options)
    if isinstance(table, list | tuple | dict):
        raise TypeError(
            f"table must be one table, got a {type(table).__name__}; to mix several tables, build a "
            "StreamingDataset for each and combine them with streaming.StreamingMixture"
        )
    raise TypeError(
        f"table must be a LanceDB table, a lance.LanceDataset or a URI string, got {type(table).__name__}"
    )


def table_uri(table: Any) -> str:
    """The URI of a LanceDB table, a ``lance.LanceDataset`` or a URI, without opening anything."""
    if remote.is_remote(table):
        return remote.remote_uri(table)
    uri = getattr(table, "uri", None)
    if isinstance(uri, str):
        return uri
    return os.fspath(table) if isinstance(table, (str, os.PathLike)) else ""


def _key(snapshot: Snapshot) -> tuple[str, int, int]:
    return (snapshot.uri, snapshot.version, os.getpid())


def open_snapshot(snapshot: Snapshot, *, fresh: bool = False) -> Table:
    """This process's ``Table`` of ``snapshot``, opened on first use.

    With ``fresh`` it is reopened, which proves the version still exists.

    Raises:
        SnapshotGoneError: the version no longer exists.
    """
    key = _key(snapshot)
    table = None if fresh else _TABLES.get(key)
    if table is None:
        table = _open(snapshot)
        _remember(key, table)
    return table


def _open(snapshot: Snapshot) -> Table:
    """A new ``Table`` of ``snapshot``: of the kind it was opened as by ``open_table``."""
    if snapshot.remote is not None:
        mark_used()
        return remote.RemoteSnapshot(snapshot.remote, snapshot.version)
    options = snapshot.storage_options
    if snapshot.connection_factory is not None and snapshot.table_name is not None:
        mark_used()
        latest = snapshot.connection_factory(snapshot.table_name).to_lance()
        return LanceTable(open_dataset(str(latest.uri), snapshot.version, options), storage_options=options)
    return LanceTable(open_dataset(snapshot.uri, snapshot.version, options), storage_options=options)


def latest_version(snapshot: Snapshot) -> int:
    """The newest version of the snapshot's table now."""
    if snapshot.remote is not None:
        return snapshot.remote.latest()
    if snapshot.connection_factory is not None and snapshot.table_name is not None:
        mark_used()
        return int(snapshot.connection_factory(snapshot.table_name).to_lance().version)
    return int(open_dataset(snapshot.uri, None, snapshot.storage_options).version)


def _remember(key: tuple[str, int, int], table: Table) -> None:
    """Keep an open table, only the most recent few per process."""
    _TABLES.pop(key, None)
    _TABLES[key] = table
    while len(_TABLES) > _MAX_TABLES:
        del _TABLES[next(iter(_TABLES))]
