"""Worker progress travelling with batches, so the trainer commits what it received.

Inside any process that iterates a ``StreamingDataset``, the iterator registers
its progress under the dataset's token. The loader's collate wrapper runs right
after the samples of a batch were drawn, reads that progress and attaches it to
the batch; the trainer's process applies it when ``next()`` hands the batch over.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .iterate import Progress

_ACTIVE: dict[str, tuple[Progress, tuple[int, ...], int]] = {}


def register(token: str, progress: Progress, splits: Sequence[int], worker: int) -> None:
    """Record the progress of the iterator of dataset ``token`` in this process."""
    _ACTIVE[token] = (progress, tuple(splits), worker)


@dataclass(frozen=True)
class Snapshot:
    """Counts of the splits one iterator owns, after the samples of one batch."""

    worker: int
    splits: tuple[int, ...]
    samples: tuple[int, ...]
    positions: tuple[int, ...]


def snapshot(token: str) -> Snapshot | None:
    """The current counts of the owned splits of dataset ``token``'s iterator."""
    entry = _ACTIVE.get(token)
    if entry is None:
        return None
    progress, splits, worker = entry
    samples, positions = progress.samples, progress.positions
    return Snapshot(
        worker=worker,
        splits=splits,
        samples=tuple(samples[split] for split in splits),
        positions=tuple(positions[split] for split in splits),
    )


@dataclass(frozen=True)
class Committed:
    """A collated batch and the progress its worker had made when it was built."""

    batch: Any
    snapshot: Snapshot | None

    def pin_memory(self, device: str | None = None) -> Committed:
        """Pin the batch (called by the DataLoader's pin-memory thread)."""
        from torch.utils.data._utils.pin_memory import pin_memory

        return Committed(pin_memory(self.batch, device), self.snapshot)  # type: ignore[no-untyped-call]


class CommittingCollate:
    """Wraps a collate function: collate, then attach the iterator's progress."""

    def __init__(self, collate: Callable[[list[Any]], Any], token: str) -> None:
        self.collate = collate
        self.token = token

    def __call__(self, samples: list[Any]) -> Committed:
        from torch.utils.data import get_worker_info

        # In the trainer's own process (num_workers=0) the dataset's progress is
        # already the committed one; only worker processes send snapshots.
        in_worker = get_worker_info() is not None
        return Committed(self.collate(samples), snapshot(self.token) if in_worker else None)


_SHIPPING: set[str] = set()


class shipping:
    """Marks dataset ``token`` as being pickled for a ``StreamingDataLoader``'s workers."""

    def __init__(self, token: str) -> None:
        self.token = token

    def __enter__(self) -> None:
        _SHIPPING.add(self.token)

    def __exit__(self, *exc: object) -> None:
        _SHIPPING.discard(self.token)


def shipping_for_loader(token: str) -> bool:
    """True while a ``StreamingDataLoader`` starts workers for dataset ``token``."""
    return token in _SHIPPING
