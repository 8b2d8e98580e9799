"""The Python examples of ``docs/*.md`` and ``README.md``: every ```python block that is
not marked ``# not run``, as a pytest parameter (page, first line, code)."""

from __future__ import annotations

from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
SKIP_MARK = "# not run"


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(first line number, code) of every ```python block of a Markdown text."""
    blocks, current, start = [], None, 0
    for number, line in enumerate(text.splitlines(), start=1):
        if current is None and line.strip() == "```python":
            current, start = [], number + 1
        elif current is not None and line.strip() == "```":
            blocks.append((start, "\n".join(current) + "\n"))
            current = None
        elif current is not None:
            current.append(line)
    assert current is None, f"a ```python block opened at line {start} is never closed"
    return blocks


def examples() -> list[pytest.param]:
    found = []
    for page in [*sorted(DOCS.glob("*.md")), DOCS.parent / "README.md"]:
        for line, code in python_blocks(page.read_text()):
            if not code.startswith(SKIP_MARK):
                found.append(pytest.param(page.name, line, code, id=f"{page.name}:{line}"))
    return found
