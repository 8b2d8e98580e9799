"""``MixturePositioned``: a mixture's schedule, the committed position in it, and its checkpoints.

The half of the mixture's engine (``engine.MixtureEngine``) that owns the position, as
``dataset/positioned.py`` is the dataset engine's: it makes the schedule and the position
in its constructor, and ``state_dict``, ``handover``, ``load_state_dict`` and ``reset``
live here, next to them. Iteration and the loaders' protocol live in ``engine.py``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..core.lifecycle import Lifecycle
from ..core.progress import SplitProgress
from ..core.world import World
from ..dataset.host import MixtureSource
from ..workers.side import WorkerSide
from .checks import check_fits
from .schedule import MixPosition, Schedule, SourcePosition, split_counts
from .state import MixtureState, check_settings, weights_differ
from .state import check_sources as check_saved_sources

__all__ = ["MixturePositioned"]


class MixturePositioned:
    """Where one rank's mixture stands: its schedule and position, and its checkpoints
    (package-internal).

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
        self._world = World()  # the place of this process's iterator (see ``engine``)
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
