"""Workers write their shares of a batch straight into one shared-memory buffer per batch.

With the default collate function and no ``transform`` (columnar batches), a
loader iterator's workers share one segment, the *pool*, which the trainer makes
when the iterator starts (``transfer.Channel.new``): a header of one tag per
buffer, then ``buffers`` buffers of ``capacity`` bytes. Batch ``i`` of an
iterator goes to buffer ``i % buffers``. Each numeric column of a batch has its
own region of the buffer (column j of n at ``j * capacity // n``), so a worker
computes where every column lies from the batch size and the column's dtype and
shape alone, and gathers its rows straight into their slots there. The message
carries only a ``Place`` (the pool, the batch's number and where each column
lies). The trainer hands the batch out as tensors that are views of the buffer:
it neither copies nor decodes the numeric columns.

The header also holds the one layout the workers may write, adopted by the trainer
from the first whole batch whose shares all computed it (those first batches come
the older way): two workers never write one buffer in different layouts (a column
whose dtype differs between a mixture's sources), so their rows never overlap.

Flow control is the header's tags, written only by the trainer: a worker writes
batch ``i`` into its buffer only when the buffer's tag is ``i``; otherwise its
share goes the older way (``transfer``'s ring, or the pipe) and the trainer
copies it. A worker never waits, so nothing can deadlock. The trainer sets a
buffer's tag to the next batch due there once the batch it held is no longer
referenced: at once when the batch was copied (or dropped), else when the last
tensor (or view of one) of the batch handed out is garbage collected. So a
buffer is never rewritten while a tensor points at it, and a loop that keeps
its batches keeps correct data (its later batches are copied). A persistent
worker's next iterator starts over at batch 0 (``restart``, called by the
trainer after the workers acknowledged the new iteration and before they read).

The segment is unlinked once every worker has mapped it (after the first batch:
each worker maps it before it sends its first share) or when the iterator ends,
whichever comes first. The trainer's mapping lives as long as a tensor of it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import math
import mmap
import os
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import Any

import numpy as np

from .. import _compat

__all__ = ["Field", "Place", "Pool", "Writer", "find", "key", "layout", "lookup", "writer"]

_ALIGN = 64

CAPACITY = 8 << 20
"""Bytes of a buffer (the pool's pages are reserved only as batches are written)."""

MAX_POOL_BYTES = 128 << 20
"""Most bytes of buffers a pool writes to (counted as if columns lay end to end from the
buffer's start): large batches use fewer of its buffers."""

Field = tuple[str, str, tuple[int, ...], int]
"""(column, dtype, shape of the whole batch's column, offset in its buffer)."""


@dataclass(frozen=True)
class Place:
    """Share ``sequence`` of a pool: the columns this share wrote there (``fields``;
    empty when it wrote nothing, and the batch then travels the older way)."""

    pool: str
    sequence: int
    fields: tuple[Field, ...] = ()
    written: bool = False


@functools.lru_cache(maxsize=64)
def _layout(
    size: int, names: tuple[str, ...], specs: tuple[tuple[str, np.dtype, tuple[int, ...]], ...]
) -> tuple[Field, ...]:
    region = CAPACITY // max(1, len(names)) // _ALIGN * _ALIGN
    found = {name: (dtype, row) for name, dtype, row in specs}
    fields = []
    for index, name in enumerate(names):
        spec = found.get(name)
        if spec is None:
            continue
        dtype, row = spec
        shape = (size, *row)
        if dtype.itemsize * math.prod(shape) <= region:
            fields.append((name, dtype.str, shape, index * region))
    return tuple(fields)


def layout(
    size: int, names: Sequence[str], specs: Mapping[str, tuple[np.dtype, tuple[int, ...]]]
) -> tuple[Field, ...]:
    """Where each column of ``specs`` (dtype, shape of a row) lies in a buffer for a batch
    of ``size`` rows: column j of ``names`` in region j. A column larger than its region
    is left out (it travels in the message). The same inputs give the same layout in
    every worker."""
    key = tuple((name, dtype, row) for name, (dtype, row) in specs.items())
    return _layout(size, tuple(names), key)


@functools.lru_cache(maxsize=64)
def _bytes(fields: tuple[Field, ...]) -> int:
    return sum(np.dtype(dtype).itemsize * math.prod(shape) for _, dtype, shape, _ in fields)


@functools.lru_cache(maxsize=64)
def _cuts(fields: tuple[Field, ...]) -> tuple[int, list[tuple[str, np.dtype, int, tuple[int, ...]]]]:
    """The bytes a layout spans, and each column's (name, dtype, offset, shape) in it."""
    cuts = [(name, np.dtype(dtype), offset, shape) for name, dtype, shape, offset in fields]
    end = max(offset + kind.itemsize * math.prod(shape) for _, kind, offset, shape in cuts)
    return end, cuts


def _header(buffers: int) -> int:
    return -(-8 * (buffers + 1) // _ALIGN) * _ALIGN


@functools.lru_cache(maxsize=64)
def key(fields: tuple[Field, ...]) -> int:
    """A layout's number in the pool's header (a stable digest: the same in every process)."""
    digest = hashlib.blake2b(repr(fields).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True) or 1


def _mapping(memory: shared_memory.SharedMemory) -> mmap.mmap:
    """A mapping of ``memory`` that outlives it (``memory`` is closed at once): tensors may
    point into it, and it is unmapped only when the last of them is gone."""
    return mmap.mmap(_compat.shared_memory_fd(memory), memory.size)


class Pool:
    """The trainer's side of a pool: tags the buffers, hands batches out as views."""

    def __init__(self, memory: shared_memory.SharedMemory, *, buffers: int) -> None:
        self.name = memory.name
        self._memory = memory  # closed: kept to unlink the name
        self._map = _mapping(memory)
        memory.close()
        self._buffers = buffers
        self._tags = np.ndarray((buffers,), np.int64, buffer=self._map)
        self._tags[:] = np.arange(buffers)
        self._layout = np.ndarray((1,), np.int64, buffer=self._map, offset=8 * buffers)  # 0: none yet
        self._held = [False] * buffers
        self._watch: dict[int, weakref.ref[np.ndarray]] = {}
        self._next = 0  # the next batch the trainer will take
        self._lock = threading.RLock()  # finalizers run in whatever thread collects
        self._named = True
        self._closed = False

    @classmethod
    def create(cls, name: str, *, buffers: int) -> Pool | None:
        """A new pool (pages reserved by the workers as they write), or ``None`` where
        shared memory cannot hold it."""
        try:
            memory = shared_memory.SharedMemory(name, create=True, size=_header(buffers) + buffers * CAPACITY)
        except OSError:
            return None
        pool = cls(memory, buffers=buffers)
        _POOLS[name] = pool
        return pool

    def _base(self, sequence: int) -> int:
        return _header(self._buffers) + (sequence % self._buffers) * CAPACITY

    def views(self, place: Place) -> dict[str, np.ndarray]:
        """The whole batch's columns that ``place`` wrote, where they lie (copy, then ``settle``)."""
        base = self._base(place.sequence)
        return {
            name: np.ndarray(shape, np.dtype(dtype), buffer=self._map, offset=base + offset)
            for name, dtype, shape, offset in place.fields
        }

    def hold(self, place: Place) -> dict[str, np.ndarray]:
        """The batch's columns as arrays of its buffer, handed out: the buffer is written
        again only once every one of them (and every view of one) is gone."""
        buffer = place.sequence % self._buffers
        end, cuts = _cuts(place.fields)
        whole = np.frombuffer(self._map, np.uint8, count=end, offset=self._base(place.sequence))
        with self._lock:
            self._held[buffer] = True
            self._tags[buffer] = -1
            self._next = max(self._next, place.sequence + 1)
            # called when the last array of the batch goes (a weak reference: no finalizer
            # at exit, and cheaper than weakref.finalize)
            self._watch[buffer] = weakref.ref(whole, functools.partial(self._free, buffer))
        self.unlink()  # every worker sent a share of this batch: each has mapped the pool
        return {
            name: np.ndarray(shape, dtype, buffer=whole, offset=start) for name, dtype, start, shape in cuts
        }

    def adopt(self, fields: tuple[Field, ...]) -> None:
        """Let the workers write batches of this layout (every share of a batch computed
        it). Only the first layout adopted is ever written: two workers never write one
        buffer in different layouts (a column whose dtype differs between a mixture's
        sources), so their rows never overlap."""
        if int(self._layout[0]) == 0:
            self._layout[0] = key(fields)

    def settle(self, sequence: int) -> None:
        """Batch ``sequence`` was taken without holding its buffer (copied, dropped, or
        never written there): its buffer goes to the next batch due there."""
        buffer = sequence % self._buffers
        self.unlink()  # every worker sent a share of this batch: each has mapped the pool
        with self._lock:
            self._next = max(self._next, sequence + 1)
            if not self._held[buffer] and int(self._tags[buffer]) == sequence:
                self._tags[buffer] = sequence + self._buffers

    def _free(self, buffer: int, _: Any = None) -> None:
        with self._lock:
            self._watch.pop(buffer, None)
            self._held[buffer] = False
            if not self._closed:
                self._tags[buffer] = self._next + (buffer - self._next) % self._buffers

    def restart(self) -> None:
        """A persistent worker's next iterator, before its workers read: batches start at 0
        again; the buffers of batches still referenced stay theirs."""
        with self._lock:
            self._next = 0
            for buffer, held in enumerate(self._held):
                self._tags[buffer] = -1 if held else buffer

    def unlink(self) -> None:
        """Remove the pool's name (every worker has mapped it, or none will)."""
        if not self._named:
            return
        with self._lock:
            if self._named:
                self._named = False
                with contextlib.suppress(FileNotFoundError):
                    self._memory.unlink()

    def close(self) -> None:
        """The iterator (or the kept workers) ended: no more batches; the mapping stays
        while tensors of it live."""
        self.unlink()
        with self._lock:
            self._closed = True
        _POOLS.pop(self.name, None)


_POOLS: dict[str, Pool] = {}


def find(name: str) -> Pool | None:
    """In the trainer: pool ``name`` while its iterator (or kept workers) lives."""
    return _POOLS.get(name)


def lookup(name: str) -> Pool:
    """In the trainer: the pool of a share's ``Place``."""
    pool = _POOLS.get(name)
    if pool is None:
        raise RuntimeError(
            f"a worker's batch lies in shared memory {name!r}, which this loader already released"
        )
    return pool


class Writer:
    """A worker's side of a pool: numbers its shares and finds where to write them."""

    def __init__(self, memory: shared_memory.SharedMemory, *, buffers: int) -> None:
        self.name = memory.name
        self._fd = os.dup(_compat.shared_memory_fd(memory))  # to reserve pages
        self._map = _mapping(memory)
        memory.close()
        self._buffers = buffers
        self._tags = np.ndarray((buffers,), np.int64, buffer=self._map)
        self._layout = np.ndarray((1,), np.int64, buffer=self._map, offset=8 * buffers)
        self._reserved: list[tuple[Field, ...]] = [()] * buffers
        self._views: dict[tuple[int, tuple[Field, ...]], dict[str, np.ndarray]] = {}
        self.sequence = -1

    def next(self, *, first: bool) -> int:
        """The number of the share being made (0 for an iterator's first)."""
        self.sequence = 0 if first else self.sequence + 1
        return self.sequence

    def targets(self, fields: tuple[Field, ...]) -> dict[str, np.ndarray] | None:
        """The whole batch's columns of ``fields`` in this share's buffer, to write this
        share's rows into; ``None`` (write nothing) when the buffer is not this batch's or
        the trainer has not adopted this layout."""
        buffer = self.sequence % self._buffers
        if int(self._tags[buffer]) != self.sequence or int(self._layout[0]) != key(fields):
            return None
        if buffer >= max(2, MAX_POOL_BYTES // _bytes(fields)):
            return None
        base = _header(self._buffers) + buffer * CAPACITY
        if not self._reserve(buffer, base, fields):
            return None
        found = self._views.get((buffer, fields))
        if found is None:  # the same views serve every batch of this buffer and layout
            found = {
                name: np.ndarray(shape, np.dtype(dtype), buffer=self._map, offset=base + offset)
                for name, dtype, shape, offset in fields
            }
            self._views[buffer, fields] = found
        return found

    def _reserve(self, buffer: int, base: int, fields: tuple[Field, ...]) -> bool:
        """Reserve the pages of each column's region once (a full ``/dev/shm`` then fails
        here, not as a SIGBUS on a later write)."""
        if self._reserved[buffer] == fields:
            return True
        try:
            for _, dtype, shape, offset in fields:
                os.posix_fallocate(self._fd, base + offset, np.dtype(dtype).itemsize * math.prod(shape))
        except OSError:
            return False
        self._reserved[buffer] = fields
        return True


_WRITERS: dict[str, Writer | None] = {}


def writer(name: str, *, buffers: int) -> Writer | None:
    """In a worker: its writer of pool ``name`` (mapped on first use; ``None`` if it cannot be)."""
    if name not in _WRITERS:
        found: Writer | None = None
        if hasattr(os, "posix_fallocate"):
            try:
                found = Writer(shared_memory.SharedMemory(name=name), buffers=buffers)
            except OSError:
                found = None
        _WRITERS[name] = found
    return _WRITERS[name]
