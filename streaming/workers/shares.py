"""Loader batches from the workers' messages: their shares sorted, assembled, released.

A worker's message holds its shares of one or more batches (``cut``);
``Shares`` sorts them by worker until every worker's share of the next batch is in,
and ``Gathering`` makes the batch of those shares (``assembly``), honouring
``drop_last`` and pinning what the trainer collated itself.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .. import _compat
from ..core import stats
from . import assembly, transfer
from .board import Board
from .worker import SentShare

__all__ = ["Gathering", "Shares", "release", "release_kept", "single"]

_clock = time.perf_counter


class Shares:
    """The DataLoader's messages, each one worker's shares of one or more batches, sorted
    by worker until every worker's share of the next batch is in."""

    def __init__(self, batches: Iterator[Any], *, workers: int, waits: stats.Waits | None = None) -> None:
        self._batches = batches
        self._waits = waits  # where the time spent waiting for each worker's message goes
        self._queues: list[collections.deque[SentShare]] = [
            collections.deque() for _ in range(max(1, workers))
        ]

    def next_batch(self) -> list[SentShare]:
        """Every worker's share of the next batch, worker 0 first.

        Raises:
            StopIteration: every worker's shares are through.
            RuntimeError: a worker's shares ran out before the others'.
        """
        for queue in self._queues:
            while not queue:
                try:
                    asked = _clock()
                    message = next(self._batches)
                    if self._waits is not None and message:
                        self._waits.add_worker(message[0].worker, _clock() - asked)
                except StopIteration:
                    if not any(self._queues):
                        raise
                    raise RuntimeError(
                        "a worker's batches ended before the others': the workers disagree on the batches"
                    ) from None
                for share in message:
                    self._queues[share.worker].append(share)
        return [queue.popleft() for queue in self._queues]


@dataclass(frozen=True)
class Gathering:
    """How a loader makes its batches of shares: ``finish`` collates whole batches of raw
    samples in the trainer (a user's ``collate_fn``), else shares come batched; ``pin``
    pins what ``finish`` made (torch's pin thread saw only the shares)."""

    batch_size: int
    drop_last: bool
    finish: Callable[[list[Any]], Any] | None
    pin: bool = False
    pin_device: str | None = None

    def gather(self, shares: Shares) -> tuple[list[SentShare], Any] | None:
        """The next batch: one share from each worker, assembled.

        Returns the shares (for their reports) and the batch, or ``None`` for a batch
        that is not delivered: empty (rows a transform dropped) or short under
        ``drop_last=True``.

        Raises:
            StopIteration: the epoch's batches are through.
            RuntimeError: a worker's shares ran out before the others'.
        """
        items = shares.next_batch()
        present = [item for item in items if item.count]
        if present and all(item.numpy for item in present):  # columns: merged straight from the slots
            merged = self._columns(present, items[0].size)
            return None if merged is None else (items, merged)
        parts = [item.unwrap() for item in present]  # before the commit: a failure here was not delivered
        if not present:
            return None
        slots, size = assembly.compact([item.slots for item in present], items[0].size)
        if self.drop_last and size < self.batch_size:
            return None
        batch = assembly.assemble(parts, slots, size, collate=self.finish)
        if self.finish is not None and self.pin:
            batch = _compat.pin_memory(batch, self.pin_device)
        return items, _collated(batch, present)

    def _columns(self, shares: list[SentShare], size: int) -> Any:
        """The batch of columnar shares: numeric columns copied once, from the workers'
        shared-memory slots into the batch (then the slots are free again)."""
        from ..samples.collated import to_tensors

        try:
            slots, size = assembly.compact([item.slots for item in shares], size)
            if self.drop_last and size < self.batch_size:
                return None
            merged = assembly.columns([item.columns() for item in shares], slots, size)
        finally:
            for item in shares:
                item.done()
        return _collated(to_tensors(merged), shares)


def _collated(batch: Any, shares: list[SentShare]) -> Any:
    """``batch`` with the lists of its string and binary columns that came packed (``spanned``)
    collated as ``default_collate`` collates them for the whole batch (in the trainer's own
    process: the same values, and the same error for a null first value)."""
    spanned = {name for item in shares for name in item.spanned}
    if not spanned:
        return batch
    from ..samples.collated import collate_values

    return {key: collate_values(key, value) if key in spanned else value for key, value in batch.items()}


def single(collate: Callable[[Any], Any]) -> Callable[[list[Any]], Any]:
    """``batch_size=None``: each batch is one sample, converted by ``collate``."""

    def convert(samples: list[Any]) -> Any:
        return collate(samples[0])

    return convert


def release_kept(channel: transfer.Channel | None, board: Board | None, *, num_workers: int) -> None:
    """A persistent loader's workers are gone: free their shared memory and pipes."""
    if board is not None:
        board.close()
    if channel is not None:
        transfer.release(channel, num_workers=num_workers)


def release(
    batches: Any,
    channel: transfer.Channel | None,
    *,
    num_workers: int,
    reports: dict[tuple[int, int], dict[str, float]],
    keep: bool = False,
) -> None:
    """Shut down the workers of ``batches`` (unless the loader ``keep``s them), free their
    shared memory, and zero the gauges of their last ``reports`` (nothing of theirs is
    queued any more)."""
    holder, started = batches, getattr(batches, "started", None)
    try:
        if callable(started):  # a head start: its workers start on a thread (``loader.headstart``)
            batches = started()
        if not keep and batches is not None:
            _compat.shutdown_workers(batches)
    finally:
        if holder is not batches:
            holder.close()  # type: ignore[attr-defined]
        stats.idle(reports)
        if channel is not None:
            transfer.release(channel, num_workers=num_workers)
