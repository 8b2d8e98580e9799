"""The checkpoint's fields: what each holds, and the check that names a bad one. Pure.

One table per part of the state (top level, ``plan``, ``table``, ``packing``),
read by ``check_fields``; ``MUST_MATCH`` lists the plan inputs a resume needs
unchanged, each with its fix. ``state/format.py`` parses a state with them.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..core.checks import (
    Check,
    Field,
    ListOf,
    first_refused,
    is_bool,
    is_dict,
    is_int,
    non_negative,
    optional,
    positive,
    type_fix,
)

__all__ = [
    "FORMAT_VERSION",
    "MUST_MATCH",
    "PACKING_FIELDS",
    "PACKING_SETTINGS",
    "PEER_HINT",
    "PER_SPLIT",
    "PLAN_FIELDS",
    "READABLE",
    "TABLE_FIELDS",
    "TOP_LEVEL",
    "check_fields",
]

FORMAT_VERSION = 2
"""2 added ``packing``; version-1 states (no packing) are still read."""
READABLE = (1, 2)
"""The format versions this release reads."""
PACKING_SETTINGS = ("pack_sequences", "eos_id", "pad_id", "blocks_per_epoch")
"""The packing settings, in the order of ``StreamState.packing``."""

PEER_HINT = (
    "this checkpoint has no format_version: it comes from another plan "
    "(lancedb.streaming or an older loader), whose rows sit at other positions, so it "
    "cannot be resumed exactly here; restart the epoch or finish it with the loader "
    "that wrote it"
)
"""Why a checkpoint without ``format_version`` (another loader's) is refused."""

_int_list = ListOf(non_negative, "a non-negative integer")
_POSITIVE = "a positive integer"
_NON_NEGATIVE = "a non-negative integer"
_INTEGERS = "a list of non-negative integers"

TOP_LEVEL: tuple[Field, ...] = (
    Field("format_version", is_int, "an integer"),
    Field("num_splits", positive, _POSITIVE),
    Field("shuffle", is_bool, "a bool"),
    Field("shuffle_seed", non_negative, _NON_NEGATIVE),
    Field("epoch", non_negative, _NON_NEGATIVE),
    Field("plan", is_dict, "a dict"),
    Field("samples_consumed_per_split", _int_list, _INTEGERS),
    Field("positions_consumed_per_split", _int_list, _INTEGERS),
    Field("owned_splits", _int_list, _INTEGERS),
    Field("table", is_dict, "a dict"),
    Field("filter", optional(lambda v: isinstance(v, str)), "a string or None"),
    Field(
        "columns",
        lambda v: isinstance(v, list) and all(isinstance(name, str) for name in v),
        "a list of column names",
    ),
)
PLAN_FIELDS: tuple[Field, ...] = (
    Field("block_rows", positive, _POSITIVE),
    Field("window_rows", positive, _POSITIVE),
    Field("clump_rows", positive, _POSITIVE),
    Field("plan_format", positive, _POSITIVE),
)
PACKING_FIELDS: tuple[Field, ...] = (
    Field("pack_sequences", positive, _POSITIVE),
    Field("eos_id", is_int, "an integer"),
    Field("pad_id", is_int, "an integer"),
    Field("blocks_per_epoch", positive, _POSITIVE),
    Field(
        "anchors",
        lambda v: isinstance(v, list) and all(_int_list(a) and len(a) == 3 for a in v),
        "a list of [blocks, document, offset] lists of non-negative integers",
    ),
)
TABLE_FIELDS: tuple[Field, ...] = (
    Field("uri", lambda v: isinstance(v, str), "a string"),
    Field("version", positive, _POSITIVE),
)

MUST_MATCH: tuple[tuple[str, str], ...] = (
    ("num_splits", "build the dataset with num_splits={saved!r}"),
    ("shuffle", "build the dataset with shuffle={saved!r}"),
    ("shuffle_seed", "build the dataset with shuffle_seed={saved!r}"),
    ("filter", "build the dataset with filter={saved!r}"),
    ("columns", "build the dataset with columns={saved!r}"),
    ("plan.block_rows", "build the dataset with block_rows={saved!r}"),
    (
        "plan.window_rows",
        "build the dataset with shuffle_buffer_size={saved} * num_splits",
    ),
    ("plan.clump_rows", "build the dataset with shuffle_clump_size={saved!r}"),
    (
        "packing",
        "build the dataset with (pack_sequences, eos_id, pad_id, blocks_per_epoch)={saved!r}",
    ),
    (
        "plan.plan_format",
        "resume with the lance-streaming release that wrote it (plan format {saved!r})",
    ),
)
"""Plan inputs that must match on load and on merge, with how to fix a mismatch."""

PER_SPLIT: tuple[str, ...] = (
    "samples_consumed_per_split",
    "positions_consumed_per_split",
    "packing.anchors",
)
"""The lists with one entry per split (a dotted path reaches into a sub-dict)."""


def check_fields(data: object, fields: Sequence[Field], prefix: str) -> None:
    """Check that ``data`` is a dict with every field of ``fields`` present and valid.

    Raises:
        ValueError: naming the field (the list entry for a list), its value and the fix.
    """
    if not isinstance(data, dict):
        raise ValueError(
            f"state {prefix or 'object'} must be a dict, got {type(data).__name__}; pass the dict "
            "returned by state_dict() or merge_state_dicts(), unmodified"
        )
    field = first_refused(data, fields)
    if field is None:
        return
    where = f"{prefix}.{field.name}" if prefix else field.name
    if field.name not in data:
        raise ValueError(
            f"state is missing {where!r}; pass the dict returned by state_dict() "
            "or merge_state_dicts(), unmodified"
        )
    raise ValueError(_refusal(where, data[field.name], field.check, field.expected))


def _refusal(where: str, value: object, check: Check, expected: str) -> str:
    """The message for a refused field: its path (and entry), value and fix."""
    if isinstance(check, ListOf) and isinstance(value, list):
        index = check.culprit(value)
        if index is not None:
            where, value, expected = f"{where}[{index}]", value[index], check.expected
            check = check.item
    retyped = type_fix(where, value, check)
    fix = (
        f"write {retyped}"
        if retyped is not None
        else "restore the value state_dict() wrote, or resume from an unedited checkpoint"
    )
    return (
        f"state field {where!r} must be {expected}, got {value!r}; {fix} "
        "(the checkpoint is damaged or was edited)"
    )
