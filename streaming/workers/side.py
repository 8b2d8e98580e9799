"""The worker half of an engine: the one piece of worker code the dataset and the mixture share.

Both engines (``dataset/engine.py``, ``mixture/engine.py``) own one ``WorkerSide``.
It holds what a ``StreamingDataLoader`` hands down while it starts an iterator
(``shipping``: the batch size, whether shares are columnar, a persistent loader's
``Board``), and does what every process that iterates an engine does the same way:
find its place once (``place``: the one reader of torch's ``get_worker_info()``,
which also arms the worker's watchdog), continue where the trainer stands in a
persistent worker (``resume``), send its shares as DataLoader messages (``send``)
and report its progress (``report``). What each engine reads and how it orders a
batch stay in the engine.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Generator, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..core.progress import SplitProgress, WorkerReport
from ..core.world import World
from ..tables import source
from . import cut, watchdog
from .board import STOP, Board

__all__ = ["Shipped", "WorkerSide", "find_world"]

_LOG = logging.getLogger("streaming")


def _worker_info() -> Any:
    """torch's ``get_worker_info()``; imported here so that building an engine (the
    command line plans tables with one) never imports torch."""
    from torch.utils.data import get_worker_info

    return get_worker_info()


def find_world(rank: int = 0, world_size: int = 1, *, override: Any = None) -> World:
    """This process's place: rank ``rank`` of ``world_size``, and the DataLoader worker it is
    (torch's ``get_worker_info()``, or ``override``, a testing hook with ``id`` and
    ``num_workers`` that takes precedence; a warning says so inside a real worker)."""
    real = _worker_info()
    if override is not None and real is not None:
        _LOG.warning(
            "worker_info_override (worker %s of %s) takes precedence over DataLoader worker "
            "%d of %d: this process reads the override's splits, so workers may read the "
            "same rows or leave rows out; the override is a testing hook for iterating "
            "without a DataLoader",
            override.id,
            override.num_workers,
            real.id,
            real.num_workers,
        )
    info = real if override is None else override
    if info is None:
        return World(rank, world_size)
    return World(rank, world_size, int(info.id), int(info.num_workers), in_worker=real is not None)


@dataclass(frozen=True)
class Shipped:
    """What a loader hands an engine as it starts an iterator: each process yields its
    share of every batch of ``batch_size`` (of columnar pieces with ``columnar``)."""

    batch_size: int
    columnar: bool


class WorkerSide:
    """An engine's worker half (package-internal); pickled with its engine."""

    def __init__(self, shipped: Shipped | None = None, board: Board | None = None) -> None:
        self.shipped = shipped  # while a loader starts its iterator
        self._board = board  # a persistent loader's pipes to its workers

    @contextmanager
    def shipping(self, *, batch_size: int, columnar: bool, board: Board | None) -> Iterator[None]:
        """While a loader starts its iterator: iterators yield shares, and pickles for new
        worker processes carry ``board``."""
        self.shipped, self._board = Shipped(batch_size, columnar), board
        try:
            yield
        finally:
            self.shipped, self._board = None, None

    def place(self, rank: int, world_size: int, *, trainer_pid: int | None, override: Any = None) -> World:
        """This process's ``World`` as an iterator starts; in a worker process, refuse a
        forked Lance and end the worker with its trainer (``watchdog``)."""
        world = find_world(rank, world_size, override=override)
        if world.in_worker:
            source.check_fork_safety()
            watchdog.watch_trainer(trainer_pid)
        return world

    def resume(self, world: World, reset: Callable[[dict[str, Any]], None]) -> bool:
        """In a worker whose trainer posts positions (a persistent worker's later iterator,
        any iterator of a loader that starts with a head start): ``reset`` to where the
        trainer stands (its engine's ``handover()``, posted on the board); elsewhere
        nothing. False when the trainer posted ``STOP``: the iterator reads nothing."""
        if self._board is None or not world.in_worker:  # the trainer's own iterator is the poster
            return True
        posted = self._board.received(world.worker)
        if posted == STOP:
            return False
        if posted is not None:
            reset(posted)
        return True

    def send(
        self,
        shares: Iterator[cut.Share],
        world: World,
        *,
        report: Callable[[], WorkerReport],
        row_bytes: Callable[[], float],
    ) -> Generator[list[cut.Share], None, None]:
        """The DataLoader items of ``shares``: grouped into messages with their reports in
        a worker process, one at a time in the trainer's own (``cut.messages``)."""
        return cut.messages(shares, in_worker=world.in_worker, report=report, row_bytes=row_bytes)

    @staticmethod
    def report(
        world: World, progress: Mapping[int, SplitProgress], counters: dict[str, float]
    ) -> WorkerReport:
        """What this process's share carries: its worker, pid, splits' progress, counters."""
        return WorkerReport(world.worker, os.getpid(), progress, counters)

    def pickled(self, *, for_child: bool) -> WorkerSide:
        """The copy a pickle carries: the board only to a child process."""
        return WorkerSide(self.shipped, self._board if for_child else None)
