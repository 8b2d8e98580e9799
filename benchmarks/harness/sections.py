"""Named sections of ``docs/benchmarks.md`` that separate suites own.

The ``bench`` suite rewrites the document; a section written by another suite
(``packing``, ``transfer``, ``transforms``, ``soak``, ...) lies between its two
markers and is kept across those rewrites, after the bench suite's tables. The
table of current answers that opens the page (``answers``, written by hand from the
runs) is kept too, before them.
"""

from __future__ import annotations

from pathlib import Path

NAMES = (
    "packing",
    "transfer",
    "transforms",
    "soak",
    "mixtures",
    "filterplan",
    "workerpath",
    "plainpath",
    "bucket",
    "bucket-cache",
    "bucket-first-batch",
    "remote-table",
    "remote-deletions",
    "gpu",
    "blobs",
    "widths",
    "workerstart",
    "defaultsplits",
)
"""Sections other commands write, in the order they follow the main document."""

OPENING = "answers"
"""The section that opens the page, before the bench suite's tables."""


def markers(name: str) -> tuple[str, str]:
    """The begin and end markers of section ``name``."""
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def _section(text: str, name: str) -> str | None:
    begin, end = markers(name)
    if begin not in text or end not in text:
        return None
    return begin + text.split(begin, 1)[1].split(end, 1)[0] + end


def kept(path: Path) -> str:
    """Every named section ``path`` holds, each after a blank line (empty if none)."""
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    found = [section for section in (_section(old, name) for name in NAMES) if section is not None]
    return "".join("\n" + section + "\n" for section in found)


def opening(path: Path) -> str:
    """The ``OPENING`` section ``path`` holds, followed by a blank line (empty if none)."""
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    found = _section(old, OPENING)
    return "" if found is None else found + "\n\n"


def replace(path: Path, name: str, body: str) -> None:
    """Put ``body`` between the markers of ``name`` in ``path`` (appended if absent)."""
    begin, end = markers(name)
    text = f"{begin}\n{body.strip()}\n{end}"
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    current = _section(old, name)
    new = old.replace(current, text) if current is not None else old.rstrip("\n") + "\n\n" + text + "\n"
    path.write_text(new, encoding="utf-8")


def publish(text: str, *, name: str, out: Path | None) -> None:
    """Print ``text``; with ``out``, also make it that file's section ``name``."""
    print(text)
    if out is not None:
        replace(out, name, text)
