"""A loader's view of one process's samples: one ``Slice`` per loader batch.

Inside a ``StreamingDataLoader`` a dataset iterator (in the trainer with
``num_workers=0``, or in each worker) yields, for every batch of the rank, the
samples of that batch it owns and where they go in the batch (a *stripe*, see
``core.stripes``). The loader assembles each batch from the slices of all its
workers, so the batches are the same for every worker count and the position
after each batch is exact.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import deque
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.stripes import Stripe

__all__ = [
    "BUNDLE_BYTES",
    "BUNDLE_ROWS",
    "BUNDLE_SLICES",
    "SAMPLE_BUNDLE_ROWS",
    "SAMPLE_BUNDLE_SLICES",
    "Slice",
    "Sizes",
    "bundles",
    "messages",
    "slices",
]


BUNDLE_ROWS = 4096
"""A worker's message carries columnar slices of several batches up to about this many rows."""

BUNDLE_BYTES = 4 << 20
"""... and up to about this many bytes of rows as read (``bytes_read / rows_read``)."""

BUNDLE_SLICES = 32
"""... and at most this many slices."""

SAMPLE_BUNDLE_ROWS = 1024
"""Rows of a message of slices of samples (a ``transform`` or the user's ``collate_fn``):
what a transform returns may be far larger than the rows it read, so fewer rows travel
(and wait) at once."""

SAMPLE_BUNDLE_SLICES = 8
"""... and at most this many slices."""


@dataclass(frozen=True)
class Slice:
    """One process's share of one loader batch.

    ``items`` is a list of samples, or (``columnar``) per-column pieces for
    ``read.assemble.finish``; ``slots`` says where each of them goes in the batch
    of ``size`` samples. ``count`` is ``len(slots)``; 0 for a process with no
    sample in this batch.
    """

    items: Any
    slots: np.ndarray
    size: int
    columnar: bool = False
    first: bool = False
    """The iterator's first slice (a worker's shared-memory ring starts over)."""
    report: Any = None
    """In a worker: its ``WorkerReport`` as this slice ends (the position after it)."""

    @property
    def count(self) -> int:
        """Samples in this slice."""
        return len(self.slots)


class Sizes:
    """The sizes a columnar batch reader is asked for, one at a time (see ``slices``)."""

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


def slices(
    stripe: Stripe, stream: Callable[[Sizes | None], Iterator[Any]], *, columnar: bool
) -> Generator[Slice, None, None]:
    """One ``Slice`` per batch of ``stripe``: the next samples of ``stream``.

    ``stream(sizes)`` starts the process's samples (``sizes`` is ``None``) or, with
    ``columnar``, its batches of the sizes asked of ``sizes``. A stream that ends
    early (rows a transform dropped) gives shorter slices at the end.
    """
    sizes = Sizes() if columnar else None
    source = stream(sizes)
    alone = _alone(stripe)
    for batch in range(stripe.order.batches(stripe.batch_size)):
        size = stripe.size(batch)
        slots = alone[:size] if alone is not None else stripe.slots(batch)
        first = batch == 0
        if len(slots) == 0:
            yield Slice(None, slots, size, columnar, first)
        elif sizes is not None:
            sizes.ask(len(slots))
            pieces = next(source, None)
            got = 0 if pieces is None else sum(len(piece) for piece in next(iter(pieces.values()), []))
            yield Slice(pieces, slots[:got], size, columnar, first)
        else:
            samples = list(itertools.islice(source, len(slots)))
            yield Slice(samples, slots[: len(samples)], size, first=first)


def _alone(stripe: Stripe) -> np.ndarray | None:
    """The slots of a lone process's batch (every slot, in order: ``Stripe.slots`` of
    one worker), as one read-only array its batches take prefixes of; ``None`` with
    several workers."""
    if stripe.workers != 1:
        return None
    slots = np.arange(stripe.batch_size, dtype=np.int64)
    slots.flags.writeable = False
    return slots


def messages(
    pieces: Iterator[Slice], *, in_worker: bool, report: Callable[[], Any], row_bytes: Callable[[], float]
) -> Generator[list[Slice], None, None]:
    """The DataLoader items of ``pieces``: in a worker, ``bundles``; in the trainer's
    own process (nothing to send), each slice alone and without a report."""
    if in_worker:
        yield from bundles(pieces, report=report, row_bytes=row_bytes)
    else:
        for piece in pieces:
            yield [piece]


def bundles(
    pieces: Iterator[Slice], *, report: Callable[[], Any], row_bytes: Callable[[], float]
) -> Generator[list[Slice], None, None]:
    """A worker's slices, several to a message: each DataLoader message costs the same
    whatever it carries, so a worker that sends its share of one batch at a time pays
    it k times per batch. The first message holds one slice (the first batch comes
    soon), later ones twice as many as the one before, up to ``BUNDLE_SLICES`` and
    about ``BUNDLE_ROWS`` rows (for slices of samples ``SAMPLE_BUNDLE_SLICES`` and
    ``SAMPLE_BUNDLE_ROWS``) and ``BUNDLE_BYTES`` bytes. Each slice carries the
    ``report()`` taken as it ends.
    """
    limit = 1
    bundle: list[Slice] = []
    rows = 0
    for piece in pieces:
        bundle.append(dataclasses.replace(piece, report=report()))
        rows += piece.count
        size = rows * max(1.0, row_bytes())
        most_rows, most_slices = (
            (BUNDLE_ROWS, BUNDLE_SLICES) if piece.columnar else (SAMPLE_BUNDLE_ROWS, SAMPLE_BUNDLE_SLICES)
        )
        if len(bundle) >= limit or rows >= most_rows or size >= BUNDLE_BYTES:
            yield bundle
            bundle, rows = [], 0
            limit = min(most_slices, 2 * limit)
    if bundle:
        yield bundle
