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
from collections.abc import Generator, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from typing import Any

import numpy as np

from .. import _compat
from ..core import stats
from ..core.lifecycle import Guarded, Lifecycle, Samples
from ..core.optionchecks import as_epoch
from ..core.progress import SplitProgress, WorkerReport
from ..core.world import World
from ..dataset.host import MixtureSource
from ..errors import EpochCompleteWarning
from ..workers.board import Board
from ..workers.cut import Share
from ..workers.side import WorkerSide
from .checks import check_fits
from .read import RankStream, share_of
from .schedule import MixPosition, Schedule, SourcePosition, batch_order, split_counts
from .state import MixtureState, check_settings, weights_differ
from .state import check_sources as check_saved_sources

__all__ = ["MixtureEngine"]


class MixtureEngine:
    """One rank's mixture: schedule, position, iterators and counters (package-internal).

    ``sources`` (name -> the source's engine, in batch order), ``given`` (the
    weights as given), ``unit``, ``seed``, ``schedule``, ``position`` and ``epoch``
    are read by the facade; only the engine changes them.
    """

    def __init__(
        self,
        sources: Mapping[str, MixtureSource],
        *,
        given: Mapping[str, float],
        schedule: Schedule,
        unit: int,
        seed: int | None,
    ) -> None:
        self.sources = dict(sources)
        self.given, self.unit, self.seed = dict(given), unit, seed
        self.schedule = dataclasses.replace(schedule, epoch_samples=self._epoch_samples())
        check_fits(self.schedule)
        self.position = self.schedule.start({name: data.epoch for name, data in self.sources.items()})
        self.epoch = 0
        self._lifecycle = Lifecycle()  # the live iterator; shipped to a plain DataLoader's workers
        self._side = WorkerSide()  # what a loader hands down; this process's place and shares
        self._world = World()  # the place of this process's iterator
        self._worker_counters: dict[tuple[int, int], dict[str, float]] = {}

    def _epoch_samples(self) -> dict[str, int]:
        return {name: data.num_splits * data.split_length for name, data in self.sources.items()}

    @property
    def endless(self) -> bool:
        """True for ``stop="never"``."""
        return self.schedule.rule.endless

    @property
    def rank(self) -> int:
        """This process's rank."""
        return next(iter(self.sources.values())).rank

    @property
    def batch_size(self) -> int:
        """Samples of one batch on this rank."""
        return self.schedule.global_batch_size // next(iter(self.sources.values())).world_size

    def epoch_steps(self) -> int:
        """Global batches of a whole epoch; for ``stop="never"``, those until the first
        source would run out, counted from fresh epochs of every source (package-internal)."""
        if not self.endless:
            return self.position.step + (self.schedule.remaining_steps(self.position) or 0)
        finite = self.schedule.counted()
        epochs = {name: where.epoch for name, where in self.position.sources.items()}
        return finite.remaining_steps(finite.start(epochs)) or 0

    def length(self) -> int:
        """Samples this rank's next iterator yields (whole batches).

        Raises:
            TypeError: ``stop="never"``: the mixture has no end.
        """
        steps = self.schedule.remaining_steps(self.position)
        if steps is None:
            raise TypeError("a StreamingMixture with stop='never' has no len(); count steps")
        return steps * self.batch_size

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

    # -- checkpoints ----------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The position after the last whole global batch, as plain JSON data.

        The same on every rank, every world size and worker count; it holds every
        source's single-table state at its position. Never contains credentials.

        Raises:
            RuntimeError: the mixture was iterated by a plain DataLoader's workers.
        """
        if self._lifecycle.shipped:
            raise RuntimeError(
                "this mixture was sent to the worker processes of a plain DataLoader, whose "
                "progress never reaches this process; iterate it with "
                "streaming.StreamingDataLoader, which counts each batch as it is returned"
            )
        return self.handover()

    def handover(self) -> dict[str, Any]:
        """The mixture's state now, for the loader's persistent workers (package-internal)."""
        tables = {name: self._table_state(name, where) for name, where in self.position.sources.items()}
        return MixtureState(
            global_batch_size=self.schedule.global_batch_size,
            unit=self.unit,
            stop=self.schedule.stop,
            seed=self.seed,
            weights=self.given,
            epoch=self.epoch,
            position=self.position,
            tables=tables,
        ).to_dict()

    def _table_state(self, name: str, where: SourcePosition) -> dict[str, Any]:
        data = self.sources[name]
        counts = split_counts(where.taken, data.num_splits)
        progress = [SplitProgress(samples=count, positions=count) for count in counts]
        described = data.describe(data.view_at(where.epoch), progress)
        return dataclasses.replace(described, owned_splits=tuple(range(data.num_splits))).to_dict()

    def load_state_dict(self, state: dict[str, Any], *, reweight: bool = False) -> None:
        """``StreamingMixture.load_state_dict`` (its docstring says what is checked)."""
        self._lifecycle.refuse_started("load_state_dict")  # an unstarted one follows the load
        saved = MixtureState.from_dict(state)
        check_saved_sources(list(saved.tables), list(self.sources))
        settings = {
            "global_batch_size": self.schedule.global_batch_size,
            "unit": self.unit,
            "stop": self.schedule.stop,
            "seed": self.seed,
        }
        check_settings(saved, settings)
        changed = weights_differ(saved.weights, self.given)
        if changed and not reweight:
            raise ValueError(
                f"checkpoint has weights={saved.weights!r} but this mixture has "
                f"weights={self.given!r}; pass reweight=True to load_state_dict to keep "
                "everything delivered and use the new weights from here on, or build the "
                f"mixture with weights={saved.weights!r}"
            )
        loads = {name: self._checked_table(name, saved) for name in self.sources}
        for name, (view, progress) in loads.items():
            self.sources[name].adopt(view, progress)
        schedule = dataclasses.replace(self.schedule, epoch_samples=self._epoch_samples())
        position: MixPosition = saved.position
        if changed:
            schedule, position = schedule.reweighted(self.schedule.weights, position)
        self.schedule, self.position, self.epoch = schedule, position, saved.epoch
        self._lifecycle.shipped = False
        check_fits(self.schedule)  # the pinned snapshots may hold fewer rows than the constructed ones

    def _checked_table(self, name: str, saved: MixtureState) -> tuple[Any, Any]:
        data, table, where = self.sources[name], saved.tables[name], saved.position.sources[name]
        try:
            view, progress = data.check_load(table)
        except ValueError as error:
            raise ValueError(f"source {name!r}: {error}") from None
        counts = [entry.samples for entry in progress]
        if view.epoch != where.epoch or counts != split_counts(where.taken, view.plan.settings.num_splits):
            raise ValueError(
                f"source {name!r}: its table state (epoch {view.epoch}) does not match its "
                f"position (epoch {where.epoch}, {where.taken} samples taken); the checkpoint "
                "is damaged or was edited"
            )
        return view, progress

    def reset(self, handover: dict[str, Any]) -> None:
        """In a persistent worker: take the trainer's position (``handover()``); the
        sources' read counters carry on (package-internal)."""
        saved = MixtureState.from_dict(handover)
        for name, data in self.sources.items():
            data.reset(saved.tables[name])
        self.schedule = dataclasses.replace(self.schedule, epoch_samples=self._epoch_samples())
        self.position, self.epoch = saved.position, saved.epoch


def _slots(where: np.ndarray, order: range | list[int], size: int) -> np.ndarray:
    """The slots in the ordered batch of the samples at offsets ``where`` before it was
    ordered (the batch's sample i is the one at offset ``order[i]``)."""
    if isinstance(order, range):
        return where
    inverse = np.empty(size, dtype=np.int64)
    inverse[np.asarray(order, dtype=np.int64)] = np.arange(size, dtype=np.int64)
    return inverse[where]
