"""``MixtureEngine``: the machinery behind ``StreamingMixture``, and the loaders' side of it.

The facade (``mixture.py``) checks the user's settings, builds one engine and
forwards its public members to it; the mixture's loader reaches the engine
through ``dataset.host.mixture_engine`` and calls it through ``MixtureHost``. The
engine reads its sources through their engines (``MixtureSource``), and in a
persistent worker loads the position the trainer posts (``reset``).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Generator, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import numpy as np

from .. import _compat
from ..core import stats
from ..core.lifecycle import Guarded, Samples
from ..core.optionchecks import as_epoch
from ..core.progress import WorkerReport
from ..core.world import World
from ..errors import EpochCompleteWarning
from ..workers.board import Board
from ..workers.cut import Share
from .positioned import MixturePositioned
from .read import RankStream, share_of
from .schedule import SourcePosition, batch_order

__all__ = ["MixtureEngine"]


class MixtureEngine(MixturePositioned):
    """One rank's mixture: its position (``MixturePositioned``), iterators and counters
    (package-internal)."""

    # -- iteration ----------------------------------------------------------------

    def iterate(self) -> Iterator[Any]:
        """Yield this rank's samples, batch after batch, from the committed position.

        In a plain DataLoader's worker w of k, the worker's own share of every batch
        (the samples of its splits, in the batch's order) is yielded. A new iterator
        closes an older one that has not finished (its later ``next()`` raises
        ``RuntimeError``).
        """
        first = next(iter(self.sources.values()))
        world = self._side.place(first.rank, first.world_size, trainer_pid=self._lifecycle.trainer_pid)
        self._world = world
        begin = not self._lifecycle.for_loader and not world.in_worker
        if begin:
            self.supersede("iter(mixture)")
        shipped = self._side.shipped
        stream = self._samples(world, loader=None if shipped is None else shipped.columnar, begin=begin)
        if shipped is not None:
            counters = [data.counters for data in self.sources.values()]
            stream = self._side.send(
                stream, world, report=self.worker_report, row_bytes=lambda: stats.row_bytes(counters)
            )
        iterator = Samples(stream, "iter(mixture)")
        self._lifecycle.live.hold(iterator)
        return iterator

    def _samples(
        self, world: World, *, loader: bool | None, begin: bool = False
    ) -> Generator[Any, None, None]:
        """This process's samples from the position at the first ``next()`` (``begin``:
        warn there if the epoch ended); for a loader (``loader`` says whether columnar),
        its share of every batch (``world``: which worker of how many it is)."""
        if begin:
            self.begin_iteration(stacklevel=5)
        self._side.resume(world, self.reset)  # a persistent worker: the trainer's position now
        streams = {name: RankStream(data, name=name, world=world) for name, data in self.sources.items()}
        position, first = self.position, True
        try:
            while True:
                nxt = self.schedule.advance(position)
                if nxt is None:
                    return
                step, after = nxt
                items, where, size = share_of(step, streams, columnar=bool(loader))
                order = self._order(position.step, size)
                if loader is not None:
                    if world.workers == 1:
                        self.position = after  # the trainer's own process: the batch is handed out whole
                    slots = _slots(where, order, size)
                    yield Share(items if len(where) else None, slots, size, bool(loader), first)
                    first = False
                else:  # in a plain DataLoader's worker, its own samples of the batch, in order
                    samples = [items[i] for i in np.argsort(_slots(where, order, size), kind="stable")]
                    yield from samples[:-1]
                    self.position = after  # the batch is whole once its last sample goes
                    if samples:
                        yield samples[-1]
                position = after
        finally:
            for stream in streams.values():
                stream.close()

    def _order(self, step: int, size: int) -> range | list[int]:
        """The order of this rank's ``size`` samples of batch ``step``."""
        if self.seed is None:
            return range(size)
        return batch_order(self.seed, epoch=self.epoch, step=step, rank=self.rank, size=size)

    # -- package-internal: the loader's host protocol (see dataset/host.py) --------

    def user_functions(self) -> list[tuple[str, object]]:
        """(keyword, value) of the sources' functions a worker process must unpickle."""
        return [("transform", data.options.transform) for data in self.sources.values()]

    def supersede(self, description: str) -> None:
        """A new iterator (``description``) closes the live one."""
        self._lifecycle.supersede(description)

    def hold(self, iterator: Guarded) -> Guarded | None:
        """Make a loader's iterator the live one; return the mixture's own iterator it
        wraps, if any (``num_workers=0``)."""
        return self._lifecycle.hold(iterator)

    def begin_iteration(self, *, stacklevel: int, warn: bool = True) -> None:
        """At an iterator's first ``next()``: warn when the epoch has ended."""
        if warn and self.schedule.advance(self.position) is None:
            warnings.warn(
                f"epoch {self.epoch} of this mixture has ended, so this iterator yields nothing; "
                f"call set_epoch({self.epoch + 1}) to start another",
                EpochCompleteWarning,
                stacklevel=stacklevel,
            )

    def set_epoch(self, epoch: int) -> None:
        """Start mixture epoch ``epoch`` (a no-op for the current one).

        Every source starts its next epoch it has not begun (position 0); the
        long-run shares carry on. An unfinished iterator is closed first.
        """
        epoch = as_epoch(epoch)
        if epoch == self.epoch:
            return
        self._lifecycle.set_epoch(epoch)
        sources = {
            name: SourcePosition(epoch=where.epoch + (1 if where.taken else 0))
            for name, where in self.position.sources.items()
        }
        self.position = dataclasses.replace(self.position, step=0, sources=sources)
        self.epoch = epoch

    @contextmanager
    def shipping(self, *, batch_size: int, columnar: bool, board: Board | None = None) -> Iterator[None]:
        """While a loader starts its iterator: the pickles (the sources' too) are the
        loader's, and the iterators yield one ``Share`` per batch (of columns with
        ``columnar``): each process's share, read from its own splits of every source."""
        # batch_size is always the mixture's own
        with ExitStack() as stack:
            stack.enter_context(self._lifecycle.shipping())
            for data in self.sources.values():
                stack.enter_context(data.shipping(batch_size=1, columnar=False))
            stack.enter_context(self._side.shipping(batch_size=batch_size, columnar=columnar, board=board))
            yield

    def worker_report(self) -> WorkerReport:
        """In a worker process: the read counters of its sources (package-internal)."""
        counters = stats.total([data.counters.as_dict() for data in self.sources.values()])
        return self._side.report(self._world, {}, counters)

    def commit_counters(self, report: WorkerReport) -> None:
        """Keep a worker's latest counters (package-internal: its share was delivered)."""
        self._worker_counters[(report.pid, report.worker)] = report.counters

    def stats(self) -> dict[str, float]:
        """``StreamingMixture.stats`` (its docstring says what each entry counts)."""
        parts = [data.counters.as_dict() for data in self.sources.values()]
        return {"step": self.position.step, **stats.total([*parts, *self._worker_counters.values()])}

    def commit_step(self) -> None:
        """A loader handed one batch (from a worker) to the trainer."""
        nxt = self.schedule.advance(self.position)
        if nxt is None:
            raise RuntimeError(
                "a batch arrived after the mixture's end: the workers disagree with the trainer"
            )
        self.position = nxt[1]

    def __getstate__(self) -> dict[str, Any]:
        """Pickle for a worker process: settings, sources and position, no handles."""
        state = dict(self.__dict__)
        for_child = _compat.pickling_for_child_process()
        state["_lifecycle"] = self._lifecycle.pickled(for_child=for_child)
        state["_side"] = self._side.pickled(for_child=for_child)
        state["_worker_counters"] = {}
        return state


def _slots(where: np.ndarray, order: range | list[int], size: int) -> np.ndarray:
    """The slots in the ordered batch of the samples at offsets ``where`` before it was
    ordered (the batch's sample i is the one at offset ``order[i]``)."""
    if isinstance(order, range):
        return where
    inverse = np.empty(size, dtype=np.int64)
    inverse[np.asarray(order, dtype=np.int64)] = np.arange(size, dtype=np.int64)
    return inverse[where]
