"""``lance-streaming cache``: what the local cache of tables on object storage holds, and clearing it."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from ._common import count

__all__ = ["run"]


def _size(nbytes: float) -> str:
    """``12.3 MiB``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if nbytes < 1024 or unit == "TiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    return f"{nbytes:.1f} TiB"


def _folder(args: argparse.Namespace) -> str:
    from ..core.cachesettings import CACHE_DIR_ENV

    folder = args.directory or os.environ.get(CACHE_DIR_ENV)
    if not folder:
        raise ValueError(f"name the cache folder: lance-streaming cache DIR (or set {CACHE_DIR_ENV})")
    if not os.path.isdir(os.path.join(folder, "store")):
        raise ValueError(
            f"no cache at {folder!r}: it holds no store/ folder; pass the cache_dir of your runs"
        )
    return os.path.abspath(folder)


def _print(listing: dict[str, Any]) -> None:
    entries = "1 entry" if listing["entries"] == 1 else f"{listing['entries']} entries"
    print(
        f"cache {listing['directory']}: {_size(listing['bytes'])} in {entries} "
        f"({listing['held']} being read now, {count(listing['partial'], 'download')} in progress)"
    )
    for table in listing["tables"]:
        print(f"  {table['uri']}: {_size(table['bytes'])} in {table['entries']} entries")
        for version in table["versions"]:
            print(f"    version {version['version']}: {version['cached']}/{version['files']} files cached")


def run(args: argparse.Namespace, extra: list[str]) -> int:
    """Show the cache's size, entries, tables and versions; with ``--clear`` empty it first."""
    from ..tables import diskcache

    folder = _folder(args)
    if args.clear:
        cleared = diskcache.clear(folder)
        print(
            f"removed {cleared['removed']} entries ({_size(cleared['bytes'])}); "
            f"{cleared['held']} kept because a running process is reading them"
        )
    listing = diskcache.usage(folder)
    if args.json:
        print(json.dumps(listing, indent=1))
    elif not args.clear:
        _print(listing)
    return 0
