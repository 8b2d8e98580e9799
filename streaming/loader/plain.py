"""The plain path: a loader's batches with ``num_workers=0``, drawn without torch's fetcher.

With no worker processes, torch's single-process iterator only calls
``collate_fn(next(iter(dataset)))`` for each item, inside a profiler label and
its bookkeeping: about as much time per batch as building the batch itself. The
plain path draws the same items straight from the dataset's iterator
(``items``), and, for whole columnar batches (the default collate, no
transform), finishes each share into its batch directly (``PlainBatches``)
instead of sorting and assembling shares as the worker path must. The batches,
the positions, the random numbers drawn and every error are those of the general
path, and while a torch profiler records, each ``next()`` carries torch's label.
A loader that pins memory or sets a ``timeout`` takes torch's iterator as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader

from .. import _compat
from ..workers.worker import SentShare

__all__ = ["LABEL", "PlainBatches", "PlainItems", "eligible", "items", "uncollated"]

LABEL = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
"""What a torch profiler shows for each ``next()`` of a loader without workers."""


def eligible(loader: DataLoader[Any], *, num_workers: int) -> bool:
    """Whether ``loader``'s batches take the plain path: no workers (``num_workers``, the
    loader's setting), nothing pinned, no ``timeout`` (torch refuses that without
    workers, and keeps doing so)."""
    return num_workers == 0 and not loader.pin_memory and loader.timeout == 0


class PlainItems(Iterator[Any]):
    """``collate(item)`` for each item of the dataset's iterator ``source``."""

    def __init__(self, collate: Callable[[Any], Any], source: Iterator[Any]) -> None:
        self.collate, self.source = collate, source

    def __next__(self) -> Any:
        if _compat.profiler_enabled():
            with torch.autograd.profiler.record_function(LABEL):
                return self.collate(next(self.source))
        return self.collate(next(self.source))


def items(loader: DataLoader[Any]) -> PlainItems:
    """The items torch's single-process iterator of ``loader`` would give, in order.

    Like that iterator, this draws one number from ``loader.generator`` (the global
    generator if none) as it starts, so the random state a training loop sees
    afterwards is the same; the dataset's iterator is made here, as torch makes it.
    """
    torch.empty((), dtype=torch.int64).random_(generator=loader.generator)
    return PlainItems(loader.collate_fn, iter(loader.dataset))


def uncollated(batches: Iterator[Any]) -> Iterator[Any]:
    """The dataset's own items behind ``items``' (each a list of one ``Share``)."""
    if not isinstance(batches, PlainItems):
        raise TypeError(f"expected the plain path's items, got {type(batches).__name__}")
    return batches.source


class PlainBatches:
    """Whole columnar batches of the trainer's own process (``num_workers=0``).

    Each item of the dataset's iterator is one ``Share`` holding the batch's column
    pieces; ``next_batch`` finishes it into the batch (fresh tensors, as
    ``default_collate`` gives). The dataset's cursor moved as the share was cut,
    which the loader's iterator puts back for a batch it does not deliver.
    """

    def __init__(self, source: Iterator[Any], *, batch_size: int, drop_last: bool) -> None:
        from ..samples.collated import finish  # not at import: the fork server's preload stays free of Lance

        self._source, self._finish = source, finish
        self._batch_size, self._drop_last = batch_size, drop_last

    def next_batch(self) -> tuple[list[SentShare], Any] | None:
        """The next batch (no shares to commit: the cursor is the committed one), or
        ``None`` for one not delivered: empty, or short under ``drop_last=True``.

        Raises:
            StopIteration: the epoch's batches are through.
        """
        if _compat.profiler_enabled():
            with torch.autograd.profiler.record_function(LABEL):
                return self._next()
        return self._next()

    def _next(self) -> tuple[list[SentShare], Any] | None:
        (piece,) = next(self._source)
        if piece.count == 0 or (self._drop_last and piece.count < self._batch_size):
            return None
        return [], self._finish(piece.items)
