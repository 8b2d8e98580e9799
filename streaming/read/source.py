"""The only module that talks to Lance: snapshots, fragment row counts, filters, reads.

Lance handles never travel between processes. A ``Snapshot`` (URI, version,
storage options) does, and every process opens its own handle from it, once.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from ..core.profiles import PROFILES
from ..errors import SnapshotGoneError
from . import remote

__all__ = [
    "FilterIndex",
    "Snapshot",
    "build_filter_index",
    "check_fork_safety",
    "column_names",
    "fragment_rows",
    "handle_options",
    "is_integer_list",
    "latest_version",
    "list_lengths",
    "open_snapshot",
    "open_table",
    "protect",
    "read_rows",
    "release",
    "row_bytes",
    "table_uri",
    "tag_name",
]

_MAX_HANDLES = 8
_HANDLES: dict[tuple[str, int, int], Any] = {}
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
    """How to reach a table on a LanceDB server (``read/remote.py``); None for a Lance table."""

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
            "(or 'spawn') to DataLoader"
        )


def _mark_used() -> None:
    global _lance_used_in_pid
    _lance_used_in_pid = os.getpid()


def _open_dataset(uri: str, version: int | None, storage_options: Mapping[str, str] | None) -> Any:
    import lance

    _mark_used()
    options = dict(storage_options) if storage_options else None
    try:
        return lance.dataset(uri, version=version, storage_options=options)
    except ValueError as error:
        if version is not None and "not found" in str(error).lower():
            raise SnapshotGoneError(
                f"version {version} of table {uri!r} no longer exists (it was cleaned up "
                "or the table was recreated), so this checkpoint cannot be resumed "
                "exactly; build datasets with tag_snapshot=True (or tag a version yourself: "
                "lance.dataset(uri).tags.create(name, version)) to keep the versions you may "
                "resume from when old versions are cleaned up"
            ) from None
        raise


def open_table(
    table: Any,
    *,
    version: int | None,
    storage_options: Mapping[str, str] | None,
    connection_factory: Callable[[str], Any] | None = None,
) -> tuple[Snapshot, Any]:
    """Turn a LanceDB table, a ``lance.LanceDataset`` or a URI into a snapshot.

    Returns the snapshot (pinned to ``version``, default the latest now) and an open
    handle to it for this process. Without ``storage_options`` the snapshot takes
    those the handle was opened with (``handle_options``). A table on a LanceDB
    server (``read/remote.py``) is pinned by its version on the server.
    """
    _mark_used()
    if remote.is_remote(table):
        if storage_options:
            raise ValueError(
                "storage_options= does not apply to a remote LanceDB table (its server reads the storage); "
                "leave it out: the table's connection settings reach every process by themselves"
            )
        connection, handle = remote.open_remote(table, version=version, factory=connection_factory)
        snapshot = Snapshot(connection.uri, handle.version, table_name=connection.name, remote=connection)
        _remember(_key(snapshot), handle)
        return snapshot, handle
    table_name = None
    if hasattr(table, "to_lance") and hasattr(table, "name"):
        table_name = str(table.name)
        dataset = table.to_lance()
    elif hasattr(table, "get_fragments") and hasattr(table, "uri"):
        dataset = table
    elif isinstance(table, (str, os.PathLike)):
        dataset = _open_dataset(os.fspath(table), None, storage_options)
    elif isinstance(table, list | tuple | dict):
        raise TypeError(
            f"table must be one table, got a {type(table).__name__}; to mix several tables, build a "
            "StreamingDataset for each and combine them with streaming.StreamingMixture"
        )
    else:
        raise TypeError(
            f"table must be a LanceDB table, a lance.LanceDataset or a URI string, got {type(table).__name__}"
        )
    uri = str(dataset.uri)
    pinned = int(version) if version is not None else int(dataset.version)
    if storage_options is None:
        storage_options = handle_options(dataset)
    snapshot = Snapshot(uri, pinned, storage_options, table_name, connection_factory)
    if int(dataset.version) != pinned:
        dataset = open_snapshot(snapshot)
    _remember(_key(snapshot), dataset)
    return snapshot, dataset


_LANCE_SET = ("user_agent",)
"""Options Lance adds by itself when it opens a dataset; not the user's to pass on."""


def table_uri(table: Any) -> str:
    """The URI of a LanceDB table, a ``lance.LanceDataset`` or a URI, without opening anything."""
    if remote.is_remote(table):
        return remote.remote_uri(table)
    uri = getattr(table, "uri", None)
    if isinstance(uri, str):
        return uri
    return os.fspath(table) if isinstance(table, (str, os.PathLike)) else ""


def row_bytes(dataset: Any, columns: Sequence[str] | None) -> float | None:
    """Bytes a row of ``columns`` takes, from metadata only (no data is read).

    Exact when every column has a fixed width; otherwise the data files' sizes over
    their rows (every column's, so an over-estimate when only some are read).
    ``None`` when neither is known.
    """
    schema = dataset.schema
    names = [name for name in columns or schema.names if name in schema.names]  # unknown: named later
    widths = [_fixed_width(schema.field(name).type) for name in names]
    if all(width is not None for width in widths):
        return float(sum(width for width in widths if width is not None)) or None
    total_bytes = total_rows = 0
    for fragment in dataset.get_fragments():
        sizes = [file.file_size_bytes for file in fragment.data_files()]
        if any(size is None for size in sizes):
            return None
        total_bytes += sum(sizes)
        total_rows += int(fragment.physical_rows)
    return total_bytes / total_rows if total_rows else None


def _fixed_width(type_: pa.DataType) -> int | None:
    """Bytes of one value of a fixed-width type (fixed-size lists included), else None."""
    count = 1
    while pa.types.is_fixed_size_list(type_):
        count *= type_.list_size
        type_ = type_.value_type
    try:
        bits = type_.bit_width
    except ValueError:
        return None
    return max(1, bits * count // 8)


def handle_options(dataset: Any) -> dict[str, str] | None:
    """The storage options (credentials) a ``lance.LanceDataset`` was opened with.

    A LanceDB connection's ``storage_options`` reach the datasets it opens, so a
    table handle carries them too; every other process of the job then reopens the
    snapshot with them, without the user passing them again.
    """
    options = getattr(dataset, "initial_storage_options", None)
    if not options:
        return None
    chosen = {key: value for key, value in dict(options).items() if key not in _LANCE_SET}
    return chosen or None


def _key(snapshot: Snapshot) -> tuple[str, int, int]:
    return (snapshot.uri, snapshot.version, os.getpid())


def open_snapshot(snapshot: Snapshot, *, fresh: bool = False) -> Any:
    """This process's handle to ``snapshot``, opened on first use.

    With ``fresh`` the handle is reopened, which proves the version still exists.

    Raises:
        SnapshotGoneError: the version no longer exists.
    """
    key = _key(snapshot)
    handle = None if fresh else _HANDLES.get(key)
    if handle is None:
        if snapshot.remote is not None:
            _mark_used()
            handle = remote.RemoteSnapshot(snapshot.remote, snapshot.version)
        elif snapshot.connection_factory is not None and snapshot.table_name is not None:
            _mark_used()
            latest = snapshot.connection_factory(snapshot.table_name).to_lance()
            handle = _open_dataset(str(latest.uri), snapshot.version, snapshot.storage_options)
        else:
            handle = _open_dataset(snapshot.uri, snapshot.version, snapshot.storage_options)
        _remember(key, handle)
    return handle


def _remember(key: tuple[str, int, int], handle: Any) -> None:
    """Cache a handle, keeping only the most recent few per process."""
    _HANDLES.pop(key, None)
    _HANDLES[key] = handle
    while len(_HANDLES) > _MAX_HANDLES:
        del _HANDLES[next(iter(_HANDLES))]


def column_names(dataset: Any) -> list[str]:
    """Every column of the snapshot, in schema order."""
    return list(dataset.schema.names)


def is_integer_list(dataset: Any, column: str) -> bool:
    """True when ``column`` holds lists of integers (token ids): variable or fixed size."""
    import pyarrow as pa

    kind = dataset.schema.field(column).type
    lists = pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)
    return lists and pa.types.is_integer(kind.value_type)


def list_lengths(dataset: Any, column: str, *, limit: int, filter: str | None) -> np.ndarray:  # noqa: A002
    """Lengths of the first ``limit`` lists of ``column`` (matching ``filter``), in storage order."""
    import pyarrow.compute as pc

    table = dataset.to_table(columns=[column], filter=filter, limit=limit)
    lengths = pc.list_value_length(table.column(column)).fill_null(0)
    return np.asarray(lengths.to_numpy(zero_copy_only=False), dtype=np.int64)


def fragment_rows(dataset: Any) -> tuple[list[int], list[int]]:
    """Fragment ids in storage order and their live row counts, from metadata only."""
    ids, rows = [], []
    for fragment in dataset.get_fragments():
        ids.append(int(fragment.fragment_id))
        rows.append(int(fragment.physical_rows) - int(fragment.num_deletions))
    return ids, rows


class FilterIndex:
    """Live-row offsets of the rows matching a filter, per fragment, stored compactly.

    ``offsets[starts[i]:starts[i + 1]]`` are the matching live offsets of fragment
    ``ids[i]``, ascending (4 bytes a matching row). Pickling writes the arrays to
    a temporary folder once and sends only its path; the receiving process
    memory-maps them instead of copying or rebuilding them. The folder is removed
    when the process that wrote it exits.
    """

    _FIELDS = ("ids", "starts", "offsets")

    def __init__(self, ids: np.ndarray, starts: np.ndarray, offsets: np.ndarray) -> None:
        self.ids, self.starts, self.offsets = ids, starts, offsets
        self._folder: str | None = None

    def counts(self) -> list[int]:
        """Matching rows per fragment, in the order of ``ids``."""
        return np.diff(self.starts).tolist()

    def live_offsets(self, fragment_id: int, planned: np.ndarray) -> np.ndarray:
        """Map indices among a fragment's matching rows to its live-row offsets."""
        index = int(np.searchsorted(self.ids, fragment_id))
        result: np.ndarray = self.offsets[self.starts[index] + planned]
        return result

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        if self._folder is None:
            folder = tempfile.mkdtemp(prefix="lance-streaming-filter-")
            atexit.register(shutil.rmtree, folder, True)
            for name in self._FIELDS:
                np.save(os.path.join(folder, f"{name}.npy"), getattr(self, name))
            self._folder = folder
        return (_map_filter_index, (self._folder,))


def _map_filter_index(folder: str) -> FilterIndex:
    arrays = [np.load(os.path.join(folder, f"{name}.npy"), mmap_mode="r") for name in FilterIndex._FIELDS]
    index = FilterIndex(*arrays)
    index._folder = folder
    return index


def build_filter_index(dataset: Any, predicate: str) -> FilterIndex:
    """Find the live offsets of every row matching ``predicate`` with one scan."""
    _mark_used()
    try:
        matched = dataset.scanner(filter=predicate, columns=[], with_row_address=True).to_table()
    except Exception as error:  # Lance raises several types for a bad predicate
        raise ValueError(
            f"filter={predicate!r} could not be applied to table {dataset.uri!r}: {error}; "
            "pass an SQL predicate over the table's columns"
        ) from None
    addresses = np.sort(matched.column("_rowaddr").to_numpy().astype(np.uint64))
    fragments = (addresses >> np.uint64(32)).astype(np.int64)
    physical = (addresses & np.uint64(0xFFFFFFFF)).astype(np.int64)
    ids, _ = fragment_rows(dataset)
    ordered_ids = np.array(sorted(ids), dtype=np.int64)
    starts = np.searchsorted(fragments, ordered_ids, side="left")
    starts = np.append(starts, len(fragments)).astype(np.int64)
    offsets = physical.copy()
    for index, fragment_id in enumerate(ordered_ids):
        lo, hi = int(starts[index]), int(starts[index + 1])
        fragment = dataset.get_fragment(int(fragment_id))
        if hi > lo and int(fragment.num_deletions) > 0:
            offsets[lo:hi] = np.searchsorted(_live_physical(fragment), physical[lo:hi])
    return FilterIndex(ids=ordered_ids, starts=starts, offsets=offsets.astype(np.uint32))


def _live_physical(fragment: Any) -> np.ndarray:
    table = fragment.scanner(columns=[], with_row_address=True).to_table()
    addresses = table.column("_rowaddr").to_numpy().astype(np.uint64)
    result: np.ndarray = np.sort((addresses & np.uint64(0xFFFFFFFF)).astype(np.int64))
    return result


def read_rows(
    dataset: Any,
    pieces: Sequence[tuple[int, np.ndarray]],
    *,
    columns: Sequence[str],
    filter_index: FilterIndex | None,
    executor: Executor | None = None,
    take_rows: int = PROFILES["local"].take_rows,
) -> pa.Table:
    """Read ``pieces`` (fragment id, ascending planned offsets) and concatenate them.

    One ``take`` per fragment (Lance reads runs of consecutive offsets as ranges).
    With ``executor`` pieces longer than ``take_rows`` offsets (unless 0) are cut
    into consecutive parts, one take each, and the takes run on its threads,
    several at once: a take releases the GIL while Lance reads, so they overlap
    each other and the trainer. Either way the rows come back in the order of
    ``pieces``.
    """
    names = list(columns)

    def take(piece: tuple[int, np.ndarray]) -> pa.Table:
        fragment_id, planned = piece
        offsets = planned if filter_index is None else filter_index.live_offsets(fragment_id, planned)
        fragment = dataset.get_fragment(int(fragment_id))
        return fragment.take(np.asarray(offsets, dtype=np.int64), columns=names)

    if executor is None:
        tables = [take(piece) for piece in pieces]
    else:
        tables = list(executor.map(take, _cut_pieces(pieces, take_rows)))
    if len(tables) == 1:
        return tables[0]
    return pa.concat_tables(tables)


def _cut_pieces(pieces: Sequence[tuple[int, np.ndarray]], take_rows: int) -> list[tuple[int, np.ndarray]]:
    """``pieces`` with any longer than ``take_rows`` offsets cut into consecutive parts."""
    if take_rows <= 0:
        return list(pieces)
    result = []
    for fragment_id, planned in pieces:
        for start in range(0, max(len(planned), 1), take_rows):
            result.append((fragment_id, planned[start : start + take_rows]))
    return result


def tag_name(version: int) -> str:
    """The Lance tag that protects ``version`` from cleanup."""
    return f"lance-streaming-v{version}"


def latest_version(snapshot: Snapshot) -> int:
    """The newest version of the snapshot's table now."""
    if snapshot.remote is not None:
        return snapshot.remote.latest()
    if snapshot.connection_factory is not None and snapshot.table_name is not None:
        _mark_used()
        return int(snapshot.connection_factory(snapshot.table_name).to_lance().version)
    return int(_open_dataset(snapshot.uri, None, snapshot.storage_options).version)


def protect(snapshot: Snapshot) -> str:
    """Tag the snapshot's version so ``cleanup_old_versions`` keeps it; idempotent."""
    dataset = open_snapshot(snapshot)
    name = tag_name(snapshot.version)
    if name not in dataset.tags.list():
        dataset.tags.create(name, snapshot.version)
    return name


def release(snapshot: Snapshot) -> bool:
    """Delete the snapshot's protecting tag; False when there was none."""
    dataset = open_snapshot(snapshot)
    name = tag_name(snapshot.version)
    if name not in dataset.tags.list():
        return False
    dataset.tags.delete(name)
    return True
