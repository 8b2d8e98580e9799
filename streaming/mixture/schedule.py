"""How many samples of each source every global batch of a mixture holds: pure arithmetic.

A mixture cuts every global batch of G samples into ``G / unit`` *units* and gives
each source a whole number of units per batch. Per batch, source i gets
floor(M * w_i) or floor(M * w_i) + 1 units (M = G / unit, w_i its normalised weight);
the extra units of a batch go to the sources furthest behind their exact share
since the weights took effect, so the shares stay exact in the long run. Units
keep ranks equal: ``unit`` is a multiple of the world size, so every rank takes
the same number of each source's samples in every batch.

A source reads its own plan in its own global order (sample j of its epoch is
split j % S, position j // S), so where it stands is one number, ``taken``, the
same on every topology. When a batch needs more of a source than its epoch has
left, the stopping rule decides: ``"never"`` continues into the source's next
epoch (inside the batch), ``"first_exhausted"`` ends the mixture before that
batch, ``"all_exhausted"`` ends it only when every other source has run out at
least once (else the source continues into its next epoch).

No torch, no Lance.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np

from ..core.checks import is_number

__all__ = [
    "COUNTING_RULE",
    "RULES",
    "STOP_RULES",
    "StopRule",
    "batch_order",
    "MixPosition",
    "Schedule",
    "Segment",
    "SourcePosition",
    "Step",
    "normalise_weights",
    "split_counts",
    "stop_rule",
]


@dataclass(frozen=True)
class StopRule:
    """A stopping rule: what happens when a batch needs more of a source than its epoch has.

    Adding a rule is one entry in ``RULES``; nothing else compares rule names.
    """

    name: str
    endless: bool
    """The mixture never ends: it has no ``len()`` and no remaining steps, and a
    source smaller than its share of a batch repeats inside the batch."""
    continues: Callable[[AbstractSet[str], AbstractSet[str], AbstractSet[str]], bool]
    """``continues(sources, finished, short)``: whether the batch is still taken when
    the ``short`` sources run out inside it (they continue into their next epoch);
    ``finished`` are the sources that ran out before; False ends the mixture."""


RULES: dict[str, StopRule] = {
    rule.name: rule
    for rule in (
        StopRule(  # end when the last source to run out cannot fill its share
            "all_exhausted",
            endless=False,
            continues=lambda sources, finished, short: not sources <= finished | short,
        ),
        StopRule("first_exhausted", endless=False, continues=lambda *_: False),  # end at the first
        StopRule("never", endless=True, continues=lambda *_: True),  # every source repeats
    )
}
"""Every stopping rule, by name."""
STOP_RULES = tuple(RULES)
"""The names of the stopping rules, as ``stop=`` takes them."""
COUNTING_RULE = RULES["first_exhausted"]
"""The rule an endless mixture's epoch is counted by: until its first source runs out."""


def stop_rule(name: object) -> StopRule:
    """The rule ``stop=name`` names.

    Raises:
        ValueError: ``name`` is not one of ``STOP_RULES``.
    """
    try:
        return RULES[name]  # type: ignore[index]
    except (KeyError, TypeError):
        raise ValueError(f"stop={name!r} is not one of {STOP_RULES}") from None


def normalise_weights(weights: Mapping[str, float]) -> dict[str, Fraction]:
    """Exact fractions summing to 1, in the order given (the same on every machine).

    Raises:
        ValueError: a weight that is not a positive finite number.
    """
    exact: dict[str, Fraction] = {}
    for name, weight in weights.items():
        if not is_number(weight):
            raise ValueError(f"weights[{name!r}]={weight!r} is not a finite number; give a positive weight")
        if weight <= 0:
            raise ValueError(
                f"weights[{name!r}]={weight!r} is not positive; give every source a positive "
                "weight (leave a source out of the mixture instead of weighting it 0)"
            )
        exact[name] = Fraction(weight).limit_denominator(10**9)
    total = sum(exact.values())
    return {name: value / total for name, value in exact.items()}


def batch_order(seed: int, *, epoch: int, step: int, rank: int, size: int) -> list[int]:
    """The order of one rank's ``size`` samples of batch ``step``: a permutation seeded
    from (seed, epoch, step, rank), so micro-batches cut from it mix the sources too."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, epoch, step, rank]))
    return [int(index) for index in rng.permutation(size)]


def split_counts(taken: int, num_splits: int) -> list[int]:
    """Samples of each split consumed after ``taken`` samples in the source's global order."""
    whole, extra = divmod(taken, num_splits)
    return [whole + (1 if split < extra else 0) for split in range(num_splits)]


def _priority(following: int, rate: Fraction, index: int) -> tuple[int, int, int, int]:
    """PD^2 order of a source's ``following``-th extra unit at ``rate`` (smaller first)."""
    deadline = math.ceil(following / rate)
    late = deadline - math.floor(following / rate)  # the b-bit: 1 if the next window overlaps
    group = 0
    if late and rate >= Fraction(1, 2):  # heavy: the group deadline breaks the tie
        group = math.ceil(math.ceil(deadline * (1 - rate)) / (1 - rate))
    return (deadline, -late, -group, index)


@dataclass(frozen=True)
class SourcePosition:
    """Where one source stands: its plan epoch, samples taken from it, epochs finished."""

    epoch: int
    taken: int = 0
    passes: int = 0  # epochs this source finished since the mixture's epoch began


@dataclass(frozen=True)
class MixPosition:
    """Where a mixture stands after ``step`` global batches of its epoch.

    ``since`` and ``units`` count batches and units per source since the current
    weights took effect (the start, or a reweighted resume).
    """

    step: int
    sources: Mapping[str, SourcePosition]
    since: int
    units: Mapping[str, int]


@dataclass(frozen=True)
class Segment:
    """``count`` samples of a source's epoch ``epoch`` from global position ``start``."""

    epoch: int
    start: int
    count: int


@dataclass(frozen=True)
class Step:
    """One global batch: the segments of every source, in source order."""

    segments: Mapping[str, Sequence[Segment]]

    def count(self, name: str) -> int:
        """Samples of source ``name`` in this batch (all ranks together)."""
        return sum(segment.count for segment in self.segments[name])


@dataclass(frozen=True)
class Schedule:
    """The fixed rules of a mixture: weights, batch, unit, epoch sizes and stopping rule."""

    weights: Mapping[str, Fraction]
    global_batch_size: int
    unit: int
    epoch_samples: Mapping[str, int]  # S * L of every source (a multiple of ``unit``)
    stop: str

    @property
    def rule(self) -> StopRule:
        """The stopping rule ``stop`` names."""
        return RULES[self.stop]

    def counted(self) -> Schedule:
        """This schedule under the rule an endless mixture's epoch is counted by."""
        return replace(self, stop=COUNTING_RULE.name) if self.rule.endless else self

    @property
    def units_per_step(self) -> int:
        """Units in one global batch."""
        return self.global_batch_size // self.unit

    def start(self, epochs: Mapping[str, int]) -> MixPosition:
        """The position before the first batch, each source at the start of ``epochs``."""
        sources = {name: SourcePosition(epoch=epochs[name]) for name in self.weights}
        return MixPosition(step=0, sources=sources, since=0, units=dict.fromkeys(self.weights, 0))

    def units(self, position: MixPosition) -> dict[str, int]:
        """Units of each source in the batch after ``position``.

        Each source gets the floor of its exact share M * w; the M - sum(floors)
        leftover units go, one each, to sources with a fractional share f, chosen as a
        proportionate-fair (PD^2) scheduler chooses tasks of weight f for that many
        processors: only sources whose next extra unit is due (its release
        floor((j - 1) / f) has come), the earliest deadline ceil(j / f) first, ties by
        the b-bit and the group deadline, then source order. That keeps every source's
        extra units since the weights took effect strictly within one of n * f, so its
        total stays within one unit of its exact share at every batch.
        """
        total, since = self.units_per_step, position.since
        given: dict[str, int] = {}
        due: list[tuple[tuple[int, int, int, int], str]] = []
        for index, (name, weight) in enumerate(self.weights.items()):
            share = total * weight
            given[name] = math.floor(share)
            rate = share - given[name]
            if rate:
                following = position.units[name] - since * given[name] + 1  # its next extra unit
                if math.floor((following - 1) / rate) <= since:
                    due.append((_priority(following, rate, index), name))
        extra = total - sum(given.values())
        for _, name in sorted(due)[:extra]:
            given[name] += 1
        return given

    def advance(self, position: MixPosition) -> tuple[Step, MixPosition] | None:
        """The next batch and the position after it; ``None`` when the mixture ends."""
        units = self.units(position)
        short = {
            name
            for name, count in units.items()
            if count * self.unit > self.epoch_samples[name] - position.sources[name].taken
        }
        if short and not self._may_continue(short, position):
            return None
        segments: dict[str, list[Segment]] = {}
        sources: dict[str, SourcePosition] = {}
        for name, count in units.items():
            segments[name], sources[name] = self._take(position.sources[name], count * self.unit, name)
        after = MixPosition(
            step=position.step + 1,
            sources=sources,
            since=position.since + 1,
            units={name: position.units[name] + units[name] for name in units},
        )
        return Step(segments), after

    def _may_continue(self, short: set[str], position: MixPosition) -> bool:
        finished = {name for name, where in position.sources.items() if where.passes > 0}
        return self.rule.continues(set(self.weights), finished, short)

    def _take(self, where: SourcePosition, need: int, name: str) -> tuple[list[Segment], SourcePosition]:
        size = self.epoch_samples[name]
        segments = []
        epoch, taken, passes = where.epoch, where.taken, where.passes
        while need > 0:
            if taken == size:
                epoch, taken, passes = epoch + 1, 0, passes + 1
            count = min(need, size - taken)
            segments.append(Segment(epoch=epoch, start=taken, count=count))
            taken, need = taken + count, need - count
        return segments, SourcePosition(epoch=epoch, taken=taken, passes=passes)

    def remaining_steps(self, position: MixPosition, *, limit: int | None = None) -> int | None:
        """Batches left before the mixture ends; ``None`` if it never does (or not within ``limit``)."""
        if self.rule.endless:
            return None
        count = 0
        while limit is None or count < limit:
            nxt = self.advance(position)
            if nxt is None:
                return count
            position, count = nxt[1], count + 1
        return None

    def reweighted(
        self, weights: Mapping[str, Fraction], position: MixPosition
    ) -> tuple[Schedule, MixPosition]:
        """This schedule with new weights from ``position`` on (the past is kept as it was)."""
        return replace(self, weights=dict(weights)), replace(
            position, since=0, units=dict.fromkeys(position.units, 0)
        )
