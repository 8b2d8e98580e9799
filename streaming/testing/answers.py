"""What the LanceDB server stand-in answers, from the real Lance tables of its folder.

Counts, versions, schemas, filters and takes are answered by Lance from the real table
through its own engine (a take is Lance's scanner with the take filter, as in
lancedb), so they are what a server would answer, and cost what it would, not canned.
``server`` turns them into HTTP answers; this module knows nothing of HTTP.
"""

from __future__ import annotations

import os
import re
import threading
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = ["TAKE", "Tables", "answer_query", "arrow_file", "describe", "tag_list", "version_list"]

TAKE = re.compile(r"^\s*_row(?:offset|id)\s+IN\s*\(([^)]*)\)\s*$", re.IGNORECASE)
"""A take's filter: ``_rowoffset IN (...)`` or ``_rowid IN (...)``."""
_MAX_K = 1 << 62


class Tables:
    """The Lance datasets under ``root``, opened once per (name, version)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._lock = threading.Lock()
        self._open: dict[tuple[str, int | None], Any] = {}
        self._addresses: dict[tuple[str, int], np.ndarray] = {}
        self._seen: dict[str, int] = {}
        self.reversed_scans = False

    def dataset(self, name: str, version: int | None) -> Any:
        """The dataset of table ``name`` at ``version`` (latest when None); KeyError when missing."""
        import lance

        path = os.path.join(self.root, f"{name}.lance")
        if not os.path.isdir(path):
            raise KeyError(f"table {name} not found")
        if version is None:
            return lance.dataset(path)  # the latest, checked anew each time
        versions = os.stat(
            os.path.join(path, "_versions")
        ).st_mtime_ns  # changes when one is added or cleaned up
        with self._lock:
            if self._seen.get(name) != versions:  # forget handles of versions that may be gone
                self._open = {key: handle for key, handle in self._open.items() if key[0] != name}
                self._seen[name] = versions
            if (name, version) not in self._open:
                try:
                    self._open[(name, version)] = lance.dataset(path, version=version)
                except ValueError:
                    raise KeyError(f"version {version} of table {name} not found") from None
            return self._open[(name, version)]

    def row_offsets(self, name: str, dataset: Any, addresses: np.ndarray) -> np.ndarray:
        """Live-row offsets (positions in storage order) of rows at ``addresses``."""
        key = (name, int(dataset.version))
        with self._lock:
            if key not in self._addresses:
                every = dataset.to_table(columns=[], with_row_address=True).column("_rowaddr").to_numpy()
                order = np.argsort(every, kind="stable")
                self._addresses[key] = np.stack([every[order], order.astype(np.uint64)])
            ordered, order = self._addresses[key]
        return np.asarray(order[np.searchsorted(ordered, addresses)], dtype=np.uint64)


def arrow_file(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def answer_query(tables: Tables, name: str, body: dict[str, Any]) -> pa.Table:
    """The rows a ``query`` body asks for, from the real table, through Lance's own engine.

    A take (``_rowoffset IN (...)``, ``_rowid IN (...)``) is Lance's scanner with that
    filter, as lancedb's engine runs it: Lance turns it into a take by offset or by
    row id (its cost is Lance's), answers in row-id order and leaves out what does not
    exist (an offset past the end, a deleted id) without an error.
    """
    dataset = tables.dataset(name, body.get("version"))
    wanted = body.get("columns")
    names = list(wanted) if isinstance(wanted, list) else list(dataset.schema.names)
    plain = [column for column in names if column not in ("_rowoffset", "_rowid")]
    predicate = body.get("filter")
    with_ids = bool(body.get("with_row_id")) or "_rowid" in names
    with_offsets = "_rowoffset" in names
    take = TAKE.match(predicate or "")
    if take is not None:
        table = dataset.to_table(columns=plain, filter=predicate, with_row_id=with_ids)
        if with_offsets:  # only a take by offsets names them; answered ascending, those that exist
            asked = sorted({int(value) for value in re.findall(r"\d+", take.group(1))})
            live = dataset.count_rows()
            table = table.append_column("_rowoffset", pa.array([o for o in asked if o < live], pa.uint64()))
        return _order(table, names, with_ids)
    limit = min(int(body.get("k") or _MAX_K), _MAX_K)
    reverse = tables.reversed_scans  # a server whose scans come in another order than storage
    table = dataset.to_table(
        columns=plain,
        filter=predicate,
        offset=None if reverse else body.get("offset"),
        limit=None if reverse else limit,
        with_row_id=with_ids,
        with_row_address=with_offsets,
    )
    if reverse:
        start = int(body.get("offset") or 0)
        table = table.take(pa.array(np.arange(table.num_rows)[::-1])).slice(start, limit)
    if with_offsets:
        addresses = table.column("_rowaddr").to_numpy()
        table = table.drop_columns(["_rowaddr"])
        table = table.append_column("_rowoffset", pa.array(tables.row_offsets(name, dataset, addresses)))
    return _order(table, names, with_ids)


def _order(table: pa.Table, names: list[str], with_ids: bool) -> pa.Table:
    """``table`` with ``_rowid`` where the client asked for it (last when it did not name it)."""
    if with_ids and "_rowid" not in names:
        names = [*names, "_rowid"]
    return table.select([name for name in names if name in table.column_names])


def describe(dataset: Any) -> dict[str, Any]:
    """A ``describe`` answer: the version and its schema as lancedb's client reads them."""
    from lance.schema import schema_to_json

    return {"version": int(dataset.version), "schema": schema_to_json(dataset.schema)}


def version_list(dataset: Any) -> dict[str, Any]:
    """A ``version/list`` answer: every version of the table and when it was written."""
    versions = [
        {"version": int(entry["version"]), "timestamp": entry["timestamp"].isoformat() + "Z", "metadata": {}}
        for entry in dataset.versions()
    ]
    return {"versions": versions}


def tag_list(dataset: Any) -> dict[str, Any]:
    """A ``tags/list`` answer: tag -> its version and manifest size."""
    found = dataset.tags.list()
    return {k: {"version": v["version"], "manifestSize": v["manifest_size"]} for k, v in found.items()}
