"""``BlobHandle``: one blob of a pinned snapshot, opened where it is used; and the Arrow
type of a blob column read as handles (``HandleType``), whose values are ``BlobHandle``s.

A handle is small and picklable (no Lance handle, no credentials); ``remember`` keeps
the snapshot a handle was read from, so that ``open()`` in the same process opens it
with the snapshot's storage options.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ..tables import source

__all__ = ["BlobHandle", "HandleType", "remember"]

_HANDLE_EXTENSION = "lance-streaming.blob-handle"
_SNAPSHOTS: dict[tuple[str, int], source.Snapshot] = {}


@dataclass(frozen=True)
class BlobHandle:
    """One blob of a pinned snapshot: opens a seekable file-like object where it is used.

    Picklable and small (no Lance handle, no credentials): a transform in a worker
    process opens it there. ``open()`` reads nothing of the blob itself; each
    ``read``/``seek`` of the returned ``lance.BlobFile`` reads only what it asks for
    (plus a read-ahead of at most ``buffer_size`` bytes), so seeking to a frame of a
    long video never reads the whole file.

    Attributes:
        uri: The table's URI.
        version: The pinned version the blob belongs to.
        column: The blob column.
        index: The row's index among the snapshot's live rows.
        size: The blob's length in bytes.
    """

    uri: str
    version: int
    column: str
    index: int
    size: int

    def open(self, *, buffer_size: int = 512 * 1024) -> Any:
        """A ``lance.BlobFile`` (``read``, ``seek``, ``tell``, ``size``; a context manager).

        Args:
            buffer_size: Sequential read-ahead in bytes (0: none).
        """
        source.check_fork_safety()
        snapshot = _SNAPSHOTS.get((self.uri, self.version)) or source.Snapshot(self.uri, self.version)
        dataset = source.open_snapshot(snapshot)
        return dataset.take_blobs(self.column, indices=[self.index], buffer_size=buffer_size)[0]

    def read(self) -> bytes:
        """The whole blob."""
        with self.open() as blob:
            data: bytes = blob.read()
            return data


class _HandleScalar(pa.ExtensionScalar):  # type: ignore[misc]
    def as_py(self, **_: Any) -> BlobHandle | None:
        value = self.value
        if value is None:
            return None
        uri, version, column = self.type.where
        return BlobHandle(uri, version, column, int(value["index"].as_py()), int(value["size"].as_py()))


class HandleType(pa.ExtensionType):  # type: ignore[misc]
    """The Arrow type of a blob column read as handles: each value's ``as_py()`` is a
    ``BlobHandle`` (what a ``transform`` gets from ``batch.column(name).to_pylist()``)."""

    def __init__(self, uri: str, version: int, column: str) -> None:
        self.where = (uri, int(version), column)
        storage = pa.struct([("index", pa.uint64()), ("size", pa.uint64())])
        super().__init__(storage, _HANDLE_EXTENSION)

    def __arrow_ext_serialize__(self) -> bytes:
        return json.dumps(self.where).encode()

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type: pa.DataType, serialized: bytes) -> HandleType:
        uri, version, column = json.loads(serialized)
        return cls(uri, version, column)

    def __arrow_ext_scalar_class__(self) -> type[pa.ExtensionScalar]:
        return _HandleScalar

    def __reduce__(self) -> tuple[Any, tuple[str, int, str]]:
        return (HandleType, self.where)


with contextlib.suppress(pa.ArrowKeyError):  # registered already in this process
    pa.register_extension_type(HandleType("", 0, ""))


def remember(snapshot: source.Snapshot, *, replace: bool) -> None:
    """Open this process's handles of ``snapshot``'s URI and version with ``snapshot``
    itself (its storage options), not a bare one of its URI and version; ``replace``: in
    place of one remembered before."""
    key = (snapshot.uri, snapshot.version)
    if replace or key not in _SNAPSHOTS:
        _SNAPSHOTS[key] = snapshot
