"""A loader's view of one process's samples: one ``Share`` per loader batch.

A *share* is one process's part of one loader batch. Inside a
``StreamingDataLoader`` a dataset iterator (in the trainer with
``num_workers=0``, or in each worker) yields, for every batch of the rank, its
share: the samples of that batch it owns and where they go in the batch (their
slots, ``core.order.ShareSlots``). The loader assembles each batch from the
shares of all its workers, so the batches are the same for every worker count
and the position after each batch is exact. A worker sends its shares several
to a DataLoader message (``grouped``).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import deque
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.order import ShareSlots

__all__ = [
    "MESSAGE_BYTES",
    "MESSAGE_ROWS",
    "MESSAGE_SHARES",
    "SAMPLE_MESSAGE_ROWS",
    "SAMPLE_MESSAGE_SHARES",
    "Share",
    "Sizes",
    "grouped",
    "messages",
    "cut_shares",
]


MESSAGE_ROWS = 4096
"""A worker's message carries columnar shares of several batches up to about this many rows."""

MESSAGE_BYTES = 4 << 20
"""... and up to about this many bytes of rows as read (``bytes_read / rows_read``)."""

MESSAGE_SHARES = 32
"""... and at most this many shares."""

SAMPLE_MESSAGE_ROWS = 1024
"""Rows of a message of shares of samples (a ``transform`` or the user's ``collate_fn``):
what a transform returns may be far larger than the rows it read, so fewer rows travel
(and wait) at once."""

SAMPLE_MESSAGE_SHARES = 8
"""... and at most this many shares."""


@dataclass(frozen=True)
class Share:
    """One process's share of one loader batch.

    ``items`` is a list of samples, or (``columnar``) per-column pieces for
    ``samples.collated.finish``; ``slots`` says where each of them goes in the batch
    of ``size`` samples. ``count`` is ``len(slots)``; 0 for a process with no
    sample in this batch.
    """

    items: Any
    slots: np.ndarray
    size: int
    columnar: bool = False
    first: bool = False
    """The iterator's first share (a worker's shared-memory ring starts over)."""
    report: Any = None
    """In a worker: its ``WorkerReport`` as this share ends (the position after it)."""

    @property
    def count(self) -> int:
        """Samples in this share."""
        return len(self.slots)


class Sizes:
    """The sizes a columnar batch reader is asked for, one at a time (see ``cut_shares``)."""

    def __init__(self) -> None:
        self._queue: deque[int] = deque()

    def ask(self, size: int) -> None:
        """The next batch the reader yields has ``size`` rows."""
        self._queue.append(size)

    def __iter__(self) -> Iterator[int]:
        return self

    def __next__(self) -> int:
        if not self._queue:
            raise StopIteration
        return self._queue.popleft()


def cut_shares(
    plan: ShareSlots, stream: Callable[[Sizes | None], Iterator[Any]], *, columnar: bool, parted: bool = False
) -> Generator[Share, None, None]:
    """One ``Share`` per batch of ``plan``: the next samples of ``stream``.

    ``stream(sizes)`` starts the process's samples (``sizes`` is ``None``) or, with
    ``columnar``, its batches of the sizes asked of ``sizes``. A stream that ends
    early (rows a transform dropped) gives shorter shares at the end.

    ``parted``: the stream walks every sample of the rank and reads only one
    ``Part``'s rows (``samples.rows.NOT_MINE`` for the others', a ``PartedBatch`` of
    columns), so each share's slots are where its rows fall in the batch.
    """
    if parted:
        yield from _parted_shares(plan, stream, columnar=columnar)
        return
    sizes = Sizes() if columnar else None
    source = stream(sizes)
    alone = _alone(plan)
    for batch in range(plan.order.batches(plan.batch_size)):
        size = plan.size(batch)
        slots = alone[:size] if alone is not None else plan.slots(batch)
        first = batch == 0
        if len(slots) == 0:
            yield Share(None, slots, size, columnar, first)
        elif sizes is not None:
            sizes.ask(len(slots))
            pieces = next(source, None)
            got = 0 if pieces is None else sum(len(piece) for piece in next(iter(pieces.values()), []))
            yield Share(pieces, slots[:got], size, columnar, first)
        else:
            samples = list(itertools.islice(source, len(slots)))
            yield Share(samples, slots[: len(samples)], size, first=first)


def _parted_shares(
    plan: ShareSlots, stream: Callable[[Sizes | None], Iterator[Any]], *, columnar: bool
) -> Generator[Share, None, None]:
    """``cut_shares`` of a stream of one ``Part``'s rows: every batch is asked of it whole."""
    from ..samples.rows import NOT_MINE

    sizes = Sizes() if columnar else None
    source = stream(sizes)
    nothing = np.zeros(0, dtype=np.int64)
    for batch in range(plan.order.batches(plan.batch_size)):
        size, first = plan.size(batch), batch == 0
        if sizes is not None:
            sizes.ask(size)
            parted = next(source, None)
            if parted is None or len(parted.slots) == 0:
                yield Share(None, nothing, size, columnar, first)
            else:
                yield Share(parted.pieces, parted.slots, size, columnar, first)
            continue
        items = list(itertools.islice(source, size))
        slots = np.array([index for index, item in enumerate(items) if item is not NOT_MINE], dtype=np.int64)
        samples = [items[index] for index in slots.tolist()]
        yield Share(samples if len(slots) else None, slots, size, first=first)


def _alone(plan: ShareSlots) -> np.ndarray | None:
    """The slots of a lone process's batch (every slot, in order: ``ShareSlots.slots`` of
    one worker), as one read-only array its batches take prefixes of; ``None`` with
    several workers."""
    if plan.workers != 1:
        return None
    every = np.arange(plan.batch_size, dtype=np.int64)
    every.flags.writeable = False
    return every


def messages(
    pieces: Iterator[Share], *, in_worker: bool, report: Callable[[], Any], row_bytes: Callable[[], float]
) -> Generator[list[Share], None, None]:
    """The DataLoader items of ``pieces``: in a worker, ``grouped``; in the trainer's
    own process (nothing to send), each share alone and without a report."""
    if in_worker:
        yield from grouped(pieces, report=report, row_bytes=row_bytes)
    else:
        for piece in pieces:
            yield [piece]


def grouped(
    pieces: Iterator[Share], *, report: Callable[[], Any], row_bytes: Callable[[], float]
) -> Generator[list[Share], None, None]:
    """A worker's shares, several to a message: each DataLoader message costs the same
    whatever it carries, so a worker that sends its share of one batch at a time pays
    it k times per batch. The first message holds one share (the first batch comes
    soon), later ones twice as many as the one before, up to ``MESSAGE_SHARES`` and
    about ``MESSAGE_ROWS`` rows (for shares of samples ``SAMPLE_MESSAGE_SHARES`` and
    ``SAMPLE_MESSAGE_ROWS``) and ``MESSAGE_BYTES`` bytes. Each share carries the
    ``report()`` taken as it ends.
    """
    limit = 1
    message: list[Share] = []
    rows = 0
    for piece in pieces:
        message.append(dataclasses.replace(piece, report=report()))
        rows += piece.count
        size = rows * max(1.0, row_bytes())
        most_rows, most_shares = (
            (MESSAGE_ROWS, MESSAGE_SHARES) if piece.columnar else (SAMPLE_MESSAGE_ROWS, SAMPLE_MESSAGE_SHARES)
        )
        if len(message) >= limit or rows >= most_rows or size >= MESSAGE_BYTES:
            yield message
            message, rows = [], 0
            limit = min(most_shares, 2 * limit)
    if message:
        yield message
