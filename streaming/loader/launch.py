"""``Launch``: how a loader's iterator starts the DataLoader's batches and gathers them.

The loader (``loader.py``) holds its settings and makes one ``Launch`` when it is
built; each of its iterators (``iterators.py``) does the work through it: take
the host's position at the first ``next()`` (``begin``), start the worker
processes (``start``; with ``persistent_workers``, restart the kept ones and post
them the position), and gather each batch from the workers' shares (``gather``).
The loader itself calls none of these, so nothing calls back from the iterator
into the loader.
"""

from __future__ import annotations

import functools
import multiprocessing.forkserver
import sys
import weakref
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import torch
from torch.utils.data import DataLoader

from .. import _compat
from ..core.lifecycle import Guarded
from ..core.stats import Waits
from ..dataset.host import LoaderHost
from ..workers import cut, transfer
from ..workers.board import Board
from ..workers.shares import Gathering, Shares, release_kept
from ..workers.supervisor import supervise
from ..workers.worker import ReportingCollate, SentShare
from . import plain
from .headstart import HeadStart, seeded
from .plain import PlainBatches

__all__ = ["PRELOAD", "Launch"]

PRELOAD = ("torch", "numpy", "pyarrow", "streaming.loader.loader")
"""What the fork server imports once for every worker; never Lance (not fork-safe once
loaded), which ``streaming.loader.loader`` does not import. A loader with workers starts
the fork server when it is built, so that these imports (about 2 s on 2 cores, torch's
most of it) run while the program builds its model, not after its first ``iter()``."""

_PRELOAD_HERE = sys.platform.startswith("linux")
"""Only on Linux: on macOS, forking after torch/numpy loaded Apple's frameworks is unsafe."""


class Launch:
    """One loader's way to start and gather its batches (package-internal).

    ``framework_counts`` is set by the loader's ``len()`` when a framework counted
    the whole epoch (then an iterator over a finished epoch does not warn).
    """

    def __init__(
        self,
        loader: DataLoader[Any],
        host: LoaderHost,
        *,
        collate: ReportingCollate,
        gathering: Gathering,
        columnar: bool,
        chosen_here: bool,
        persistent: bool,
        head_start: bool = False,
    ) -> None:
        self._loader_ref = weakref.ref(loader)  # weakly: see ``_loader``
        num_workers = loader.num_workers
        self._head_start = head_start and num_workers > 0  # see ``loader.headstart``
        self._host = host
        self.persistent = persistent and num_workers > 0  # workers kept between iterators
        self._collate, self._gathering, self._columnar = collate, gathering, columnar
        # a fork server the loader chose is preloaded; a context the user passed is left alone
        context = loader.multiprocessing_context
        self._preload = chosen_here and _PRELOAD_HERE and context.get_start_method() == "forkserver"
        if self._preload and num_workers > 0:  # its imports overlap whatever runs before iter()
            _compat.forkserver_preload(context, PRELOAD)
            if not self._head_start:  # with one, it starts after the first batch: never beside its read
                multiprocessing.forkserver.ensure_running()
        self._board: Board | None = None  # persistent_workers: the pipes to the kept workers
        self.framework_counts = False

    @property
    def _loader(self) -> DataLoader[Any]:
        """The loader, alive while anyone can call this ``Launch`` (it and its iterators
        hold it).

        Held weakly so that dropping a loader frees it, and the DataLoader iterator
        that keeps persistent workers, by reference counting, as with torch's own
        DataLoader. In a reference cycle they would be freed by the cycle collector,
        which runs the finalizers of the iterator's index queues (ending their feeder
        threads) before the iterator's ``__del__``: the final ``None`` it puts on each
        queue never reaches the workers, and torch waits 5 s for each one, then kills it.
        """
        loader = self._loader_ref()
        if loader is None:
            raise RuntimeError("the StreamingDataLoader of this iterator was garbage-collected")
        return loader

    @property
    def num_workers(self) -> int:
        """The loader's worker count (kept by the loader alone)."""
        return self._loader.num_workers

    def __getstate__(self) -> dict[str, Any]:
        """A pickled (or deep-copied) loader takes its ``Launch`` along, the loader in place
        of the weak reference."""
        return {**self.__dict__, "_loader_ref": self._loader}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _loader_ref=weakref.ref(state["_loader_ref"]))

    def begin(self, *, stacklevel: int) -> None:
        """At an iterator's first ``next()``: the host takes its position; a framework
        that counts epochs asks past a replay allowance, so then no warning."""
        self._host.begin_iteration(stacklevel=stacklevel + 1, warn=not self.framework_counts)

    def start(
        self, iterator: Guarded
    ) -> tuple[Iterator[Any] | HeadStart, transfer.Channel | None, Guarded | None]:
        """Start the DataLoader's batches at the host's position for ``iterator``.

        Returns the batches, their shared-memory channel, and the host's own
        iterator (``num_workers=0``) that ``iterator`` wraps. Without workers the
        items come straight from the host's iterator (``plain``), as torch's
        single-process iterator would give them.
        """
        loader, host = self._loader, self._host
        if plain.eligible(loader, num_workers=self.num_workers):
            self._collate.channel = None
            with host.shipping(batch_size=loader.batch_size or 1, columnar=self._columnar):
                items = plain.items(loader)
            return items, None, host.hold(iterator)
        keep = self.persistent
        if keep and self._kept_alive():
            try:
                return self._restart_kept(), None, host.hold(iterator)
            except RuntimeError:
                if self._kept_alive():  # not a kept worker that died as it was restarted
                    raise
        if self._preload:
            _compat.forkserver_preload(loader.multiprocessing_context, PRELOAD)
        channel = self._channel()
        if self._head_start and not loader.pin_memory and loader.timeout == 0:
            return self._start_ahead(iterator, channel)
        board = Board(loader.multiprocessing_context, self.num_workers) if keep else None
        with host.shipping(batch_size=loader.batch_size or 1, columnar=self._columnar, board=board):
            batches = DataLoader.__iter__(loader)
        supervise(batches, description="iter(loader)")  # dead workers, semaphore names
        if keep:  # the workers, their pipes and their shared memory live as long as the iterator
            self._board = board
            weakref.finalize(batches, release_kept, channel, board, num_workers=self.num_workers)
            channel = None
        return batches, channel, host.hold(iterator)

    def _start_ahead(
        self, iterator: Guarded, channel: transfer.Channel | None
    ) -> tuple[HeadStart, transfer.Channel | None, Guarded | None]:
        """Start the workers on a thread and draw the first batches here meanwhile
        (``loader.headstart``). The user's random stream advances as torch's iterator
        would advance it: one draw, here; the workers' base seed comes from it."""
        loader, host, keep = self._loader, self._host, self.persistent
        seed = int(torch.empty((), dtype=torch.int64).random_(generator=loader.generator).item())
        board = Board(loader.multiprocessing_context, self.num_workers, first_waits=True)
        shipping = ExitStack()
        shipping.enter_context(
            host.shipping(batch_size=loader.batch_size or 1, columnar=self._columnar, board=board)
        )
        try:
            own_items = plain.PlainItems(loader.collate_fn, iter(loader.dataset))
            own_iterator = host.hold(iterator)
        except BaseException:
            shipping.close()
            board.close()
            raise

        start_workers = functools.partial(self._start_workers, seed, shipping, board, channel)
        own: Shares | PlainBatches = (
            PlainBatches(
                plain.uncollated(own_items), batch_size=loader.batch_size or 1, drop_last=loader.drop_last
            )
            if self._columnar
            else Shares(own_items, workers=1)
        )
        ahead = HeadStart(
            own,
            own_iterator,
            start_workers,
            board=board,
            handover=host.handover,
            gathering=self._gathering,
            workers=self.num_workers,
            keep=keep,
            abandon=shipping.close,
        )
        return ahead, None if keep else channel, own_iterator

    def _start_workers(
        self, seed: int, shipping: ExitStack, board: Board, channel: transfer.Channel | None
    ) -> Iterator[Any]:
        """On the head start's thread: start the workers (their pickles made while
        ``shipping``), then end ``shipping``; kept workers keep ``board`` and ``channel``."""
        loader = self._loader
        try:
            with seeded(loader, seed):
                batches = DataLoader.__iter__(loader)
        finally:
            shipping.close()
        supervise(batches, description="iter(loader)")  # dead workers, semaphore names
        if self.persistent:  # as ``start``: the workers' pipes and shared memory live as long as they do
            self._board = board
            weakref.finalize(batches, release_kept, channel, board, num_workers=self.num_workers)
        return batches

    def _kept_alive(self) -> bool:
        """Whether the loader keeps workers and every one of them is alive.

        A kept worker may die while no iterator waits on it (killed after it read ahead,
        or after a newer iterator superseded the one it fed), or as they restart: then
        the kept workers are stopped and forgotten here, and the caller starts new ones,
        which begin where the host stands (the last batch handed to the loop), as after
        any other ``iter()``. No batch of the new iterator was drawn yet, so nothing is
        lost or repeated.
        """
        loader = self._loader
        kept = _compat.persistent_iterator(loader)
        if kept is None or self._board is None:
            return False
        if all(process.is_alive() for process in _compat.worker_processes(kept)):
            return True
        _compat.drop_persistent_iterator(loader)
        self._board = None
        return False

    def _restart_kept(self) -> Iterator[Any]:
        """``persistent_workers=True``, workers running: they start a new iterator, then load
        where the host stands now (its ``handover()``: position, epoch and version)."""
        loader, host = self._loader, self._host
        with host.shipping(batch_size=loader.batch_size or 1, columnar=self._columnar):
            batches = DataLoader.__iter__(loader)  # torch's _reset: every worker calls iter() again
        assert self._board is not None
        self._board.post(host.handover())
        return batches

    def _channel(self) -> transfer.Channel | None:
        """The shared-memory channel of the batches about to start (set on the collate)."""
        loader, channel = self._loader, None
        if self.num_workers > 0 and self._columnar and transfer.available():
            channel = transfer.Channel.new(slots=((loader.prefetch_factor or 2) + 2) * cut.MESSAGE_SHARES)
        self._collate.channel = channel
        return channel

    def shares(
        self, batches: Iterator[Any] | HeadStart, *, waits: Waits | None = None
    ) -> Shares | PlainBatches | HeadStart:
        """What ``gather`` draws the batches of ``batches`` (from ``start``) from: whole
        columnar batches of the trainer's own process are finished as they come
        (``plain``), else every worker's shares are sorted and assembled."""
        loader = self._loader
        if isinstance(batches, HeadStart):
            batches.waits = waits  # for the workers' shares, once they take over
            return batches
        if self._columnar and plain.eligible(loader, num_workers=self.num_workers):
            source = plain.uncollated(batches)
            return PlainBatches(source, batch_size=loader.batch_size or 1, drop_last=loader.drop_last)
        return Shares(batches, workers=self.num_workers, waits=waits if self.num_workers > 0 else None)

    def gather(self, shares: Shares | PlainBatches | HeadStart | None) -> tuple[list[SentShare], Any] | None:
        """The next batch of ``shares`` (see ``Gathering.gather``).

        Kept workers that failed (a dead worker, a batch that failed on arrival) are
        stopped, so the next ``iter()`` starts new ones.
        """
        assert shares is not None
        if isinstance(shares, PlainBatches):
            return shares.next_batch()
        try:
            if isinstance(shares, HeadStart):
                return shares.gather()
            return self._gathering.gather(shares)
        except StopIteration:
            raise
        except BaseException:
            if self.persistent:  # kept workers may be dead or mid-batch: start new ones
                _compat.drop_persistent_iterator(self._loader)
            raise
