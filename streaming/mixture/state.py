"""The checkpoint format of a mixture: schema, one table-driven validator, merge. Pure.

A mixture state holds the mixture's own settings and position and, per source, its
position (plan epoch, samples taken in the source's global order, epochs finished)
and an ordinary single-table state at that position (exact counts for every split),
so every source's plan inputs are checked by the same rules as a single table's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.checks import (
    Check,
    Field,
    is_dict,
    is_int,
    is_number,
    non_negative,
    one_of,
    optional,
    plain_ints,
    positive,
)
from ..state.format import check_fields
from .checks import close_names
from .schedule import STOP_RULES, MixPosition, SourcePosition

__all__ = [
    "MIXTURE_FORMAT",
    "MUST_MATCH",
    "MixtureState",
    "check_settings",
    "check_sources",
    "merge_mixture_states",
    "weights_differ",
]

MIXTURE_FORMAT = 1
"""Bumped on any change of meaning; unknown values are refused."""


def _weight(value: object) -> bool:
    """A positive finite number."""
    return is_number(value) and value > 0  # type: ignore[operator]


def _dict_of(check: Check) -> Check:
    """A dict whose values each pass ``check``."""
    return lambda value: isinstance(value, dict) and all(check(entry) for entry in value.values())


_NON_NEGATIVE = "a non-negative integer"
_TOP_LEVEL: tuple[Field, ...] = (
    Field("format_version", is_int, "an integer"),
    Field("kind", one_of(("mixture",)), "'mixture'"),
    Field("global_batch_size", positive, "a positive integer"),
    Field("unit", positive, "a positive integer"),
    Field("stop", one_of(STOP_RULES), f"one of {STOP_RULES}"),
    Field("seed", optional(non_negative), "a non-negative integer or None"),
    Field("weights", _dict_of(_weight), "a dict of positive numbers"),
    Field("epoch", non_negative, _NON_NEGATIVE),
    Field("step", non_negative, _NON_NEGATIVE),
    Field("schedule", is_dict, "a dict"),
    Field("sources", lambda v: isinstance(v, dict) and bool(v), "a non-empty dict"),
)
_SCHEDULE: tuple[Field, ...] = (
    Field("since", non_negative, _NON_NEGATIVE),
    Field("units", _dict_of(non_negative), "a dict of non-negative integers"),
)
_SOURCE: tuple[Field, ...] = (
    Field("epoch", non_negative, _NON_NEGATIVE),
    Field("taken", non_negative, _NON_NEGATIVE),
    Field("passes", non_negative, _NON_NEGATIVE),
    Field("state", is_dict, "a dict (a single-table state)"),
)
MUST_MATCH = ("global_batch_size", "unit", "stop", "seed")
"""Mixture settings that decide the future batches; ``weights`` only with ``reweight``."""


@dataclass(frozen=True)
class MixtureState:
    """A parsed mixture state: settings, position and every source's table state."""

    global_batch_size: int
    unit: int
    stop: str
    seed: int | None
    weights: Mapping[str, float]
    epoch: int
    position: MixPosition
    tables: Mapping[str, dict[str, Any]]

    @classmethod
    def from_dict(cls, state: object) -> MixtureState:
        """Validate the shape of ``state`` (not yet against a mixture).

        Raises:
            ValueError: naming the field, the value and the fix.
        """
        if isinstance(state, dict) and "samples_consumed_per_split" in state and "kind" not in state:
            raise ValueError(
                "this is the state of a single StreamingDataset, not of a StreamingMixture; "
                "load it into the dataset it came from"
            )
        state = plain_ints(state)  # numpy integers are integers; the parsed state holds ints
        check_fields(state, _TOP_LEVEL[:1], "")
        assert isinstance(state, dict)
        if state["format_version"] != MIXTURE_FORMAT:
            raise ValueError(
                f"mixture state format_version={state['format_version']!r} is not one this "
                f"version reads ({MIXTURE_FORMAT}); resume it with the version that wrote it"
            )
        check_fields(state, _TOP_LEVEL, "")
        check_fields(state["schedule"], _SCHEDULE, "schedule")
        names = list(state["sources"])
        for where, keys in (("weights", state["weights"]), ("schedule.units", state["schedule"]["units"])):
            if list(keys) != names:
                raise ValueError(
                    f"state field {where!r} names {list(keys)!r} but 'sources' names {names!r}; "
                    "the checkpoint is damaged or was edited"
                )
        sources = {}
        for name, entry in state["sources"].items():
            check_fields(entry, _SOURCE, f"sources.{name}")
            sources[name] = SourcePosition(epoch=entry["epoch"], taken=entry["taken"], passes=entry["passes"])
        position = MixPosition(
            step=state["step"],
            sources=sources,
            since=state["schedule"]["since"],
            units=dict(state["schedule"]["units"]),
        )
        return cls(
            global_batch_size=state["global_batch_size"],
            unit=state["unit"],
            stop=state["stop"],
            seed=state["seed"],
            weights=dict(state["weights"]),
            epoch=state["epoch"],
            position=position,
            tables={name: entry["state"] for name, entry in state["sources"].items()},
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data."""
        where = self.position
        return {
            "format_version": MIXTURE_FORMAT,
            "kind": "mixture",
            "global_batch_size": self.global_batch_size,
            "unit": self.unit,
            "stop": self.stop,
            "seed": self.seed,
            "weights": dict(self.weights),
            "epoch": self.epoch,
            "step": where.step,
            "schedule": {"since": where.since, "units": dict(where.units)},
            "sources": {
                name: {
                    "epoch": source.epoch,
                    "taken": source.taken,
                    "passes": source.passes,
                    "state": self.tables[name],
                }
                for name, source in where.sources.items()
            },
        }


def check_sources(saved: Sequence[str], current: Sequence[str]) -> None:
    """Refuse sources added, removed or renamed since the state was saved."""
    if list(saved) == list(current):
        return
    missing = [name for name in saved if name not in current]
    added = [name for name in current if name not in saved]
    if missing or added:
        raise ValueError(
            f"the state's sources are {list(saved)!r} but this mixture's are {list(current)!r} "
            f"(missing here: {missing!r}, new here: {added!r}){close_names(added, list(saved))}; "
            "build the mixture with the sources of the checkpoint, under the same names"
        )
    raise ValueError(
        f"the state lists its sources in the order {list(saved)!r} but this mixture in the "
        f"order {list(current)!r}; give the sources in the checkpoint's order"
    )


def check_settings(saved: MixtureState, current: Mapping[str, object]) -> None:
    """Refuse a different batch size, unit or stopping rule, naming the fix."""
    for name in MUST_MATCH:
        value = getattr(saved, name)
        if value != current[name]:
            raise ValueError(
                f"checkpoint has {name}={value!r} but this mixture has {name}={current[name]!r}; "
                f"build the mixture with {name}={value!r} to resume it"
            )


def weights_differ(saved: Mapping[str, float], current: Mapping[str, float]) -> bool:
    """True when the weights give different proportions (scale does not matter)."""
    saved_total, current_total = sum(saved.values()), sum(current.values())
    return any(
        not math.isclose(saved[name] / saved_total, current[name] / current_total, rel_tol=1e-12)
        for name in saved
    )


def merge_mixture_states(states: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The one state every rank of a new run loads: every rank's state is the same.

    A mixture's position is a number of global batches, the same on every rank of a
    synchronous job, so merging checks that the states agree and returns one of them.

    Raises:
        ValueError: no states, a malformed one, or two states that differ (taken at
            different steps or from different mixtures).
    """
    if not states:
        raise ValueError("merge_state_dicts needs at least one state")
    parsed = [MixtureState.from_dict(state) for state in states]
    first = parsed[0]
    for index, other in enumerate(parsed[1:], start=1):
        for name in ("epoch", "step", "weights", "global_batch_size", "unit", "stop", "seed"):
            if name == "step":
                mine, theirs = first.position.step, other.position.step
            else:
                mine, theirs = getattr(first, name), getattr(other, name)
            if mine != theirs:
                raise ValueError(
                    f"mixture state 0 has {name}={mine!r} but state {index} has {name}={theirs!r}; "
                    "merge the states of one checkpoint of one run, taken at the same step"
                )
        if other.position != first.position:
            raise ValueError(
                f"mixture states 0 and {index} stand at different source positions at the same "
                "step; they come from different runs"
            )
    return plain_ints(dict(states[0]))
