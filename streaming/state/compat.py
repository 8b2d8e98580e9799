"""Whether a parsed checkpoint fits the dataset that loads it, or the other ranks'. Pure.

``check_compatible`` checks a state against the dataset about to load it;
``plan_differences`` (and ``plan_mismatches``, its messages) name every plan input
that differs, which ``merge.merge_states`` refuses too.
"""

from __future__ import annotations

import warnings

from ..errors import TableMovedWarning
from .fields import MUST_MATCH
from .format import StreamState

__all__ = ["check_compatible", "plan_differences", "plan_mismatches"]


def _field(state: StreamState, path: str) -> object:
    """The value of ``path`` (a ``MUST_MATCH`` path) in ``state``, lists as lists."""
    value = getattr(state, path.split(".")[-1])
    return list(value) if isinstance(value, tuple) else value


def plan_differences(saved: StreamState, current: StreamState) -> list[tuple[str, object, object]]:
    """(field, saved value, current value) of every order-defining input that differs."""
    found = []
    for path, _ in MUST_MATCH:
        old, new = _field(saved, path), _field(current, path)
        if old != new:
            found.append((path, old, new))
    return found


def plan_mismatches(saved: StreamState, current: StreamState) -> list[str]:
    """Messages for every order-defining input that differs, in a fixed order."""
    fixes = dict(MUST_MATCH)
    return [
        f"checkpoint has {path}={old!r} but this dataset has {path}={new!r}; "
        + fixes[path].format(saved=old)
        + " to resume it"
        for path, old, new in plan_differences(saved, current)
    ]


def check_compatible(saved: StreamState, current: StreamState, *, split_length: int) -> None:
    """Check a parsed state against the dataset about to load it.

    ``current`` describes the dataset (its counts are ignored); ``split_length`` is
    L of the snapshot the state pins. Warns when only the table URI differs.

    Raises:
        ValueError: a plan input differs, or a count or position exceeds L.
    """
    problems = plan_mismatches(saved, current)
    if problems:
        raise ValueError(problems[0])
    blocks = saved.packing[3] // saved.num_splits if saved.packing is not None else split_length
    for name, values, limit, unit in (
        ("samples_consumed_per_split", saved.samples, blocks, "rows" if saved.packing is None else "blocks"),
        ("positions_consumed_per_split", saved.positions, split_length, "rows"),
    ):
        for split, value in enumerate(values):
            if value > limit:
                raise ValueError(
                    f"state has {name}[{split}]={value} but splits of this snapshot hold "
                    f"{limit} {unit}; the checkpoint belongs to another table or was "
                    f"edited: load it into a dataset of the table it names ({saved.uri!r}, "
                    f"version {saved.version}) with its filter, or restore the value "
                    f"state_dict() wrote (at most {limit})"
                )
    if saved.uri != current.uri:
        warnings.warn(
            f"checkpoint was taken on table {saved.uri!r}, this dataset reads "
            f"{current.uri!r}; resuming at version {saved.version} of it (fine if the "
            "table was copied, wrong if it is another table)",
            TableMovedWarning,
            stacklevel=3,
        )
