"""``lance-streaming profile``: measure a loader on your own table and settings, and say what to change."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(commands: Any) -> None:
    """The ``profile`` command's arguments: the table, the dataset and loader settings, the run."""
    from ..profiling.trials import KEYWORDS
    from ._common import add_table_options

    command = commands.add_parser(
        "profile",
        help="time to first batch, rows/s, where the time goes, memory, requests, and the settings "
        "that measured faster",
        description="Build the dataset and loader you would, draw batches as a trainer does, report "
        "what was measured, then try other settings on the same table and advise those that beat "
        "yours by more than the run-to-run noise.",
    )
    command.add_argument("uri", metavar="URI", help="Lance dataset URI or db://DATABASE/TABLE")
    command.add_argument(
        "--batches", type=int, default=100, metavar="N", help="batches to draw (default 100)"
    )
    command.add_argument("--batch-size", type=int, default=64, metavar="B")
    command.add_argument("--num-workers", type=int, default=0, metavar="K", help="DataLoader workers")
    command.add_argument(
        "--step-ms", type=float, default=0.0, metavar="MS", help="time your training step takes per batch"
    )
    command.add_argument("--num-splits", type=int, metavar="S", help="default: 1")
    command.add_argument("--block-rows", type=int, metavar="R")
    command.add_argument("--shuffle-buffer-size", type=int, metavar="R")
    command.add_argument("--columns", metavar="A,B", help="columns to read, comma-separated (default: all)")
    command.add_argument("--filter", metavar="F", help="SQL predicate")
    command.add_argument("--cache-dir", metavar="DIR", help="local cache of a table on object storage")
    command.add_argument("--no-shuffle", action="store_true", help="storage order")
    command.add_argument(
        "--no-tries",
        action="store_true",
        help="measure your settings only: try no other setting (nothing is then advised)",
    )
    command.add_argument(
        "--try",
        dest="tries",
        action="append",
        metavar="KEYWORD",
        choices=KEYWORDS,
        help=f"try only changes of this keyword ({', '.join(KEYWORDS)}); repeat for several "
        "(default: every one)",
    )
    command.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a progress bar on stderr (default: on a terminal)",
    )
    add_table_options(command)
    command.set_defaults(run=run)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    """Profile the loader and print what was measured, then the settings that helped."""
    from ..profiling.run import profile
    from ._common import storage_options
    from ._tables import open_table

    settings: dict[str, Any] = {
        "num_splits": args.num_splits,
        "block_rows": args.block_rows,
        "shuffle_buffer_size": args.shuffle_buffer_size,
        "columns": args.columns.split(",") if args.columns else None,
        "filter": args.filter,
        "cache_dir": args.cache_dir,
        "shuffle": not args.no_shuffle,
        "storage_options": storage_options(args.storage_option),
    }
    result = profile(
        open_table(args.uri, args),
        batch_size=args.batch_size,
        num_workers=args.num_workers,
        batches=args.batches,
        step_seconds=args.step_ms / 1000,
        progress=args.progress,
        tries=False if args.no_tries else (args.tries or True),
        **settings,
    )
    for line in result.report():
        print(line)
    print("what to change:")
    for line in result.advice():
        print(f"  - {line}")
    return 0
