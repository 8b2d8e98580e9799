"""Command line of lance-streaming: ``demo``, ``inspect``, ``merge``, ``plan`` and ``bench``.

Run it as ``lance-streaming COMMAND`` or ``python -m streaming COMMAND``. A failure
prints one line on stderr and exits with 1; a usage error exits with 2.
"""

from __future__ import annotations

import argparse
import json
import pickle
import re
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

_FAILURES = (ValueError, OSError, RuntimeError, TypeError)
_BAR_WIDTH = 20
_LISTED = 32  # lines of a per-split or per-rank listing before "use --all"
_STATE_KEYS = ("format_version", "samples_consumed_per_split")


# -- the parser ------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lance-streaming", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_demo(commands)
    _add_inspect(commands)
    _add_merge(commands)
    _add_plan(commands)
    bench = commands.add_parser(
        "bench",
        add_help=False,
        help="run the benchmarks (python -m benchmarks.bench) from a source checkout",
        description="Every argument is passed on to python -m benchmarks.bench.",
    )
    bench.set_defaults(run=_bench)
    return parser


def _add_demo(commands: Any) -> None:
    demo = commands.add_parser("demo", help="train, checkpoint, resume on another topology, verify")
    demo.add_argument("--workdir", type=Path, default=None, help="folder for the table and checkpoints")
    demo.add_argument("--world-size", type=int, default=2, help="ranks before the checkpoint")
    demo.add_argument("--resume-world-size", type=int, default=3, help="ranks after the resume")
    demo.add_argument("--step", choices=["build", "train", "resume"], help=argparse.SUPPRESS)
    demo.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    demo.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    demo.set_defaults(run=_demo)


def _add_state_options(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--key",
        help="where the state sits in the file, dotted for nested dicts (default: found automatically)",
    )


def _add_storage_option(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="object-store option (credentials, endpoint); repeat for several",
    )


def _add_inspect(commands: Any) -> None:
    inspect = commands.add_parser(
        "inspect",
        help="show epoch, progress, snapshot and settings of a checkpoint",
        description="STATE is a JSON state or a torch.save file holding one (e.g. under 'dataset').",
    )
    inspect.add_argument("state", type=Path, metavar="STATE")
    _add_state_options(inspect)
    inspect.add_argument(
        "--no-table", action="store_true", help="do not open the table (percent done stays unknown)"
    )
    _add_storage_option(inspect)
    inspect.add_argument("--all", action="store_true", help="list every split, however many")
    inspect.set_defaults(run=_inspect)


def _add_merge(commands: Any) -> None:
    merge = commands.add_parser(
        "merge",
        help="merge every rank's state into one state that any topology resumes from",
    )
    merge.add_argument("states", type=Path, nargs="+", metavar="STATE")
    merge.add_argument("-o", "--output", type=Path, required=True, metavar="OUT", help="JSON file to write")
    _add_state_options(merge)
    merge.add_argument(
        "--allow-lag", action="store_true", help="accept ranks that stopped at different steps"
    )
    merge.set_defaults(run=_merge)


def _add_plan(commands: Any) -> None:
    plan = commands.add_parser(
        "plan", help="split length, surplus rows, fragments per split and what each rank would get"
    )
    plan.add_argument("uri", metavar="URI", help="Lance dataset URI (local path, s3://, gs://, az://)")
    plan.add_argument("--num-splits", type=int, required=True, metavar="S")
    plan.add_argument("--world-size", type=int, default=1, metavar="W")
    plan.add_argument("--num-workers", type=int, default=0, metavar="K", help="DataLoader workers per rank")
    plan.add_argument("--filter", metavar="F", help="SQL predicate; only matching rows are planned")
    plan.add_argument("--version", type=int, help="Lance version (default: the latest)")
    plan.add_argument("--shuffle-seed", type=int, default=0)
    plan.add_argument("--epoch", type=int, default=0)
    plan.add_argument("--no-shuffle", action="store_true", help="storage order")
    _add_storage_option(plan)
    plan.add_argument("--all", action="store_true", help="list every split and rank, however many")
    plan.set_defaults(run=_plan)


# -- entry point -----------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code (2 for usage errors, 1 for failures)."""
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "bench":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "demo" and args.step is not None:
        return _demo_step(args)  # a rank process of the demo: tracebacks kept for debugging
    run: Callable[[argparse.Namespace, list[str]], int] = args.run
    failure: BaseException | None = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            code = run(args, extra)
        except _FAILURES as error:
            code, failure = 1, error
    _report_warnings(caught)
    if failure is not None:
        print(f"lance-streaming: error: {_one_line(failure)}", file=sys.stderr)
    return code


def _one_line(error: BaseException) -> str:
    """The error's message on one line (type name when it has none)."""
    text = " ".join(str(error).split())
    return text or type(error).__name__


def _report_warnings(caught: list[warnings.WarningMessage]) -> None:
    """Print our own warnings as one line each; drop library noise."""
    from .errors import StreamingWarning

    for message in caught:
        if issubclass(message.category, StreamingWarning):
            print(f"lance-streaming: warning: {_one_line(Exception(message.message))}", file=sys.stderr)


# -- demo and bench --------------------------------------------------------------


def _demo(args: argparse.Namespace, extra: list[str]) -> int:
    """Run the whole demo (build, train on W ranks, resume on W' ranks, verify)."""
    from . import demo

    ok = demo.run(workdir=args.workdir, world_size=args.world_size, resume_world_size=args.resume_world_size)
    return 0 if ok else 1


def _demo_step(args: argparse.Namespace) -> int:
    """One step of the demo in its own process (started by ``demo.run``)."""
    from . import demo

    if args.step == "build":
        demo.build(args.workdir)
    else:
        demo.train(args.workdir, rank=args.rank, world_size=args.world_size, port=args.port, phase=args.step)
    return 0


def _bench(args: argparse.Namespace, extra: list[str]) -> int:
    """Run ``python -m benchmarks.bench`` from the source checkout in the current folder."""
    if not (Path.cwd() / "benchmarks" / "bench.py").is_file():
        raise RuntimeError(
            f"no benchmarks/bench.py in {Path.cwd()}: the benchmarks ship with the source "
            "checkout, not the package; run lance-streaming bench from the repository root"
        )
    return subprocess.run([sys.executable, "-m", "benchmarks.bench", *extra], check=False).returncode


# -- reading states --------------------------------------------------------------


def _read_state(path: Path, *, key: str | None = None) -> tuple[dict[str, Any], str | None]:
    """Load a validated state from a JSON file or a ``torch.save`` file.

    Returns the state and where it was found in the file (``None``: the file is the
    state). Raises ``ValueError`` for a file without exactly one usable state.
    """
    from .state import parse_state

    container = _load_file(path)
    where = key if key is not None else _locate_state(container, path)
    state = _at(container, where, path) if where else container
    if not isinstance(state, dict):
        raise ValueError(f"{path}: the state at {where!r} is a {type(state).__name__}, not a dict")
    try:
        parse_state(state)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
    return state, where or None


def _load_file(path: Path) -> Any:
    data = path.read_bytes()
    if data[:4] == b"PK\x03\x04" or data[:1] == b"\x80":  # torch.save: zip, or legacy pickle
        return _torch_load(path)
    try:
        return json.loads(data.decode("utf-8"))
    except ValueError as error:
        raise ValueError(f"{path} is neither a JSON state nor a torch.save file ({error})") from None


def _torch_load(path: Path) -> Any:
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        found = re.search(r"Unsupported global: GLOBAL (\S+)", str(error))
        reason = f" (it holds a {found.group(1)})" if found else ""
        raise ValueError(
            f"{path} cannot be loaded with torch.load(weights_only=True){reason}; only tensors "
            "and plain data load without running code from the file: also save the dataset "
            "state on its own with streaming.save_state_dict and inspect that file"
        ) from None


def _looks_like_state(value: object) -> bool:
    return isinstance(value, dict) and any(name in value for name in _STATE_KEYS)


def _states_in(value: object, where: str = "", depth: int = 0) -> Iterator[str]:
    """Dotted paths of every state-like dict inside ``value`` (not inside a state)."""
    if _looks_like_state(value):
        yield where
    elif isinstance(value, dict) and depth < 8:
        for name, item in value.items():
            yield from _states_in(item, f"{where}.{name}" if where else str(name), depth + 1)


def _locate_state(container: object, path: Path) -> str:
    found = list(_states_in(container))
    if len(found) == 1:
        return found[0]
    if not found:
        keys = sorted(map(str, container)) if isinstance(container, dict) else []
        raise ValueError(
            f"{path} holds no lance-streaming state (a dict with format_version and "
            f"samples_consumed_per_split); top-level keys: {keys}"
        )
    raise ValueError(f"{path} holds several states, at {found}; choose one with --key")


def _at(container: object, where: str, path: Path) -> object:
    value = container
    for name in where.split("."):
        if not isinstance(value, dict) or name not in value:
            keys = sorted(map(str, value)) if isinstance(value, dict) else []
            raise ValueError(f"{path} has no key {where!r} (at {name!r} the keys are {keys})")
        value = value[name]
    return value


# -- inspect ---------------------------------------------------------------------


def _inspect(args: argparse.Namespace, extra: list[str]) -> int:
    """Print a checkpoint's epoch, progress, snapshot and settings."""
    state, where = _read_state(args.state, key=args.key)
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
            f"owned splits: {_ints(owned)} of {num_splits} (one rank's state: the other "
            "splits show where they stand if every rank advanced in lockstep)"
        )
    table = state["table"]
    print(f"snapshot: {table['uri']} at version {table['version']}")
    print("settings: " + _settings_line(state))
    print("progress per split:")
    lines = [
        _split_line(split, count, position, length, split in owned)
        for split, (count, position) in enumerate(zip(samples, state["positions_consumed_per_split"]))
    ]
    _print_listing(lines, show_all=args.all)
    return 0


def _split_length(state: dict[str, Any], args: argparse.Namespace) -> tuple[int | None, str]:
    """L of the snapshot the state pins, found by loading the state; else why not."""
    from .dataset import StreamingDataset

    plan, storage_options = state["plan"], _storage_options(args.storage_option)
    try:
        dataset = StreamingDataset(
            state["table"]["uri"],
            version=state["table"]["version"],
            storage_options=storage_options,
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
        )
        dataset.load_state_dict(state)
    except _FAILURES as error:
        return None, f"the table could not be checked: {_one_line(error)}"
    return dataset.split_length, ""


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
        f"filter={state['filter']!r} columns={columns}"
    )


def _bar(done: int, total: int) -> str:
    filled = round(_BAR_WIDTH * done / total) if total else _BAR_WIDTH
    return "[" + "#" * filled + "." * (_BAR_WIDTH - filled) + "]"


def _split_line(split: int, count: int, position: int, length: int | None, owned: bool) -> str:
    skipped = f", position {position}" if position != count else ""
    note = "" if owned else " (lockstep)"
    if length is None:
        return f"  split {split:>4}: {count} consumed{skipped}{note}"
    percent = 100.0 * count / length if length else 100.0
    return f"  split {split:>4} {_bar(count, length)} {count}/{length} {percent:5.1f}%{skipped}{note}"


def _print_listing(lines: Sequence[str], *, show_all: bool) -> None:
    shown = lines if show_all or len(lines) <= _LISTED else lines[:_LISTED]
    for line in shown:
        print(line)
    if len(shown) < len(lines):
        print(f"  ... {len(lines) - len(shown)} more (use --all)")


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _ints(values: Sequence[int]) -> str:
    return ", ".join(map(str, values))


def _storage_options(pairs: Sequence[str]) -> dict[str, str] | None:
    options = {}
    for pair in pairs:
        name, equals, value = pair.partition("=")
        if not equals or not name:
            raise ValueError(f"--storage-option {pair!r} must look like KEY=VALUE")
        options[name] = value
    return options or None


# -- merge -----------------------------------------------------------------------


def _merge(args: argparse.Namespace, extra: list[str]) -> int:
    """Merge the states of every rank of a run into one JSON state."""
    from .dataset import StreamingDataset
    from .distributed import save_state_dict

    states = [_read_state(path, key=args.key)[0] for path in args.states]
    merged = StreamingDataset.merge_state_dicts(states, allow_lag=args.allow_lag)
    save_state_dict(merged, args.output)
    owned = len(merged["owned_splits"])
    print(
        f"merged {len(states)} states (epoch {merged['epoch']}, {owned} of "
        f"{merged['num_splits']} splits owned, {sum(merged['samples_consumed_per_split'])} "
        f"samples consumed) into {args.output}"
    )
    return 0


# -- plan ------------------------------------------------------------------------


def _plan(args: argparse.Namespace, extra: list[str]) -> int:
    """Print the epoch plan of a table and what a topology would get of it."""
    from .dataset import StreamingDataset
    from .plan import worker_splits

    if args.num_workers < 0:
        raise ValueError(f"--num-workers must be 0 or more, got {args.num_workers}")
    dataset = StreamingDataset(
        args.uri,
        num_splits=args.num_splits,
        rank=0,
        world_size=args.world_size,
        filter=args.filter,
        version=args.version,
        shuffle=not args.no_shuffle,
        shuffle_seed=args.shuffle_seed,
        epoch=args.epoch,
        storage_options=_storage_options(args.storage_option),
    )
    if args.num_workers > 1:  # raises the loader's divisibility error, with the fix
        worker_splits(
            dataset.owned_splits(), worker=0, num_workers=args.num_workers, world_size=args.world_size
        )
    _print_splits(dataset, filtered=args.filter is not None, show_all=args.all)
    _print_topology(dataset, num_workers=args.num_workers, show_all=args.all)
    return 0


def _print_splits(dataset: Any, *, filtered: bool, show_all: bool) -> None:
    plan = dataset._plan  # streaming.plan.EpochPlan: the pure numbers of this epoch
    total, length, num_splits = plan.total_rows, plan.split_length, dataset.num_splits
    surplus = total - num_splits * length
    kind = "live rows matching the filter" if filtered else "live rows"
    print(f"table: {dataset.table_uri} at version {dataset.version}")
    print(f"planned rows N = {total} ({kind}) in {_count(len(plan.fragment_ids), 'fragment')}")
    print(
        f"num_splits S = {num_splits}: split length L = N // S = {length}; "
        f"{_count(surplus, 'surplus row')} left out of epoch {dataset.epoch}"
    )
    touched = [_fragments_of_split(plan, split) for split in range(num_splits)]
    counts = [len(ids) for ids in touched]
    print(f"fragments per split: min {min(counts)}, mean {sum(counts) / len(counts):.1f}, max {max(counts)}")
    lines = [f"  split {split:>4}: fragments {_ints(ids)}" for split, ids in enumerate(touched)]
    _print_listing(lines, show_all=show_all)


def _fragments_of_split(plan: Any, split: int) -> list[int]:
    """Fragment ids holding split ``split``'s rows, in the order they are laid out."""
    import numpy as np

    length, total = plan.split_length, plan.total_rows
    start = (split * length + plan.rotation) % total
    ranges = [(start, min(start + length, total))]
    if start + length > total:  # the split wraps around the end of the laid-out rows
        ranges.append((0, start + length - total))
    found: list[int] = []
    for low, high in ranges:
        first = int(np.searchsorted(plan.bounds, low, side="right")) - 1
        last = int(np.searchsorted(plan.bounds, high - 1, side="right")) - 1
        found += [int(plan.fragment_ids[index]) for index in range(first, last + 1)]
    return list(dict.fromkeys(found))


def _print_topology(dataset: Any, *, num_workers: int, show_all: bool) -> None:
    from .plan import rank_splits, worker_splits

    world_size, length = dataset.world_size, dataset.split_length
    per_rank = dataset.num_splits // world_size
    print(
        f"world_size W = {world_size}, num_workers k = {num_workers}: every rank gets "
        f"{per_rank} splits = {per_rank * length} samples per epoch"
    )
    lines = []
    for rank in range(world_size):
        splits = rank_splits(dataset.num_splits, rank=rank, world_size=world_size)
        lines.append(f"  rank {rank}: splits {_ints(splits)}")
        for worker in range(num_workers if num_workers > 1 else 0):
            mine = worker_splits(splits, worker=worker, num_workers=num_workers, world_size=world_size)
            lines.append(f"    worker {worker}: splits {_ints(mine)} ({len(mine) * length} samples)")
    _print_listing(lines, show_all=show_all)


if __name__ == "__main__":
    sys.exit(main())
