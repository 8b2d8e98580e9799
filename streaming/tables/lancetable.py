"""A Lance table on local disk or in a bucket, as a ``Table`` (``tables/table.py``).

``LanceTable`` holds this process's ``lance.LanceDataset`` at the pinned version and
answers what the reader asks of it, by asking Lance. Its kind comes from the URI's
scheme (``core/uris.py`` ``kind_of``), once, when ``tables/opening.py`` opens it:
``"local"`` for a path, ``file://`` or ``memory://``, ``"bucket"`` for any object store
(``s3://``, ``gs://``, ``az://``, ...), which is the kind the local cache serves
(``through_cache``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..core.uris import kind_of

if TYPE_CHECKING:
    import pyarrow as pa

    from ..core.cachesettings import CacheSettings
    from ..core.stats import Counters
    from .table import Kind, Table

__all__ = ["LanceTable", "chosen_options", "handle_options"]

_LANCE_SET = ("user_agent",)
"""Options Lance adds by itself when it opens a dataset; not the user's to pass on."""


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


def chosen_options(given: Mapping[str, str] | None, dataset: Any) -> Mapping[str, str] | None:
    """The storage options a table is read with: the user's ``storage_options=`` when given
    (they win), else those its handle ``dataset`` was opened with (``handle_options``).

    The one rule of their precedence: the snapshot every process opens, this process's
    ``LanceTable`` and the cache's downloads all take what it returns.
    """
    return given if given is not None else handle_options(dataset)


class LanceTable:
    """One version of a Lance table (local or in a bucket), opened by this process."""

    reads_blobs = True

    def __init__(self, dataset: Any, *, storage_options: Mapping[str, str] | None = None) -> None:
        self.dataset = dataset
        """This process's ``lance.LanceDataset`` at the pinned version."""
        self.uri = str(dataset.uri)
        self.version = int(dataset.version)
        self.kind: Kind = "local" if kind_of(self.uri) == "local" else "bucket"
        self.storage_options = chosen_options(storage_options, dataset)
        """The options it is read with (credentials; the cache's downloads use them)."""

    def __repr__(self) -> str:
        return f"LanceTable(uri={self.uri!r}, version={self.version}, kind={self.kind!r})"

    @property
    def schema(self) -> pa.Schema:
        """Its columns."""
        return self.dataset.schema

    @property
    def tags(self) -> Any:
        """Lance's tags of the table."""
        return self.dataset.tags

    def get_fragments(self) -> Sequence[Any]:
        """Lance's fragments, in storage order."""
        return self.dataset.get_fragments()

    def get_fragment(self, fragment_id: int) -> Any:
        """Lance's fragment ``fragment_id``."""
        return self.dataset.get_fragment(fragment_id)

    def scanner(self, *, filter: str, columns: Sequence[str], with_row_address: bool) -> Any:  # noqa: A002
        """Lance's scanner of the rows matching ``filter``."""
        return self.dataset.scanner(filter=filter, columns=list(columns), with_row_address=with_row_address)

    def to_table(
        self,
        *,
        columns: Sequence[str],
        filter: str | None = None,  # noqa: A002
        limit: int | None = None,
    ) -> pa.Table:
        """Up to ``limit`` rows of ``columns`` matching ``filter``, in storage order."""
        return self.dataset.to_table(columns=list(columns), filter=filter, limit=limit)

    def read_blobs(self, column: str, *, indices: Any, preserve_order: bool) -> Any:
        """Lance's batched read of the blobs at ``indices``."""
        return self.dataset.read_blobs(column, indices=indices, preserve_order=preserve_order)

    def take_blobs(self, column: str, *, indices: Any, buffer_size: int | None = None) -> Any:
        """Lance's ``BlobFile``s of the blobs at ``indices``."""
        if buffer_size is None:
            return self.dataset.take_blobs(column, indices=indices)
        return self.dataset.take_blobs(column, indices=indices, buffer_size=buffer_size)

    def through_cache(self, settings: CacheSettings | None, counters: Counters) -> Table:
        """Itself on local disk; in a bucket, through the local cache when ``settings`` names one."""
        if settings is None or self.kind != "bucket":
            return self
        from . import cached  # not at import: tables/cached.py reads a LanceTable

        return cached.reading(self, settings, counters)

    def read_requests(self) -> int | None:
        """Lance's count of this handle's read requests (``None`` for a Lance that counts none)."""
        if not hasattr(self.dataset, "io_stats_snapshot"):
            return None
        return int(self.dataset.io_stats_snapshot().read_iops)
