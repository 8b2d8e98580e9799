"""The suites: one module per suite, each run as ``python -m benchmarks NAME [OPTIONS]``.

A suite is a module of this package whose name does not start with ``_``; its
docstring's first line is what ``python -m benchmarks --list`` prints, and its
``main(argv)`` parses the suite's options (``--help`` lists them) and runs it. Adding
a suite is adding one module. Suites use the shared harness (``benchmarks.harness``),
the measured cases (``benchmarks.cases``) and ``streaming``'s public API.
"""

from __future__ import annotations

import ast
from importlib import import_module
from pathlib import Path
from types import ModuleType

__all__ = ["load", "names", "summary"]

_HERE = Path(__file__).resolve().parent


def names() -> list[str]:
    """Every suite's name, sorted."""
    return sorted(path.stem for path in _HERE.glob("*.py") if not path.stem.startswith("_"))


def summary(name: str) -> str:
    """The first line of suite ``name``'s docstring, read without importing the suite."""
    docstring = ast.get_docstring(ast.parse((_HERE / f"{name}.py").read_text(encoding="utf-8"))) or ""
    return docstring.strip().splitlines()[0].replace("``", "`") if docstring.strip() else ""


def load(name: str) -> ModuleType:
    """Import suite ``name``.

    Raises:
        ValueError: no suite has that name (the message lists the suites).
    """
    if name not in names():
        raise ValueError(
            f"unknown suite {name!r}; the suites are: {', '.join(names())} "
            "(python -m benchmarks --list says what each measures)"
        )
    return import_module(f"{__name__}.{name}")
