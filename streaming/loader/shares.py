"""Loader batches from the workers' messages: their shares sorted, assembled, released.

A worker's message holds its shares of one or more batches (``dataset.striped``);
``Shares`` sorts them by worker until every worker's share of the next batch is in,
and ``Gathering`` makes the batch of those shares (``assembly``), honouring
``drop_last`` and pinning what the trainer collated itself.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from .. import _compat
from ..core import stats
from ..dataset.board import Board
from . import assembly, pool, transfer
from .worker import WorkerBatch

__all__ = ["Gathering", "Shares", "release", "release_kept", "single"]


class Shares:
    """The DataLoader's messages, each one worker's shares of one or more batches, sorted
    by worker until every worker's share of the next batch is in."""

    def __init__(self, batches: Iterator[Any], *, workers: int) -> None:
        self._batches = batches
        self._queues: list[collections.deque[WorkerBatch]] = [
            collections.deque() for _ in range(max(1, workers))
        ]

    def next_batch(self) -> list[WorkerBatch]:
        """Every worker's share of the next batch, worker 0 first.

        Raises:
            StopIteration: every worker's shares are through.
            RuntimeError: a worker's shares ran out before the others'.
        """
        for queue in self._queues:
            while not queue:
                try:
                    message = next(self._batches)
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

    def gather(self, shares: Shares) -> tuple[list[WorkerBatch], Any] | None:
        """The next batch: one share from each worker, assembled.

        Returns the shares (for their reports) and the batch, or ``None`` for a batch
        that is not delivered: empty (rows a transform dropped) or short under
        ``drop_last=True``.

        Raises:
            StopIteration: the epoch's batches are through.
            RuntimeError: a worker's shares ran out before the others'.
        """
        items = shares.next_batch()
        place = _place(items)
        try:
            return self._gather(items, place)
        finally:  # the batch's pool buffer goes on, unless its views were handed out
            if place is not None:
                pool.lookup(place.pool).settle(place.sequence)

    def _gather(
        self, items: list[WorkerBatch], place: pool.Place | None
    ) -> tuple[list[WorkerBatch], Any] | None:
        present = [item for item in items if item.count]
        if present and all(item.numpy for item in present):  # columns: from the pool, or merged
            merged = self._columns(present, items[0].size, place)
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
        return items, batch

    def _columns(self, shares: list[WorkerBatch], size: int, place: pool.Place | None) -> Any:
        """The batch of columnar shares: views of the pool buffer its workers wrote, else
        numeric columns copied once, from where they lie into the batch (then the
        workers' shared-memory slots are free again)."""
        from ..read.assemble import to_tensors

        try:
            slots, filled = assembly.compact([item.slots for item in shares], size)
            if self.drop_last and filled < self.batch_size:
                return None
            if place is not None and filled == size:
                if _written(shares):
                    return to_tensors(_in_place(shares, slots, size))
                _adopt(shares)
            merged = assembly.columns([item.columns() for item in shares], slots, filled)
        finally:
            for item in shares:
                item.done()
        return to_tensors(merged)


def _place(items: list[WorkerBatch]) -> pool.Place | None:
    """The batch's place in its pool (every worker numbers its shares alike)."""
    places = [item.place for item in items if item.place is not None]
    if not places:
        return None
    if len({(found.pool, found.sequence) for found in places}) > 1:
        raise RuntimeError(
            f"the workers' shares of one batch are numbered differently ({places}): the workers disagree"
        )
    return places[0]


def _layout(shares: list[WorkerBatch]) -> tuple[pool.Field, ...] | None:
    """The one pool layout every share of the batch computed (``None``: none, or several)."""
    first = shares[0].place
    if first is None or not first.fields:
        return None
    if all(item.place is not None and item.place.fields == first.fields for item in shares):
        return first.fields
    return None


def _written(shares: list[WorkerBatch]) -> bool:
    """Whether every share wrote its numeric columns into the pool, all in one layout."""
    written = all(item.place is not None and item.place.written for item in shares)
    return written and _layout(shares) is not None


def _adopt(shares: list[WorkerBatch]) -> None:
    """Every share of a whole batch computed one layout: the workers may write it."""
    fields, first = _layout(shares), shares[0].place
    if fields is not None and first is not None:
        pool.lookup(first.pool).adopt(fields)


def _in_place(shares: list[WorkerBatch], slots: list[Any], size: int) -> dict[str, Any]:
    """The batch whose numeric columns lie in the pool: views of its buffer, held until no
    tensor of them is left; other columns (strings) merged from the messages."""
    place = shares[0].place
    assert place is not None
    arrays = pool.lookup(place.pool).hold(place)
    first = shares[0].batch
    rest = [{key: value for key, value in item.batch.items() if key not in arrays} for item in shares]
    merged = assembly.columns(rest, slots, size) if rest[0] else {}
    return {key: arrays[key] if key in arrays else merged[key] for key in first}


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
    batches: Iterator[Any],
    channel: transfer.Channel | None,
    *,
    num_workers: int,
    reports: dict[tuple[int, int], dict[str, float]],
    keep: bool = False,
) -> None:
    """Shut down the workers of ``batches`` (unless the loader ``keep``s them), free their
    shared memory, and zero the gauges of their last ``reports`` (nothing of theirs is
    queued any more)."""
    try:
        if not keep:
            _compat.shutdown_workers(batches)
    finally:
        stats.idle(reports)
        if channel is not None:
            transfer.release(channel, num_workers=num_workers)
