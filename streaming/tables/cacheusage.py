"""What the command line shows of the disk cache and how it empties it.

``usage`` lists what the cache holds (per table: its URI, the versions seen and
how many of their files are cached); ``clear`` removes every entry no running
process holds. Both are safe while jobs use the cache.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil

from .cachefs import KINDS, listdir, locked, reap_dead, scan

__all__ = ["clear", "usage"]


def usage(root: str) -> dict[str, object]:
    """What the cache at ``root`` holds: bytes, entries, and per table its URI and the
    versions seen, with how many of each version's files are cached."""
    store = os.path.join(root, "store")
    found = scan(store)
    tables = []
    for table in listdir(os.path.join(root, "tables")):
        folder = os.path.join(root, "tables", table)
        try:
            with open(os.path.join(folder, "table.json")) as file:
                uri = json.load(file)["uri"]
        except (OSError, ValueError, KeyError):
            uri = "?"
        mine = [item for item in found if item.path.startswith(os.path.join(store, table) + os.sep)]
        versions = []
        for name in listdir(folder):
            if name.startswith("v") and name.endswith(".json"):
                with contextlib.suppress(OSError, ValueError, KeyError):
                    with open(os.path.join(folder, name)) as file:
                        recorded = json.load(file)
                    files = recorded["files"]
                    cached = sum(os.path.exists(os.path.join(store, table, path)) for path in files)
                    versions.append({"version": recorded["version"], "files": len(files), "cached": cached})
        versions.sort(key=lambda item: item["version"])
        tables.append(
            {
                "uri": uri,
                "key": table,
                "entries": len(mine),
                "bytes": sum(item.size for item in mine),
                "versions": versions,
            }
        )
    return {
        "directory": root,
        "entries": len(found),
        "bytes": sum(item.size for item in found),
        "held": sum(item.links > 1 for item in found),
        "partial": len(listdir(os.path.join(root, "tmp"))),
        "tables": tables,
    }


def clear(root: str) -> dict[str, int]:
    """Remove every entry no running process holds, and what ended processes left.

    Safe while jobs run: they read what they hold and fill again what they need.
    """
    reap_dead(root)
    removed = freed = kept = 0
    with locked(os.path.join(root, "evict.lock")):
        for found in scan(os.path.join(root, "store")):
            if found.links > 1:
                kept += 1
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(found.path)
                removed, freed = removed + 1, freed + found.size
        for table in listdir(os.path.join(root, "tables")):
            if not _scan_table(root, table):
                shutil.rmtree(os.path.join(root, "tables", table), ignore_errors=True)
    return {"removed": removed, "bytes": freed, "held": kept}


def _scan_table(root: str, table: str) -> bool:
    """True when ``table`` still has an entry."""
    return any(listdir(os.path.join(root, "store", table, kind)) for kind in KINDS)
