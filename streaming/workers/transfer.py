"""Numeric worker batches through a ring of shared-memory slots, not the result pipe.

A DataLoader worker's result travels pickled through a pipe: the worker copies
each array into the pickle, the pipe moves it in 64 KiB pieces, and the trainer
copies it out again, with a context switch per piece. Here each worker instead
keeps one shared-memory segment cut into equal slots, used in turn; a batch's
arrays are written into the next slot and only a small ``Parcel`` (the segment
name, the batch's sequence number and where each array lies) goes through the
pipe. The trainer copies the arrays out when the batch is handed over, so the
tensors it gets own their memory and never change under it.

Flow control: the segment starts with a counter of the parcels the trainer has
copied out, written by the trainer. A worker fills the slot of parcel ``i`` only
when parcel ``i - slots`` (the slot's last user) has been copied out; otherwise,
as when a batch does not fit its slot, the batch goes through the pipe as
before. A worker never waits, so the ring cannot deadlock and cannot overwrite
a batch the trainer has not copied yet, whatever the DataLoader's scheduling.

Segments are named after the trainer's process, the iterator and the worker
(``Channel``). The trainer unlinks a segment the first time it maps it (the
memory then lives until both processes unmap it), and when the iterator ends it
unlinks any segment of its workers it never received a batch from. A segment
that cannot be made or reserved (a small ``/dev/shm``, a stale name) leaves that
worker on the pipe, which is slower but carries the same data.
"""

from __future__ import annotations

import itertools
import math
import os
import secrets
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import TypeVar

import numpy as np

from .. import _compat

__all__ = [
    "Channel",
    "Layout",
    "Parcel",
    "Ring",
    "available",
    "claim",
    "done",
    "receive",
    "received",
    "release",
    "restart",
    "send",
    "views",
]

_ALIGN = 64
"""Bytes each array's offset is rounded up to; also the size of the segment's header."""

MAX_SLOT_BYTES = 8 << 20
"""Batches larger than this travel the way torch sends tensors, not through a slot."""

MAX_RING_BYTES = 64 << 20
"""A worker's ring has fewer slots (at least 2) where ``slots`` of them would pass this."""

VARYING_RING_BYTES = 16 << 20
"""The same bound for a ring of shares whose size varies (packed strings and binaries):
their slots are larger than the first share, and their pages are held by the worker and
the trainer alike, so fewer of them are kept; a share finding none free takes the pipe."""

VARYING_SPARE = 1.5
"""A ring of varying shares has slots this many times the first share's bytes."""

_ITERATORS = itertools.count()


def available() -> bool:
    """Whether slots can be used here: POSIX shared memory, which outlives its name.

    On Windows a segment disappears with the last handle, so a worker that ends
    before the trainer maps its segment would take its batches with it.
    """
    return os.name == "posix"


def _aligned(size: int) -> int:
    return -(-size // _ALIGN) * _ALIGN


Layout = tuple[np.dtype, tuple[int, ...]]
"""An array's dtype and shape, before it exists."""

Opened = TypeVar("Opened")

Claimed = tuple["Parcel", dict[str, np.ndarray]]
"""A claimed slot: the parcel that will describe its arrays, and the arrays to fill."""


def _layout_bytes(layout: Mapping[str, Layout]) -> int:
    return sum(_aligned(np.dtype(dtype).itemsize * math.prod(shape)) for dtype, shape in layout.values())


@dataclass(frozen=True)
class Channel:
    """The segments of one loader iterator's workers: picklable, sent to each worker.

    ``slots`` is how many batches of a worker can wait in its ring; two more
    than the DataLoader's ``prefetch_factor`` keep the pipe out of the way (a
    worker has at most that many tasks outstanding, plus the batch being handed
    over).
    """

    prefix: str
    slots: int

    @classmethod
    def new(cls, *, slots: int) -> Channel:
        """A channel with names no other iterator of a live process uses."""
        # the random part keeps names apart where containers share /dev/shm but not pids
        return cls(f"lsr{os.getpid()}_{secrets.token_hex(4)}_{next(_ITERATORS)}_", slots)

    def segment(self, worker: int) -> str:
        """The shared-memory name of ``worker``'s ring."""
        return f"{self.prefix}{worker}"


@dataclass(frozen=True)
class Parcel:
    """Parcel ``sequence`` of a segment: (name, dtype, shape, offset) of each array."""

    segment: str
    sequence: int
    fields: tuple[tuple[str, str, tuple[int, ...], int], ...]


def _free_shared_memory() -> int:
    """Bytes free in ``/dev/shm`` (unbounded where there is no such folder, as on macOS)."""
    try:
        stats = os.statvfs("/dev/shm")  # noqa: S108 (reads its free space only)
    except OSError:
        return 1 << 62
    return stats.f_bavail * stats.f_frsize


def _counter(memory: shared_memory.SharedMemory) -> np.ndarray:
    """The segment's header: parcels the trainer has copied out."""
    return np.ndarray((1,), np.int64, buffer=memory.buf)


class Ring:
    """A worker's segment: a header, then ``slots`` equal slots filled in turn."""

    def __init__(self, memory: shared_memory.SharedMemory, *, slots: int, slot_bytes: int) -> None:
        self._memory = memory
        self._copied = _counter(memory)
        self._slots = slots
        self._slot_bytes = slot_bytes
        self._sent = 0

    @classmethod
    def create(
        cls, name: str, *, slots: int, slot_bytes: int, ring_bytes: int = MAX_RING_BYTES
    ) -> Ring | None:
        """A new ring, or ``None`` when shared memory cannot hold it or should not.

        A ring takes at most a quarter of the space free in ``/dev/shm``, which
        others need too (NCCL, torch's tensor sharing), and has fewer slots (at least
        2) where ``slots`` of them would pass ``ring_bytes``.
        """
        slots = max(2, min(slots, ring_bytes // slot_bytes))
        size = _ALIGN + slots * slot_bytes
        if size > _free_shared_memory() // 4:
            return None
        try:
            memory = shared_memory.SharedMemory(name, create=True, size=size)
        except OSError:
            return None
        reserve = getattr(os, "posix_fallocate", None)  # Linux; macOS shm has no such limit
        try:
            # Reserve the pages now: a full /dev/shm then fails here, not as a
            # SIGBUS on a later write.
            if reserve is not None:
                reserve(_compat.shared_memory_fd(memory), 0, size)
        except OSError:
            memory.close()
            memory.unlink()
            return None
        return cls(memory, slots=slots, slot_bytes=slot_bytes)

    def put(self, arrays: Mapping[str, np.ndarray]) -> Parcel | None:
        """Copy ``arrays`` into the next slot; ``None`` (nothing written) if it is not free or too small."""
        claimed = self.claim({name: (array.dtype, array.shape) for name, array in arrays.items()})
        if claimed is None:
            return None
        parcel, targets = claimed
        for name, array in arrays.items():
            np.copyto(targets[name], array, casting="no")
        return parcel

    def claim(self, layout: Mapping[str, Layout]) -> Claimed | None:
        """The next slot, for arrays of ``layout`` (name -> dtype and shape): the parcel
        that will describe them and the arrays themselves, in the slot, to be filled in
        before the parcel is sent. ``None`` (nothing claimed) if it is not free or too small."""
        if _layout_bytes(layout) > self._slot_bytes or self._sent - int(self._copied[0]) >= self._slots:
            return None
        sequence = self._sent
        self._sent += 1
        offset = _ALIGN + (sequence % self._slots) * self._slot_bytes
        fields, targets = [], {}
        for name, (dtype, shape) in layout.items():
            target = np.ndarray(shape, dtype, buffer=self._memory.buf, offset=offset)
            targets[name] = target
            fields.append((name, target.dtype.str, tuple(target.shape), offset))
            offset += _aligned(target.nbytes)
        return Parcel(self._memory.name, sequence, tuple(fields)), targets

    def restart(self) -> None:
        """Start counting parcels again (a persistent worker's next iterator): the trainer
        discarded the parcels of the last one it did not copy out, so every slot is free."""
        self._sent = 0
        self._copied[0] = 0

    def close(self) -> None:
        """Unmap the segment in this process (the trainer unlinks it)."""
        del self._copied
        self._memory.close()


_RINGS: dict[str, Ring | None] = {}


def send(channel: Channel, worker: int, arrays: Mapping[str, np.ndarray]) -> Parcel | None:
    """In worker ``worker``: put ``arrays`` in its ring of ``channel`` (made on first use).

    The ring's slots are sized for the first batch (later batches of a loader are
    never larger; one that is goes through the pipe). ``None``: use the pipe.
    """
    ring = _ring(channel, worker, {name: (array.dtype, array.shape) for name, array in arrays.items()})
    return None if ring is None else ring.put(arrays)


def claim(
    channel: Channel, worker: int, layout: Mapping[str, Layout], *, varying: bool = False
) -> Claimed | None:
    """In worker ``worker``: the next slot of its ring of ``channel`` (made on first use)
    for arrays of ``layout``, to be written where they lie (``Ring.claim``); ``None``:
    no slot, make the arrays elsewhere and use the pipe. ``varying``: later shares may
    be larger than this one (packed strings and binaries)."""
    ring = _ring(channel, worker, layout, varying=varying)
    return None if ring is None else ring.claim(layout)


def _ring(
    channel: Channel, worker: int, layout: Mapping[str, Layout], *, varying: bool = False
) -> Ring | None:
    """Worker ``worker``'s ring, made on first use with slots the size of ``layout``
    (``VARYING_SPARE`` times that when ``varying``, within ``MAX_SLOT_BYTES``)."""
    key = channel.segment(worker)
    if key not in _RINGS:
        size = _layout_bytes(layout)
        fits = 0 < size <= MAX_SLOT_BYTES
        if varying:
            size = _aligned(min(MAX_SLOT_BYTES, int(size * VARYING_SPARE)))
        bound = VARYING_RING_BYTES if varying else MAX_RING_BYTES
        _RINGS[key] = (
            Ring.create(key, slots=channel.slots, slot_bytes=size, ring_bytes=bound) if fits else None
        )
    return _RINGS[key]


def restart(channel: Channel, worker: int) -> None:
    """In worker ``worker``, before the first parcel of a new iterator: its ring (if any) starts over."""
    ring = _RINGS.get(channel.segment(worker))
    if ring is not None:
        ring.restart()


_ATTACHED: dict[str, shared_memory.SharedMemory] = {}
_LOCK = threading.RLock()
"""Held while a segment is mapped or unmapped: the pin-memory thread receives too, and a
dropped iterator's finalizer may release its channel from inside ``receive`` (garbage
collection runs in whatever thread allocates), so the lock is re-entrant."""


def _mapped(parcel: Parcel) -> shared_memory.SharedMemory:
    """The trainer's mapping of the parcel's segment (mapped, then unlinked, on first use)."""
    memory = _ATTACHED.get(parcel.segment)
    if memory is None:
        memory = shared_memory.SharedMemory(name=parcel.segment)
        memory.unlink()  # the mapping stays; no name is left behind in /dev/shm
        _ATTACHED[parcel.segment] = memory
    return memory


def receive(parcel: Parcel) -> dict[str, np.ndarray]:
    """In the trainer: fresh copies of the parcel's arrays; then its slot is free again."""
    return received(parcel, lambda arrays: {name: view.copy() for name, view in arrays.items()})


def received(parcel: Parcel, opened: Callable[[dict[str, np.ndarray]], Opened]) -> Opened:
    """In the trainer: what ``opened`` makes of the parcel's arrays where they lie (``views``:
    it copies what it keeps); then the slot is free again."""
    with _LOCK:
        result = opened(views(parcel))
        done(parcel)
        return result


def views(parcel: Parcel) -> dict[str, np.ndarray]:
    """In the trainer: the parcel's arrays where they lie, in its slot. Copy what you need
    out of them and drop them before ``done(parcel)``: the worker then reuses the slot."""
    memory = _mapped(parcel)
    return {
        name: np.ndarray(shape, np.dtype(dtype), buffer=memory.buf, offset=offset)
        for name, dtype, shape, offset in parcel.fields
    }


def done(parcel: Parcel) -> None:
    """In the trainer: the parcel's arrays were copied out; its slot is free again."""
    with _LOCK:
        copied = _counter(_mapped(parcel))
        copied[0] = max(int(copied[0]), parcel.sequence + 1)
        del copied  # no view may outlive the mapping


def release(channel: Channel, *, num_workers: int) -> None:
    """In the trainer, once the channel's workers have stopped: unmap and unlink its segments."""
    with _LOCK:
        for worker in range(num_workers):
            segment = channel.segment(worker)
            memory = _ATTACHED.pop(segment, None)
            if memory is not None:
                memory.close()
                continue
            try:  # a worker whose batches never arrived
                leftover = shared_memory.SharedMemory(name=segment)
            except FileNotFoundError:
                continue
            leftover.close()
            leftover.unlink()
