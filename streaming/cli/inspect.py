"""``lance-streaming inspect``: a checkpoint's epoch, progress, snapshot and settings."""

from __future__ import annotations

import argparse
from typing import Any

from ._common import FAILURES, ints, one_line, print_listing, storage_options
from ._states import read_state

__all__ = ["run"]

_BAR_WIDTH = 20


def run(args: argparse.Namespace, extra: list[str]) -> int:
    """Print a checkpoint's epoch, progress, snapshot and settings."""
    state, where = read_state(args.state, key=args.key)
    if state.get("kind") == "mixture":
        return _mixture(state, args, where)
    length, why = (None, "not checked (--no-table)") if args.no_table else _split_length(state, args)
    samples = state["samples_consumed_per_split"]
    num_splits, owned = state["num_splits"], state["owned_splits"]
    print(f"state: {args.state}" + (f" (at {where!r})" if where else ""))
    print(f"epoch: {state['epoch']}")
    print(_done_line(sum(samples), num_splits, length, why))
    if len(owned) == num_splits:
        print(f"owned splits: all {num_splits} (a merged state: every count is exact)")
    else:
        print(
            f"owned splits: {ints(owned)} of {num_splits} (one rank's state: the other "
            "splits show where they stand if every rank advanced in lockstep)"
        )
    table = state["table"]
    print(f"snapshot: {table['uri']} at version {table['version']}")
    print("settings: " + _settings_line(state))
    print("progress per split:")
    packed = state.get("packing") is not None
    lines = [
        _split_line(split, count, position, length, split in owned, packed=packed)
        for split, (count, position) in enumerate(
            zip(samples, state["positions_consumed_per_split"], strict=True)
        )
    ]
    print_listing(lines, show_all=args.all)
    return 0


def _split_length(state: dict[str, Any], args: argparse.Namespace) -> tuple[int | None, str]:
    """L of the snapshot the state pins, found by loading the state; else why not (one sentence)."""
    from ._tables import engine, open_table

    plan = state["plan"]
    storage_options(args.storage_option)  # a malformed option fails the command
    try:
        dataset = engine(
            open_table(state["table"]["uri"], args),
            args,
            version=state["table"]["version"],
            num_splits=state["num_splits"],
            shuffle=state["shuffle"],
            shuffle_seed=state["shuffle_seed"],
            epoch=state["epoch"],
            rank=0,
            world_size=1,
            filter=state["filter"],
            columns=state["columns"],
            block_rows=plan["block_rows"],
            shuffle_buffer_size=plan["window_rows"] * state["num_splits"],
            shuffle_clump_size=plan["clump_rows"],
            **_packing_keywords(state),
        )
        dataset.load_state_dict(state)
    except FAILURES as error:
        return None, f"the table could not be checked: {one_line(error)}"
    if state.get("packing") is not None:
        return state["packing"]["blocks_per_epoch"] // state["num_splits"], ""
    return dataset.split_length, ""


def _packing_keywords(state: dict[str, Any]) -> dict[str, Any]:
    packing = state.get("packing")
    if packing is None:
        return {}
    from ..state.format import PACKING_SETTINGS

    return {name: packing[name] for name in PACKING_SETTINGS}


def _done_line(consumed: int, num_splits: int, length: int | None, why: str) -> str:
    if length is None:
        return f"done: {consumed} samples consumed over {num_splits} splits; percent unknown, {why}"
    planned = num_splits * length
    percent = 100.0 * consumed / planned if planned else 100.0
    return (
        f"done: {percent:.1f}% of the epoch ({consumed} of {planned} planned samples; split length {length})"
    )


def _settings_line(state: dict[str, Any]) -> str:
    plan = state["plan"]
    columns = ",".join(state["columns"])
    return (
        f"num_splits={state['num_splits']} shuffle={state['shuffle']} "
        f"shuffle_seed={state['shuffle_seed']} block_rows={plan['block_rows']} "
        f"window_rows={plan['window_rows']} clump_rows={plan['clump_rows']} "
        f"plan_format={plan['plan_format']} format_version={state['format_version']} "
        f"filter={state['filter']!r} columns={columns}" + _packing_settings(state)
    )


def _packing_settings(state: dict[str, Any]) -> str:
    packing = state.get("packing")
    if packing is None:
        return ""
    return " " + " ".join(f"{name}={value}" for name, value in _packing_keywords(state).items())


def _bar(done: int, total: int) -> str:
    filled = round(_BAR_WIDTH * done / total) if total else _BAR_WIDTH
    return "[" + "#" * filled + "." * (_BAR_WIDTH - filled) + "]"


def _split_line(
    split: int, count: int, position: int, length: int | None, owned: bool, *, packed: bool
) -> str:
    if packed:
        skipped = f", next document {position}"
    else:
        skipped = f", position {position}" if position != count else ""
    note = "" if owned else " (lockstep)"
    if length is None:
        return f"  split {split:>4}: {count} consumed{skipped}{note}"
    percent = 100.0 * count / length if length else 100.0
    return f"  split {split:>4} {_bar(count, length)} {count}/{length} {percent:5.1f}%{skipped}{note}"


def _mixture(state: dict[str, Any], args: argparse.Namespace, where: str | None) -> int:
    """A mixture state: its settings, position and every source's place in its epoch."""
    print(f"state: {args.state}" + (f" (at {where!r})" if where else ""))
    print(f"mixture epoch: {state['epoch']}, global batches delivered: {state['step']}")
    print(
        f"settings: global_batch_size={state['global_batch_size']} unit={state['unit']} "
        f"stop={state['stop']} seed={state['seed']} weights={state['weights']}"
    )
    print("sources:")
    for name, entry in state["sources"].items():
        table = entry["state"]
        splits = table["num_splits"]
        print(
            f"  {name}: epoch {entry['epoch']}, {entry['taken']} samples taken "
            f"({entry['taken'] // splits} to {-(-entry['taken'] // splits)} per split of {splits}), "
            f"{entry['passes']} epochs finished; {table['table']['uri']} at version "
            f"{table['table']['version']}"
        )
    return 0
