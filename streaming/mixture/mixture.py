"""``StreamingMixture``: several tables mixed by weights into one exactly resumable stream."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from torch.utils.data import IterableDataset

from ..dataset import host as hosts
from ..dataset.dataset import StreamingDataset
from .checks import check_batch, check_columns, check_names, check_seed, check_sources, check_unit
from .engine import MixtureEngine
from .schedule import Schedule, normalise_weights, stop_rule
from .state import merge_mixture_states

__all__ = ["StreamingMixture"]


class StreamingMixture(IterableDataset[Any]):
    """Several ``StreamingDataset`` sources mixed by weights, with exact, elastic resume.

    Every global batch of ``global_batch_size`` samples holds a fixed number of
    samples of each source, a multiple of ``unit``: floor or ceil of its share, with
    the shares exact in the long run (within one unit at every step). The numbers
    are the same for every world size and worker count, and every rank takes
    ``global_batch_size / world_size`` samples per batch, the same number of each
    source on every rank. Each source keeps its own splits, plan, filter and
    columns, and is read in its own plan's order; a source that runs out continues
    into its own next epoch or ends the mixture, as ``stop`` says.

    Args:
        sources: Name -> ``StreamingDataset``, all built for this rank and world
            size; the order given is the order inside every batch.
        weights: Name -> positive weight (normalised); the same names.
        global_batch_size: Samples of one batch over all ranks (a multiple of
            ``unit``); the loader's ``batch_size`` is this over ``world_size``.
        stop: ``"never"`` (every source repeats, endless), ``"first_exhausted"``
            (end before the first batch a source cannot fill from its epoch) or
            ``"all_exhausted"`` (sources repeat until the last one to run out cannot
            fill its share). The rows a source cannot fill a batch with when the
            mixture ends are not delivered (fewer than its share of one batch).
        unit: Samples of a source per batch come in multiples of this; it must
            divide every source's ``num_splits`` and be a multiple of every world
            size the job will run on. Default: the gcd of the sources' ``num_splits``.
        seed: Each rank's batch is put in an order seeded from (seed, epoch, step,
            rank), so micro-batches cut from it mix the sources too; ``None`` keeps
            the sources' samples together, in source order. Which samples a batch
            holds never depends on it.

    Not guaranteed: samples of a partial batch taken by a plain ``for`` loop over the
    mixture are delivered again after a resume (the state counts whole batches; a
    ``StreamingDataLoader`` with the mixture's batch size never leaves one).

    Raises:
        TypeError: ``sources`` is not a dict of ``StreamingDataset``.
        ValueError: a setting out of range or sources that cannot be mixed (the
            message names the source, the field and the fix).
    """

    def __init__(
        self,
        sources: Mapping[str, StreamingDataset],
        *,
        weights: Mapping[str, float],
        global_batch_size: int,
        stop: str = "never",
        unit: int | None = None,
        seed: int | None = 0,
    ) -> None:
        self._sources = check_sources(sources)
        check_columns(self._sources)
        check_names(weights, list(self._sources))
        stop_rule(stop)  # refuses a name that is none of STOP_RULES
        checked_unit = check_unit(unit, self._sources)
        checked_seed = check_seed(seed)
        batch = check_batch(global_batch_size, checked_unit)
        exact = normalise_weights(weights)  # checks every weight first
        schedule = Schedule(
            weights=exact, global_batch_size=batch, unit=checked_unit, epoch_samples={}, stop=stop
        )
        self._engine = MixtureEngine(
            {name: hosts.source_engine(data) for name, data in self._sources.items()},
            given={name: float(weight) for name, weight in weights.items()},
            schedule=schedule,
            unit=checked_unit,
            seed=checked_seed,
        )
        hosts.attach(self, self._engine)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled for a worker process: the sources and the engine (no handles)."""
        return {"sources": self._sources, "engine": self._engine}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._sources, self._engine = state["sources"], state["engine"]
        hosts.attach(self, self._engine)

    def __repr__(self) -> str:
        engine = self._engine
        return (
            f"StreamingMixture(sources={list(self._sources)}, weights={engine.given}, "
            f"global_batch_size={self.global_batch_size}, unit={engine.unit}, stop={self.stop!r}, "
            f"seed={engine.seed}, epoch={engine.epoch}, step={engine.position.step})"
        )

    # -- properties -------------------------------------------------------------

    @property
    def sources(self) -> dict[str, StreamingDataset]:
        """The sources by name, in batch order."""
        return dict(self._sources)

    @property
    def weights(self) -> dict[str, float]:
        """The weights as given (the shares are these normalised)."""
        return dict(self._engine.given)

    @property
    def global_batch_size(self) -> int:
        """Samples of one batch over all ranks."""
        return self._engine.schedule.global_batch_size

    @property
    def batch_size(self) -> int:
        """Samples of one batch on this rank: ``global_batch_size / world_size``."""
        return self.global_batch_size // self.world_size

    @property
    def unit(self) -> int:
        """Samples of a source per batch come in multiples of this."""
        return self._engine.unit

    @property
    def seed(self) -> int | None:
        """The seed of the order inside each rank's batch (``None``: source order)."""
        return self._engine.seed

    @property
    def stop(self) -> str:
        """The stopping rule."""
        return self._engine.schedule.stop

    @property
    def endless(self) -> bool:
        """True for ``stop="never"``."""
        return self._engine.endless

    @property
    def rank(self) -> int:
        """This process's rank."""
        return next(iter(self._sources.values())).rank

    @property
    def world_size(self) -> int:
        """Ranks of the job."""
        return next(iter(self._sources.values())).world_size

    @property
    def epoch(self) -> int:
        """The mixture's epoch (``set_epoch``); each source has its own plan epoch."""
        return self._engine.epoch

    @property
    def step(self) -> int:
        """Global batches delivered in this epoch (whole batches, as the state counts)."""
        return self._engine.position.step

    def batch_counts(self, steps: int) -> list[dict[str, int]]:
        """Samples of each source in each of the next ``steps`` global batches (all ranks)."""
        schedule, counts, position = self._engine.schedule, [], self._engine.position
        for _ in range(steps):
            nxt = schedule.advance(position)
            if nxt is None:
                break
            counts.append({name: nxt[0].count(name) for name in self._sources})
            position = nxt[1]
        return counts

    def __len__(self) -> int:
        """Samples this rank's next iterator yields (whole batches).

        Raises:
            TypeError: ``stop="never"``: the mixture has no end.
        """
        return self._engine.length()

    def __iter__(self) -> Iterator[Any]:
        """Yield this rank's samples, batch after batch, from the committed position.

        In a plain DataLoader's worker w of k, the worker's own share of every batch
        (the samples of its splits, in the batch's order) is yielded. A new iterator
        closes an older one that has not finished (its later ``next()`` raises
        ``RuntimeError``).
        """
        return self._engine.iterate()

    def set_epoch(self, epoch: int) -> None:
        """Start mixture epoch ``epoch`` (a no-op for the current one).

        Every source starts its next epoch it has not begun (position 0); the
        long-run shares carry on. An unfinished iterator is closed first.
        """
        self._engine.set_epoch(epoch)

    def stats(self) -> dict[str, float]:
        """Read counters of this rank since the mixture was built, summed over its sources
        and the DataLoader workers whose shares reached the trainer (as of their latest
        delivered batch): the totals of ``StreamingDataset.stats()`` (``rows_read``,
        ``bytes_read``, ...), growing across epochs alike for k=0, workers started per
        epoch and persistent workers; plus ``step``, the batches of this mixture epoch
        delivered (0 again in each epoch). Cheap: counters only."""
        return self._engine.stats()

    # -- checkpoints ----------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The position after the last whole global batch, as plain JSON data.

        The same on every rank, every world size and worker count; it holds every
        source's single-table state at its position. Never contains credentials.

        Raises:
            RuntimeError: the mixture was iterated by a plain DataLoader's workers.
        """
        return self._engine.state_dict()

    def load_state_dict(self, state: dict[str, Any], *, reweight: bool = False) -> None:
        """Resume from ``state`` (of any rank, world size or worker count).

        Everything is validated before anything changes. Each source pins the
        snapshot its part of the state names.

        Args:
            state: A mixture state (``state_dict()`` or ``merge_state_dicts``).
            reweight: Accept a state saved with other weights: what was delivered
                stays delivered, and this mixture's weights decide every later batch.

        Raises:
            ValueError: sources added, removed or renamed; another batch size, unit
                or stop rule; other weights without ``reweight=True``; any source's
                plan input that differs (named with the source); a malformed state.
            RuntimeError: an iterator of this mixture is unfinished and still held.
        """
        self._engine.load_state_dict(state, reweight=reweight)

    @staticmethod
    def merge_state_dicts(states: list[dict[str, Any]], *, allow_lag: bool = False) -> dict[str, Any]:
        """The state every rank of a new run loads: the ranks' states agree, so one of them.

        ``allow_lag`` is accepted for symmetry with ``StreamingDataset`` and ignored.

        Raises:
            ValueError: states of different steps or mixtures, or malformed ones.
        """
        del allow_lag
        return merge_mixture_states(states)
