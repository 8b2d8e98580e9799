"""Command line of lance-streaming: ``demo``, ``inspect``, ``merge``, ``plan``, ``profile``, ``cache``
and ``bench``.

Run it as ``lance-streaming COMMAND`` or ``python -m streaming COMMAND``. A failure
prints one line on stderr and exits with 1; a usage error exits with 2.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._common import FAILURES, add_table_options, one_line
from .cache import run as run_cache
from .inspect import run as run_inspect
from .merge import run as run_merge
from .plan import run as run_plan
from .profile import add_parser as add_profile
from .run import run_bench, run_demo, run_demo_step

__all__ = ["main"]

# The parser and the exit codes live here; each command lives in its own module of
# this package: inspect, merge, plan, run (demo, bench), reading states in _states
# and what they share in _common.

# -- the parser ------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lance-streaming", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_demo(commands)
    _add_inspect(commands)
    _add_merge(commands)
    _add_plan(commands)
    add_profile(commands)
    _add_cache(commands)
    bench = commands.add_parser(
        "bench",
        add_help=False,
        help="run the bench suite (python -m benchmarks bench) from a source checkout",
        description="Every argument is passed on to python -m benchmarks bench "
        "(python -m benchmarks --list: the other suites).",
    )
    bench.set_defaults(run=run_bench)
    return parser


def _add_demo(commands: Any) -> None:
    demo = commands.add_parser("demo", help="train, checkpoint, resume on another topology, verify")
    demo.add_argument("--workdir", type=Path, default=None, help="folder for the table and checkpoints")
    demo.add_argument("--world-size", type=int, default=2, help="ranks before the checkpoint")
    demo.add_argument("--resume-world-size", type=int, default=3, help="ranks after the resume")
    demo.add_argument("--step", choices=["build", "train", "resume"], help=argparse.SUPPRESS)
    demo.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    demo.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    demo.set_defaults(run=run_demo)


def _add_state_options(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--key",
        help="where the state sits in the file, dotted for nested dicts (default: found automatically)",
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
    add_table_options(inspect)
    inspect.add_argument("--all", action="store_true", help="list every split, however many")
    inspect.set_defaults(run=run_inspect)


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
    merge.set_defaults(run=run_merge)


def _add_plan(commands: Any) -> None:
    plan = commands.add_parser(
        "plan", help="split length, surplus rows, fragments per split and what each rank would get"
    )
    plan.add_argument(
        "uri",
        metavar="URI",
        help="Lance dataset URI (local path, s3://, gs://, az://) or db://DATABASE/TABLE",
    )
    plan.add_argument("--num-splits", type=int, required=True, metavar="S")
    plan.add_argument("--world-size", type=int, default=1, metavar="W")
    plan.add_argument("--num-workers", type=int, default=0, metavar="K", help="DataLoader workers per rank")
    plan.add_argument("--filter", metavar="F", help="SQL predicate; only matching rows are planned")
    plan.add_argument("--version", type=int, help="Lance version (default: the latest)")
    plan.add_argument("--shuffle-seed", type=int, default=0)
    plan.add_argument("--epoch", type=int, default=0)
    plan.add_argument("--no-shuffle", action="store_true", help="storage order")
    add_table_options(plan)
    plan.add_argument("--all", action="store_true", help="list every split and rank, however many")
    plan.set_defaults(run=run_plan)


def _add_cache(commands: Any) -> None:
    cache = commands.add_parser(
        "cache",
        help="size, entries, tables and versions of the local cache of tables on object storage; "
        "--clear empties it",
    )
    cache.add_argument(
        "directory", nargs="?", metavar="DIR", help="the cache_dir (default: $LANCE_STREAMING_CACHE_DIR)"
    )
    cache.add_argument(
        "--clear", action="store_true", help="remove every entry no running process is reading"
    )
    cache.add_argument("--json", action="store_true", help="print the listing as JSON")
    cache.set_defaults(run=run_cache)


# -- entry point -----------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code (2 for usage errors, 1 for failures)."""
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "bench":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "demo" and args.step is not None:
        return run_demo_step(args)  # a rank process of the demo: tracebacks kept for debugging
    command: Callable[[argparse.Namespace, list[str]], int] = args.run
    failure: BaseException | None = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            code = command(args, extra)
        except FAILURES as error:
            code, failure = 1, error
    _report_warnings(caught)
    if failure is not None:
        print(f"lance-streaming: error: {one_line(failure)}", file=sys.stderr)
    return code


def _report_warnings(caught: list[warnings.WarningMessage]) -> None:
    """Print our own warnings as one line each; drop library noise."""
    from ..errors import StreamingWarning

    for message in caught:
        if issubclass(message.category, StreamingWarning):
            print(f"lance-streaming: warning: {one_line(Exception(message.message))}", file=sys.stderr)
