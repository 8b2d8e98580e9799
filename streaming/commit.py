"""Worker progress travelling with batches, so the trainer commits what it received.

Inside any process that iterates a ``StreamingDataset``, the iterator registers
its progress under the dataset's token. The loader's collate wrapper runs right
after the samples of a batch were drawn, reads that progress and attaches it to
the batch; the trainer's process applies it when ``next()`` hands the batch over.
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import transfer
from .iterate import Progress
from .stats import Counters

_ACTIVE: dict[str, tuple[Progress, tuple[int, ...], int, Counters]] = {}


def register(token: str, progress: Progress, splits: Sequence[int], worker: int, counters: Counters) -> None:
    """Record the progress (and read counters) of dataset ``token``'s iterator here."""
    _ACTIVE[token] = (progress, tuple(splits), worker, counters)


@dataclass(frozen=True)
class Snapshot:
    """Counts of the splits one iterator owns, after the samples of one batch."""

    worker: int
    splits: tuple[int, ...]
    samples: tuple[int, ...]
    positions: tuple[int, ...]
    pid: int = 0
    counters: dict[str, float] | None = None
    anchors: tuple[tuple[int, int, int], ...] | None = None


def snapshot(token: str) -> Snapshot | None:
    """The current counts of the owned splits of dataset ``token``'s iterator."""
    entry = _ACTIVE.get(token)
    if entry is None:
        return None
    progress, splits, worker, counters = entry
    samples, positions = progress.samples, progress.positions
    return Snapshot(
        worker=worker,
        splits=splits,
        samples=tuple(samples[split] for split in splits),
        positions=tuple(positions[split] for split in splits),
        pid=os.getpid(),
        counters=counters.as_dict(),
        anchors=tuple(progress.anchors[split] for split in splits),
    )


@dataclass(frozen=True)
class Committed:
    """A collated batch and the progress its worker had made when it was built.

    ``numpy`` marks a batch whose numeric columns travel as numpy arrays, in
    the batch or (``parcel``) in a shared-memory slot, their keys then holding
    ``None``; ``unwrap`` turns them into tensors in the trainer's process.
    """

    batch: Any
    snapshot: Snapshot | None
    numpy: bool = False
    parcel: transfer.Parcel | None = None

    def unwrap(self) -> Any:
        """The batch as the trainer receives it."""
        if not self.numpy:
            return self.batch
        from .assemble import to_tensors

        batch = self.batch
        if self.parcel is not None:
            arrays = transfer.receive(self.parcel)
            batch = {key: arrays.get(key, value) for key, value in batch.items()}
        return to_tensors(batch)

    def pin_memory(self, device: str | None = None) -> Committed:
        """Pin the batch (called by the DataLoader's pin-memory thread)."""
        from torch.utils.data._utils.pin_memory import pin_memory

        return Committed(pin_memory(self.unwrap(), device), self.snapshot)  # type: ignore[no-untyped-call]


_PIPE_BYTES = 8 << 20
"""Batches up to this size travel from workers by value (faster than shared memory)."""


def _pipe_sized(batch: dict[str, Any]) -> bool:
    return sum(getattr(value, "nbytes", 0) for value in batch.values()) <= _PIPE_BYTES


class CommittingCollate:
    """Wraps a collate function: collate, then attach the iterator's progress.

    With ``columnar`` the item is already a whole batch of column pieces (see
    ``assemble``), finished here without per-row work; in a worker its numeric
    columns go through the ``channel``'s shared-memory ring when one is set.
    """

    def __init__(self, collate: Callable[[list[Any]], Any], token: str, *, columnar: bool) -> None:
        self.collate = collate
        self.token = token
        self.columnar = columnar
        self.channel: transfer.Channel | None = None

    def __call__(self, samples: list[Any]) -> Committed:
        from torch.utils.data import get_worker_info

        worker = get_worker_info()
        # In the trainer's own process (num_workers=0) the dataset's progress is
        # already the committed one; only worker processes send snapshots.
        progress = None if worker is None else snapshot(self.token)
        if not self.columnar:
            return Committed(self.collate(samples), progress)
        from .assemble import finish, to_tensors

        batch = finish(samples, as_numpy=worker is not None)  # type: ignore[arg-type]
        if worker is None:
            return Committed(batch, None)
        if self.channel is not None:
            arrays = {key: value for key, value in batch.items() if isinstance(value, np.ndarray)}
            parcel = transfer.send(self.channel, worker.id, arrays) if arrays else None
            if parcel is not None:
                rest = {key: None if key in arrays else value for key, value in batch.items()}
                return Committed(rest, progress, numpy=True, parcel=parcel)
        if _pipe_sized(batch):
            return Committed(batch, progress, numpy=True)
        return Committed(to_tensors(batch), progress)  # large: shared memory beats the pipe


_SHIPPING: dict[str, int] = {}


class shipping:
    """Marks dataset ``token`` as being iterated for a ``StreamingDataLoader``.

    While it is active, iterators created for the dataset (in this process, or in
    worker processes the dataset is pickled for) are the loader's; with a positive
    ``batch`` they yield whole columnar batches, which the loader's collate
    finishes vectorised.
    """

    def __init__(self, token: str, *, batch: int) -> None:
        self.token = token
        self.batch = batch

    def __enter__(self) -> None:
        _SHIPPING[self.token] = self.batch

    def __exit__(self, *exc: object) -> None:
        _SHIPPING.pop(self.token, None)


def shipping_for_loader(token: str) -> bool:
    """True while a ``StreamingDataLoader`` creates its iterator for dataset ``token``."""
    return token in _SHIPPING


def loader_batch(token: str) -> int:
    """Rows per columnar batch the loader iterating ``token`` wants (0: row dicts)."""
    return _SHIPPING.get(token, 0)


def pickled_for_a_child_process() -> bool:
    """True when multiprocessing pickles this object to start a child process.

    Distinguishes a DataLoader starting workers from ``copy.deepcopy`` or
    ``pickle.dumps`` by the user, which must not mark the dataset.
    """
    frame: types.FrameType | None = sys._getframe(2)
    for _ in range(40):
        if frame is None:
            return False
        path = frame.f_code.co_filename.replace("\\", "/")
        if "/multiprocessing/" in path and frame.f_code.co_name in ("dump", "_launch", "start"):
            return True
        frame = frame.f_back
    return False
