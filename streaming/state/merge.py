"""Merging the states of every rank of one run into one state. Pure.

Each split's progress comes from the state that owns it; splits nobody owned keep
their lockstep count. Refusals are ``ValueError`` naming the field, both values
and the fix; nothing is changed.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence
from typing import Any

from ..core.progress import SplitProgress
from ..errors import TableMovedWarning, UnownedSplitsWarning
from .compat import plan_differences
from .format import StreamState, parse_state

__all__ = ["merge_states"]


def _check_same_run(states: Sequence[StreamState]) -> None:
    first = states[0]
    for index, other in enumerate(states[1:], start=1):
        differences = plan_differences(first, other)
        if differences:
            path, mine, theirs = differences[0]
            raise ValueError(
                f"{path} mismatch: state 0 has {path}={mine!r} but state {index} has "
                f"{path}={theirs!r}, so they come from different plans; merge the states of "
                "one run (every rank's state of one checkpoint)"
            )
        for name in ("version", "epoch"):
            if getattr(first, name) != getattr(other, name):
                raise ValueError(
                    f"state 0 has {name}={getattr(first, name)!r} but state {index} has "
                    f"{name}={getattr(other, name)!r}; merge the states of one checkpoint "
                    "of one run, taken at the same step"
                )
        if first.uri != other.uri:
            warnings.warn(
                f"state 0 names table {first.uri!r} and state {index} names "
                f"{other.uri!r}; merging them as copies of one table",
                TableMovedWarning,
                stacklevel=3,
            )


def _owner_counts(states: Sequence[StreamState]) -> dict[int, SplitProgress]:
    owned: dict[int, SplitProgress] = {}
    for index, state in enumerate(states):
        for split in state.owned_splits:
            progress = state.progress[split]
            if split in owned and owned[split] != progress:
                raise ValueError(
                    f"two states own split {split} with different progress {owned[split]} and "
                    f"{progress} (state {index}); they were taken at different steps or come "
                    "from different runs"
                )
            owned[split] = progress
    return owned


def merge_states(states: Sequence[object], *, allow_lag: bool = False) -> dict[str, Any]:
    """Merge the states of every rank of one run into the state every new rank loads.

    Each split's count comes from the state that owns it; splits nobody owns keep
    the largest (lockstep) count and an ``UnownedSplitsWarning`` names them. The
    merged ``owned_splits`` is the union.

    Raises:
        ValueError: no states, malformed states, different plans, snapshots or
            epochs, two owners disagreeing, or (unless ``allow_lag``) owned counts
            that differ between states.
    """
    if not states:
        raise ValueError("merge_state_dicts needs at least one state; pass every rank's state")
    _refuse_mixture_states(states)
    parsed = [parse_state(state) for state in states]
    _check_same_run(parsed)
    owned = _owner_counts(parsed)
    first = parsed[0]
    if not allow_lag:
        _check_lockstep(owned)
    unowned = [split for split in range(first.num_splits) if split not in owned]
    if unowned:
        warnings.warn(
            f"no state owns splits {unowned}; using their lockstep counts. Pass the "
            "state of every rank of the old run for an exact resume",
            UnownedSplitsWarning,
            stacklevel=3,
        )
    progress = tuple(
        owned[split] if split in owned else _lockstep(parsed, split) for split in range(first.num_splits)
    )
    merged = dataclasses.replace(first, progress=progress, owned_splits=tuple(sorted(owned)))
    return merged.to_dict()


def _refuse_mixture_states(states: Sequence[object]) -> None:
    """A mixture's states merge with the mixture's method: say so, naming it."""
    mixed = [
        index
        for index, state in enumerate(states)
        if isinstance(state, dict) and state.get("kind") == "mixture"
    ]
    if mixed:
        raise ValueError(
            f"state {mixed[0]} is the state of a StreamingMixture, not of one StreamingDataset; "
            "merge mixture states with StreamingMixture.merge_state_dicts(states)"
        )


def _lockstep(states: Sequence[StreamState], split: int) -> SplitProgress:
    """An unowned split: the largest lockstep count; packing keeps the furthest anchor."""
    count = max(state.progress[split].samples for state in states)
    if states[0].packing is None:
        position = max(max(state.progress[split].positions for state in states), count)
        return SplitProgress(count, position)
    anchor = max(state.progress[split].anchor or (0, 0, 0) for state in states)
    return SplitProgress(count, anchor[1], anchor)


def _check_lockstep(owned: dict[int, SplitProgress]) -> None:
    """Owned counts of one step: all equal, or a partial cycle (the lowest splits one ahead).

    Every rank hands out its splits in ascending order, a partial cycle included, so at
    one step the splits one sample ahead are the first ones of the whole job.
    """
    counts = {split: progress.samples for split, progress in sorted(owned.items())}
    values = list(counts.values())
    partial = max(values) - min(values) <= 1 and values == sorted(values, reverse=True)
    if not partial:
        low = min(counts, key=lambda split: counts[split])
        high = max(counts, key=lambda split: counts[split])
        raise ValueError(
            f"owned counts differ between states: split {low} has {counts[low]} samples "
            f"consumed, split {high} has {counts[high]}; synchronous ranks stop at the "
            "same step, so these states were taken at different steps. Merge states of "
            "one step, or pass allow_lag=True to accept ranks of unequal length"
        )
