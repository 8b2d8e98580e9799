"""A loader's first batches with workers: drawn by the trainer while its workers start.

Worker processes take a second or more to start (a fork server or a fresh
interpreter, each worker's imports, its first read), while the trainer's process
could already read. So a loader with workers draws its first batch in its own
process exactly as with ``num_workers=0``, then starts the workers on a thread and,
in the meantime, draws the next batches the same way.
At the first batch boundary after the workers are up, it closes its own iterator
(the cursor then stands after the last batch handed over) and posts that position
on the board, one pipe per worker; every worker waits for it before it reads
anything, and the epoch's other batches come from the workers. The batches, their
order and every state are those of any worker count: a state after any batch
resumes exactly on any count, which is all the switch relies on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from .. import _compat
from ..core.lifecycle import Guarded
from ..core.stats import Waits
from ..workers.board import Board
from ..workers.shares import Gathering, Shares
from ..workers.worker import SentShare
from .plain import PlainBatches

__all__ = ["HeadStart", "seeded"]


@contextmanager
def seeded(loader: Any, seed: int) -> Iterator[None]:
    """While torch's iterator is built on another thread: its one draw for the workers'
    base seed comes from a generator seeded with ``seed`` (drawn on the trainer's
    thread, as torch's iterator draws it), not from the trainer's own random stream,
    which that thread may be using meanwhile."""
    before = loader.generator
    loader.generator = torch.Generator().manual_seed(seed & 0x7FFF_FFFF_FFFF_FFFF)
    try:
        yield
    finally:
        loader.generator = before


class HeadStart:
    """Batches from the trainer's own iterator until the workers started on a thread are
    up, then from the workers, which continue from the position posted to them."""

    def __init__(
        self,
        own: Shares | PlainBatches,
        own_iterator: Guarded | None,
        start_workers: Callable[[], Iterator[Any]],
        *,
        board: Board,
        handover: Callable[[], dict[str, Any]],
        gathering: Gathering,
        workers: int,
        keep: bool,
        abandon: Callable[[], None],
    ) -> None:
        self._own: Shares | PlainBatches | None = own
        self._own_iterator = own_iterator
        self._board, self._handover = board, handover
        self._gathering, self._count = gathering, workers
        self._batches: Iterator[Any] | None = None
        self._shares: Shares | None = None
        self._error: BaseException | None = None
        self.waits: Waits | None = None
        """Where the waits for each worker's messages go (``Shares``), once they take over."""
        self._posted = False
        self._keep = keep  # persistent workers: the board lives on with them
        self._ready = threading.Event()
        self._abandon = abandon
        self._thread = threading.Thread(
            target=self._start, args=(start_workers,), name="lance-streaming-start-workers", daemon=True
        )
        self._launched = False  # the thread starts once the first batch is drawn

    def _start(self, start_workers: Callable[[], Iterator[Any]]) -> None:
        try:
            self._batches = start_workers()
        except BaseException as error:  # raised in the trainer's thread at the next batch
            self._error = error
        finally:
            self._ready.set()

    def _launch(self) -> None:
        """Start the workers' thread (once)."""
        if not self._launched:
            self._launched = True
            self._thread.start()

    def up(self) -> bool:
        """Whether the next batch boundary switches to the workers: they have started and
        each waits for its first position, or one of them died (the workers' batches
        then raise the error that names it, as with any dead worker)."""
        if not self._ready.is_set():
            return False
        if self._error is not None:
            return True
        if self._board.all_waiting():  # every worker opened its queues: their names may go
            _compat.forget_queue_names(self._batches)
            return True
        return not all(worker.is_alive() for worker in _compat.worker_processes(self._batches))

    def __getattr__(self, name: str) -> Any:
        """The started DataLoader iterator's attributes (its workers, queues), once started."""
        if name.startswith("__") or name in {"_batches", "_thread", "_ready", "_launched", "_abandon"}:
            raise AttributeError(name)
        self._launch()
        self._thread.join()
        return getattr(self._batches, name)

    @property
    def own(self) -> bool:
        """Whether the next batch comes from the trainer's own iterator."""
        return self._own is not None

    def gather(self) -> tuple[list[SentShare], Any] | None:
        """The next batch: the trainer's own until the workers are up, then theirs.

        Raises:
            StopIteration: the epoch's batches are through.
        """
        if self._own is not None and self.up():
            self._switch()
        if self._own is not None:
            own = self._own
            batch = own.next_batch() if isinstance(own, PlainBatches) else self._gathering.gather(own)
            self._launch()  # after the first batch: its read never shares the cores with the start
            return batch
        assert self._shares is not None
        return self._gathering.gather(self._shares)

    def _switch(self) -> None:
        """Close the trainer's own iterator and let the workers go on from its position."""
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        self._own = None
        if self._own_iterator is not None:
            self._own_iterator.close()  # folds the cursor: it stands after the last batch handed over
        assert self._batches is not None
        self._shares = Shares(self._batches, workers=self._count, waits=self.waits)
        self._board.post(self._handover())
        self._posted = True

    def started(self) -> Iterator[Any] | None:
        """The workers' DataLoader iterator once started (waits for the start), for its
        shutdown; workers still waiting for a position are told to stop first."""
        if not self._launched:  # no batch was drawn: no worker was started
            self._launched = True
            self._abandon()
            return None
        self._thread.join()
        if self._batches is not None and not self._posted:
            self._board.post_stop()
            self._posted = True
        return self._batches

    def close(self) -> None:
        """After the workers' shutdown: close the board's pipes (kept workers that started keep them)."""
        if not self._keep or self._batches is None:
            self._board.close()
