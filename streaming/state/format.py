"""The checkpoint format: schema and one table-driven validator. Pure.

A state is plain JSON data (int, str, bool, None, list, dict). ``parse_state``
checks its shape; ``check_compatible`` checks it against the dataset that loads it;
``merge.merge_states`` combines the states of every rank of a run. Each raises
``ValueError`` naming the field, the saved value, the current value and the fix,
and none of them changes anything.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

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
    plain_ints,
    positive,
    type_fix,
)
from ..core.plan import PLAN_FORMAT
from ..core.progress import Anchor, SplitProgress
from ..errors import TableMovedWarning

__all__ = [
    "FORMAT_VERSION",
    "PACKING_SETTINGS",
    "StreamState",
    "check_compatible",
    "check_fields",
    "parse_state",
    "plan_differences",
    "plan_mismatches",
]

FORMAT_VERSION = 2
"""2 added ``packing``; version-1 states (no packing) are still read."""
_READABLE = (1, 2)
PACKING_SETTINGS = ("pack_sequences", "eos_id", "pad_id", "blocks_per_epoch")
"""The packing settings, in the order of ``StreamState.packing``."""

_PEER_HINT = (
    "this checkpoint has no format_version: it comes from another plan "
    "(lancedb.streaming or an older loader), whose rows sit at other positions, so it "
    "cannot be resumed exactly here; restart the epoch or finish it with the loader "
    "that wrote it"
)


_int_list = ListOf(non_negative, "a non-negative integer")
_POSITIVE = "a positive integer"
_NON_NEGATIVE = "a non-negative integer"
_INTEGERS = "a list of non-negative integers"

_TOP_LEVEL: tuple[Field, ...] = (
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
_PLAN_FIELDS: tuple[Field, ...] = (
    Field("block_rows", positive, _POSITIVE),
    Field("window_rows", positive, _POSITIVE),
    Field("clump_rows", positive, _POSITIVE),
    Field("plan_format", positive, _POSITIVE),
)
_PACKING_FIELDS: tuple[Field, ...] = (
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
_TABLE_FIELDS: tuple[Field, ...] = (
    Field("uri", lambda v: isinstance(v, str), "a string"),
    Field("version", positive, _POSITIVE),
)

# Plan inputs that must match on load and on merge, with how to fix a mismatch.
_MUST_MATCH: tuple[tuple[str, str], ...] = (
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


@dataclass(frozen=True)
class StreamState:
    """A validated checkpoint. ``to_dict`` gives the plain-JSON form."""

    num_splits: int
    shuffle: bool
    shuffle_seed: int
    epoch: int
    block_rows: int
    window_rows: int
    clump_rows: int
    progress: tuple[SplitProgress, ...]
    owned_splits: tuple[int, ...]
    uri: str
    version: int
    filter: str | None
    columns: tuple[str, ...]
    plan_format: int = PLAN_FORMAT
    packing: tuple[int, int, int, int] | None = None
    """(pack_sequences, eos_id, pad_id, blocks_per_epoch), or None without packing."""

    @classmethod
    def from_dict(cls, state: object) -> StreamState:
        """Validate plain data (see ``parse_state``) and return it as a ``StreamState``."""
        return parse_state(state)

    @property
    def samples(self) -> tuple[int, ...]:
        """Samples (or packed blocks) delivered, per split."""
        return tuple(split.samples for split in self.progress)

    @property
    def positions(self) -> tuple[int, ...]:
        """Plan positions passed, per split."""
        return tuple(split.positions for split in self.progress)

    def to_dict(self) -> dict[str, Any]:
        """Return the state as plain JSON-serialisable data."""
        return {
            "format_version": FORMAT_VERSION,
            "num_splits": self.num_splits,
            "shuffle": self.shuffle,
            "shuffle_seed": self.shuffle_seed,
            "epoch": self.epoch,
            "plan": {
                "block_rows": self.block_rows,
                "window_rows": self.window_rows,
                "clump_rows": self.clump_rows,
                "plan_format": self.plan_format,
            },
            "samples_consumed_per_split": list(self.samples),
            "positions_consumed_per_split": list(self.positions),
            "owned_splits": list(self.owned_splits),
            "table": {"uri": self.uri, "version": self.version},
            "filter": self.filter,
            "columns": list(self.columns),
            "packing": self._packing_dict(),
        }

    def _packing_dict(self) -> dict[str, Any] | None:
        if self.packing is None:
            return None
        anchors = [list(split.anchor or (0, 0, 0)) for split in self.progress]
        return {**dict(zip(PACKING_SETTINGS, self.packing, strict=True)), "anchors": anchors}


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


def parse_state(state: object) -> StreamState:
    """Validate the shape of ``state`` and return it as a ``StreamState``.

    Raises:
        ValueError: for a peer checkpoint, an unknown ``format_version``, a missing
            key, a wrong type, a list of the wrong length, an owned split out of
            range, or a position below its count.
    """
    state = plain_ints(state)  # numpy integers are integers; the parsed state holds ints
    if isinstance(state, dict) and "format_version" not in state and "samples_consumed_per_split" in state:
        raise ValueError(_PEER_HINT)
    _refuse_a_whole_checkpoint(state)
    if isinstance(state, dict) and state.get("kind") == "mixture":
        raise ValueError(
            "this is the state of a StreamingMixture, not of one StreamingDataset; load it "
            "into the mixture (mixture.load_state_dict) built from the same sources"
        )
    version = state.get("format_version") if isinstance(state, dict) else None
    if is_int(version) and version not in _READABLE:
        raise ValueError(
            f"state has format_version={version!r} but this release reads "
            f"format_version {' or '.join(map(str, _READABLE))}; resume with the lance-streaming "
            "release that wrote it"
        )
    check_fields(state, _TOP_LEVEL, "")
    assert isinstance(state, dict)  # for the type checker; _check_fields proved it
    check_fields(state["plan"], _PLAN_FIELDS, "plan")
    _check_whole_blocks(state["plan"])
    check_fields(state["table"], _TABLE_FIELDS, "table")
    num_splits = state["num_splits"]
    packing, anchors = _parse_packing(state)
    _check_lengths(state, num_splits)
    _check_counts(state, anchors, packing)
    plan, table = state["plan"], state["table"]
    return StreamState(
        num_splits=num_splits,
        shuffle=state["shuffle"],
        shuffle_seed=state["shuffle_seed"],
        epoch=state["epoch"],
        block_rows=plan["block_rows"],
        window_rows=plan["window_rows"],
        clump_rows=plan["clump_rows"],
        plan_format=plan["plan_format"],
        progress=tuple(
            SplitProgress(count, position, None if anchors is None else anchors[split])
            for split, (count, position) in enumerate(
                zip(state["samples_consumed_per_split"], state["positions_consumed_per_split"], strict=True)
            )
        ),
        owned_splits=tuple(sorted(state["owned_splits"])),
        uri=table["uri"],
        version=table["version"],
        filter=state["filter"],
        columns=tuple(state["columns"]),
        packing=packing,
    )


def _check_whole_blocks(plan: dict[str, Any]) -> None:
    """A plan's window is a whole number of its blocks: anything else was edited."""
    block, window = plan["block_rows"], plan["window_rows"]
    if window % block:
        raise ValueError(
            f"state field 'plan.block_rows'={block} does not divide 'plan.window_rows'={window}, "
            "and every plan's window is whole blocks: the checkpoint is damaged or was edited; "
            "restore the plan values state_dict() wrote, or resume from an unedited checkpoint"
        )


def _refuse_a_whole_checkpoint(state: object) -> None:
    """A dict that holds a state under some key is a whole checkpoint: say which key."""
    if not isinstance(state, dict) or "format_version" in state:
        return
    keys = [key for key, value in state.items() if isinstance(value, dict) and "format_version" in value]
    if keys:
        raise ValueError(
            f"this is a whole checkpoint, not a state: the state is under {keys[0]!r}; pass "
            f"checkpoint[{keys[0]!r}] (the dict that state_dict() returned)"
        )


_PER_SPLIT: tuple[str, ...] = (
    "samples_consumed_per_split",
    "positions_consumed_per_split",
    "packing.anchors",
)
"""The lists with one entry per split (a dotted path reaches into a sub-dict)."""


def _per_split_lists(state: dict[str, Any]) -> dict[str, list[Any]]:
    found = {}
    for path in _PER_SPLIT:
        value: Any = state
        for key in path.split("."):
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, list):
            found[path] = value
    return found


def _check_lengths(state: dict[str, Any], num_splits: int) -> None:
    """One entry per split in every per-split list; owned splits distinct and in range.

    Lists that agree with each other on another length mean ``num_splits`` was
    edited, and the message says which value to restore.
    """
    lists = _per_split_lists(state)
    lengths = {len(values) for values in lists.values()}
    for path, values in lists.items():
        if len(values) == num_splits:
            continue
        fix = (
            f"restore num_splits={len(values)}, the length of every per-split list, "
            "if that is what was edited, or resume from an unedited checkpoint"
            if len(lengths) == 1
            else "restore the lists state_dict() wrote, or resume from an unedited checkpoint"
        )
        raise ValueError(
            f"state field {path!r} has {len(values)} entries but num_splits={num_splits}; "
            f"the checkpoint is damaged or was edited: {fix}"
        )
    owned = state["owned_splits"]
    if len(set(owned)) != len(owned) or any(split >= num_splits for split in owned):
        raise ValueError(
            f"state field 'owned_splits'={owned!r} must list distinct splits in "
            f"[0, {num_splits}); the checkpoint is damaged or was edited: restore the "
            "splits state_dict() wrote, or resume from an unedited checkpoint"
        )


def _check_counts(
    state: dict[str, Any], anchors: tuple[Anchor, ...] | None, packing: tuple[int, int, int, int] | None
) -> None:
    """Every position is at or past its count; every packing anchor at or behind it."""
    counts = zip(state["samples_consumed_per_split"], state["positions_consumed_per_split"], strict=True)
    for split, (count, position) in enumerate(counts):
        if anchors is not None and anchors[split][0] > count:
            raise ValueError(
                f"state has packing.anchors[{split}]={list(anchors[split])} ahead of "
                f"samples_consumed_per_split[{split}]={count}; the checkpoint is damaged or was edited"
            )
        if position < count and packing is None:
            raise ValueError(
                f"state has positions_consumed_per_split[{split}]={position} below "
                f"samples_consumed_per_split[{split}]={count}; a position is never "
                "behind its count: the checkpoint is damaged or was edited"
            )


def _parse_packing(
    state: dict[str, Any],
) -> tuple[tuple[int, int, int, int] | None, tuple[Anchor, ...] | None]:
    """The packing settings and anchors of a state (none in format version 1)."""
    if state["format_version"] == 1:
        return None, None
    if "packing" not in state:
        raise ValueError(
            "state is missing 'packing'; pass the dict returned by state_dict() or "
            "merge_state_dicts(), unmodified"
        )
    data = state["packing"]
    if data is None:
        return None, None
    check_fields(data, _PACKING_FIELDS, "packing")
    settings = tuple(data[name] for name in PACKING_SETTINGS)
    return settings, tuple((a[0], a[1], a[2]) for a in data["anchors"])


def _field(state: StreamState, path: str) -> object:
    value = getattr(state, path.split(".")[-1])
    return list(value) if isinstance(value, tuple) else value


def plan_differences(saved: StreamState, current: StreamState) -> list[tuple[str, object, object]]:
    """(field, saved value, current value) of every order-defining input that differs."""
    found = []
    for path, _ in _MUST_MATCH:
        old, new = _field(saved, path), _field(current, path)
        if old != new:
            found.append((path, old, new))
    return found


def plan_mismatches(saved: StreamState, current: StreamState) -> list[str]:
    """Messages for every order-defining input that differs, in a fixed order."""
    fixes = dict(_MUST_MATCH)
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
