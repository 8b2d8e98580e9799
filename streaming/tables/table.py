"""The table the reader reads: one protocol, ``Table``, and one class per kind of table.

Three kinds of table are read, each by one class that implements ``Table``:

- ``LanceTable`` (``tables/lancetable.py``): a Lance table on local disk (kind
  ``"local"``) or on object storage, in a *bucket* (kind ``"bucket"``: ``s3://``,
  ``gs://``, ``az://``, ...);
- ``RemoteSnapshot`` (``tables/remote.py``): a table of a LanceDB server (kind
  ``"remote"``, ``db://``; "remote" names a LanceDB server and nothing else), its
  rows presented as virtual fragments of row offsets;
- ``CachedTable`` (``tables/cached.py``): a bucket table read through the local cache
  (``cache_dir=``): the same rows, from local copies of its files once they are there.

``tables/opening.py`` chooses the class once, where it opens the user's table (or a
``Snapshot`` in another process); ``Table.through_cache`` puts the cache in front of
a table that can have one. Every other module asks the ``Table`` it is given, never
which class it is, what its URI looks like or which client made it.

The members are the part of ``lance.LanceDataset`` the reader uses (so the read
functions of ``tables/source.py`` take a ``lance.LanceDataset`` as it is, too), and
what tells the kinds apart: ``kind``, ``reads_blobs``, ``through_cache`` and
``read_requests``.

Pure: imports neither Lance nor torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..core.uris import Kind

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from ..core.cachesettings import CacheSettings
    from ..core.stats import Counters

__all__ = ["PLACES", "Fragment", "Kind", "Table"]

PLACES: dict[Kind, str] = {
    "local": "on local disk",
    "bucket": "on object storage",
    "remote": "on a LanceDB server",
}
"""Where a table of each kind is, as messages say it."""


class Fragment(Protocol):
    """One fragment of a ``Table``: a Lance fragment, or a LanceDB server's virtual one."""

    @property
    def fragment_id(self) -> int:
        """Its id (not its index in ``get_fragments``)."""

    @property
    def physical_rows(self) -> int:
        """Its rows, deleted ones included."""

    @property
    def num_deletions(self) -> int:
        """Its deleted rows."""

    def take(self, offsets: np.ndarray, *, columns: Sequence[str]) -> pa.Table:
        """The rows at live-row ``offsets``, in that order."""

    def data_files(self) -> Sequence[Any]:
        """Its data files (each with a ``file_size_bytes``, ``None`` when unknown)."""


class Table(Protocol):
    """One version of a table, opened by this process: everything ``samples/`` reads of it.

    Never travels between processes (a ``Snapshot`` does, and each process opens its
    own ``Table`` from it). Every read answers for the pinned ``version`` only.
    """

    @property
    def uri(self) -> str:
        """The URI a state records for the table (no secret in it)."""

    @property
    def version(self) -> int:
        """The pinned version."""

    @property
    def kind(self) -> Kind:
        """Where the table lives (``PLACES`` says it in words)."""

    @property
    def schema(self) -> pa.Schema:
        """Its columns."""

    @property
    def tags(self) -> Any:
        """Its version tags (``list``, ``create``, ``delete``)."""

    @property
    def reads_blobs(self) -> bool:
        """Whether ``read_blobs`` and ``take_blobs`` can read its blob columns."""

    def get_fragments(self) -> Sequence[Fragment]:
        """Its fragments, in storage order."""

    def get_fragment(self, fragment_id: int) -> Fragment:
        """The fragment ``fragment_id``."""

    def scanner(self, *, filter: str, columns: Sequence[str], with_row_address: bool) -> Any:  # noqa: A002
        """The rows matching ``filter``; its ``to_table()`` has their ``_rowaddr``."""

    def to_table(
        self,
        *,
        columns: Sequence[str],
        filter: str | None = None,  # noqa: A002
        limit: int | None = None,
    ) -> pa.Table:
        """Up to ``limit`` rows of ``columns`` that match ``filter``, in storage order."""

    def read_blobs(self, column: str, *, indices: Any, preserve_order: bool) -> Any:
        """``(index, bytes)`` of the blobs at live-row ``indices`` (one batched read)."""

    def take_blobs(self, column: str, *, indices: Any, buffer_size: int | None = None) -> Any:
        """Seekable file-like objects of the blobs at live-row ``indices``."""

    def through_cache(self, settings: CacheSettings | None, counters: Counters) -> Table:
        """The table to read rows through: its local cache under ``settings`` when it can
        have one (``tables/cached.py``), else itself."""

    def read_requests(self) -> int | None:
        """Read requests this process's handle has sent so far (``None``: not counted)."""
