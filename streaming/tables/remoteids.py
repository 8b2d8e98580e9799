"""The live row ids of a remote snapshot, learned one virtual fragment at a time.

A LanceDB server takes rows by offset (``take_offsets``) or by row id
(``take_row_ids``). By offset, Lance's engine walks a fragment with deleted rows
once per offset asked: 8,192 offsets of a table with 1% of its rows deleted cost
seconds, not milliseconds. By row id the cost does not depend on deletions. So
``tables/remote.py`` plans by offset (the plan never changes) and takes by row id:
the first read of a virtual fragment asks the server once for the row ids of its
offsets (one narrow query, ``_rowid`` of ``FRAGMENT_ROWS`` rows from the
fragment's first offset, 8 bytes a row on the wire), and keeps them as runs of
consecutive ids (12 bytes a run: one run for a fragment without deletions, about one
per deleted row otherwise). Start-up reads none; an epoch reads each fragment's ids
once per process that reads the fragment, and never more than
``BUDGET_BYTES`` of runs stay in memory (the least recently used go first).

Row ids are row addresses (``fragment_id << 32 | physical offset``) unless the
table uses stable row ids; either way they are what ``take_row_ids`` takes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

import numpy as np

__all__ = ["BUDGET_BYTES", "RowIdCache", "RowIds"]

BUDGET_BYTES = 32 << 20
"""The most bytes of runs a process keeps per snapshot (a virtual fragment's are 12 bytes a run)."""


class RowIds:
    """The row ids of one virtual fragment's offsets 0 .. n-1, as runs of consecutive ids."""

    def __init__(self, ids: np.ndarray) -> None:
        ids = np.asarray(ids, dtype=np.uint64)
        breaks = np.flatnonzero(np.diff(ids) != np.uint64(1)) + 1
        self.starts = np.concatenate([[0], breaks]).astype(np.int32)
        self.firsts = ids[self.starts]
        self.rows = len(ids)

    @property
    def nbytes(self) -> int:
        """Bytes the runs take."""
        return int(self.starts.nbytes + self.firsts.nbytes)

    def of(self, offsets: np.ndarray) -> np.ndarray:
        """The row ids at ``offsets`` (in this fragment), in the same order."""
        offsets = np.asarray(offsets, dtype=np.int64)
        run = np.searchsorted(self.starts, offsets, side="right") - 1
        result: np.ndarray = self.firsts[run] + (offsets - self.starts[run]).astype(np.uint64)
        return result


class RowIdCache:
    """This process's ``RowIds`` of one snapshot, fetched on first use, within a byte budget.

    ``fetch(fragment_id)`` returns a fragment's row ids (one request); threads that
    need the same fragment at once wait for one fetch instead of each sending one.
    """

    def __init__(self, fetch: Callable[[int], np.ndarray], *, budget_bytes: int = BUDGET_BYTES) -> None:
        self._fetch = fetch
        self._budget = budget_bytes
        self._lock = threading.Lock()
        self._kept: OrderedDict[int, RowIds] = OrderedDict()
        self._fetching: dict[int, threading.Lock] = {}
        self.fetches = 0

    def ids(self, fragment_id: int, offsets: np.ndarray) -> np.ndarray:
        """The row ids at ``offsets`` of virtual fragment ``fragment_id``."""
        return self._runs(fragment_id).of(offsets)

    def _runs(self, fragment_id: int) -> RowIds:
        with self._lock:
            found = self._kept.get(fragment_id)
            if found is not None:
                self._kept.move_to_end(fragment_id)
                return found
            gate = self._fetching.setdefault(fragment_id, threading.Lock())
        with gate:
            with self._lock:
                found = self._kept.get(fragment_id)
            if found is None:
                found = RowIds(self._fetch(fragment_id))
                self._keep(fragment_id, found)
            return found

    def _keep(self, fragment_id: int, runs: RowIds) -> None:
        with self._lock:
            self.fetches += 1
            self._kept[fragment_id] = runs
            self._fetching.pop(fragment_id, None)
            total = sum(kept.nbytes for kept in self._kept.values())
            while total > self._budget and len(self._kept) > 1:
                _, dropped = self._kept.popitem(last=False)
                total -= dropped.nbytes
