"""The checkpoint format: ``StreamState`` and ``parse_state``, which checks a state's shape. Pure.

A state is plain JSON data (int, str, bool, None, list, dict). ``parse_state``
checks its shape against the tables of ``state/fields.py``;
``compat.check_compatible`` checks it against the dataset that loads it;
``merge.merge_states`` combines the states of every rank of a run. Each raises
``ValueError`` naming the field, the saved value, the current value and the fix,
and none of them changes anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.checks import is_int, plain_ints
from ..core.plan import PLAN_FORMAT
from ..core.progress import Anchor, SplitProgress
from .fields import (
    FORMAT_VERSION,
    PACKING_FIELDS,
    PACKING_SETTINGS,
    PEER_HINT,
    PER_SPLIT,
    PLAN_FIELDS,
    READABLE,
    TABLE_FIELDS,
    TOP_LEVEL,
    check_fields,
)

__all__ = [
    "FORMAT_VERSION",
    "PACKING_SETTINGS",
    "StreamState",
    "check_fields",
    "parse_state",
]


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


def parse_state(state: object) -> StreamState:
    """Validate the shape of ``state`` and return it as a ``StreamState``.

    Raises:
        ValueError: for a peer checkpoint, an unknown ``format_version``, a missing
            key, a wrong type, a list of the wrong length, an owned split out of
            range, or a position below its count.
    """
    state = plain_ints(state)  # numpy integers are integers; the parsed state holds ints
    _refuse_other_states(state)
    check_fields(state, TOP_LEVEL, "")
    assert isinstance(state, dict)  # for the type checker; check_fields proved it
    check_fields(state["plan"], PLAN_FIELDS, "plan")
    _check_whole_blocks(state["plan"])
    check_fields(state["table"], TABLE_FIELDS, "table")
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


def _refuse_other_states(state: object) -> None:
    """Refuse what is not one dataset's state this release reads: a peer's, a whole
    checkpoint, a mixture's, an unknown ``format_version``."""
    if isinstance(state, dict) and "format_version" not in state and "samples_consumed_per_split" in state:
        raise ValueError(PEER_HINT)
    _refuse_a_whole_checkpoint(state)
    if isinstance(state, dict) and state.get("kind") == "mixture":
        raise ValueError(
            "this is the state of a StreamingMixture, not of one StreamingDataset; load it "
            "into the mixture (mixture.load_state_dict) built from the same sources"
        )
    version = state.get("format_version") if isinstance(state, dict) else None
    if is_int(version) and version not in READABLE:
        raise ValueError(
            f"state has format_version={version!r} but this release reads "
            f"format_version {' or '.join(map(str, READABLE))}; resume with the lance-streaming "
            "release that wrote it"
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


def _per_split_lists(state: dict[str, Any]) -> dict[str, list[Any]]:
    found = {}
    for path in PER_SPLIT:
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
    check_fields(data, PACKING_FIELDS, "packing")
    settings = tuple(data[name] for name in PACKING_SETTINGS)
    return settings, tuple((a[0], a[1], a[2]) for a in data["anchors"])
