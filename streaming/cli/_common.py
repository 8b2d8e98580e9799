"""Pieces every command of the command line shares: failures, listings, options."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "FAILURES",
    "KEY_VARIABLE",
    "add_table_options",
    "count",
    "ints",
    "one_line",
    "print_listing",
    "storage_options",
]

FAILURES = (ValueError, OSError, RuntimeError, TypeError)  # one line on stderr, exit 1
LISTED = 32  # lines of a per-split or per-rank listing before "use --all"
KEY_VARIABLE = "LANCEDB_API_KEY"
"""Where the API key of a LanceDB server is read from (lancedb's own variable)."""


def one_line(error: BaseException) -> str:
    """The error's message on one line (type name when it has none)."""
    text = " ".join(str(error).split())
    return text or type(error).__name__


def print_listing(lines: Sequence[str], *, show_all: bool) -> None:
    """Print ``lines``; past ``LISTED`` of them only a count, unless ``show_all``."""
    shown = lines if show_all or len(lines) <= LISTED else lines[:LISTED]
    for line in shown:
        print(line)
    if len(shown) < len(lines):
        print(f"  ... {len(lines) - len(shown)} more (use --all)")


def count(number: int, noun: str) -> str:
    """``1 fragment``, ``2 fragments``."""
    return f"{number} {noun}{'' if number == 1 else 's'}"


def ints(values: Sequence[int]) -> str:
    """``0, 2, 4``."""
    return ", ".join(map(str, values))


def storage_options(pairs: Sequence[str]) -> dict[str, str] | None:
    """The ``--storage-option KEY=VALUE`` pairs as a dict (``None`` for none)."""
    options = {}
    for pair in pairs:
        name, equals, value = pair.partition("=")
        if not equals or not name:
            raise ValueError(f"--storage-option {pair!r} must look like KEY=VALUE")
        options[name] = value
    return options or None


def add_table_options(command: argparse.ArgumentParser) -> None:
    """``--storage-option`` for object storage; the key file, region and host of a LanceDB server."""
    command.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="object-store option (credentials, endpoint); repeat for several",
    )
    command.add_argument(
        "--api-key-file",
        type=Path,
        metavar="FILE",
        help=f"db:// tables: a file holding the API key (default: ${KEY_VARIABLE})",
    )
    command.add_argument("--region", default="us-east-1", help="db:// tables: the LanceDB Cloud region")
    command.add_argument(
        "--host-override", metavar="URL", help="db:// tables: the server's URL (LanceDB Enterprise)"
    )
