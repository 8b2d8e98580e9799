"""Size limits of ``streaming/``: no file over 400 lines, no function over 50.

Read from the source with ``ast`` (a function's lines run from its ``def`` to its
last line, docstring included, decorators excluded; nested functions counted
within their parent and on their own). A finding names the file, the line, the
function and its length. ``ALLOWED`` lists the exceptions, each with why.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "streaming"
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 50

ALLOWED: dict[tuple[str, str], str] = {}
"""(file under ``streaming/``, qualified function name): why it may exceed the limit."""


def long_files(package: Path, limit: int) -> list[str]:
    """``file: N lines`` for each ``.py`` file under ``package`` over ``limit`` lines."""
    found = []
    for path in sorted(package.rglob("*.py")):
        lines = len(path.read_text().splitlines())
        if lines > limit:
            found.append(f"{path.relative_to(package)}: {lines} lines (at most {limit}; split it by job)")
    return found


def functions(tree: ast.AST, prefix: str = "") -> list[tuple[str, int, int]]:
    """(qualified name, first line, line count) of every function in ``tree``."""
    found = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = f"{prefix}{node.name}"
            assert node.end_lineno is not None
            found.append((name, node.lineno, node.end_lineno - node.lineno + 1))
            found.extend(functions(node, f"{name}."))
        elif isinstance(node, ast.ClassDef):
            found.extend(functions(node, f"{prefix}{node.name}."))
        else:
            found.extend(functions(node, prefix))
    return found


def long_functions(package: Path, limit: int, allowed: dict[tuple[str, str], str]) -> list[str]:
    """``file:line name: N lines`` for each function over ``limit`` lines not in ``allowed``."""
    found = []
    for path in sorted(package.rglob("*.py")):
        where = str(path.relative_to(package))
        for name, line, count in functions(ast.parse(path.read_text())):
            if count > limit and (where, name) not in allowed:
                found.append(f"{where}:{line} {name}: {count} lines (at most {limit}; split it)")
    return found


def test_no_file_over_the_limit() -> None:
    assert long_files(PACKAGE, MAX_FILE_LINES) == []


def test_no_function_over_the_limit() -> None:
    assert long_functions(PACKAGE, MAX_FUNCTION_LINES, ALLOWED) == []


def test_every_allowed_function_exists_and_is_over_the_limit() -> None:
    """An exception that no longer applies is removed from ``ALLOWED``."""
    lengths = {
        (str(path.relative_to(PACKAGE)), name): count
        for path in PACKAGE.rglob("*.py")
        for name, _, count in functions(ast.parse(path.read_text()))
    }
    stale = [key for key in ALLOWED if lengths.get(key, 0) <= MAX_FUNCTION_LINES]
    assert stale == []


def test_the_checks_find_a_long_file_and_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"        x{i} = {i}" for i in range(MAX_FUNCTION_LINES - 1))
    (tmp_path / "made_up.py").write_text(f"class Made:\n    def up(self):\n{body}\n        return 0\n")
    (tmp_path / "short.py").write_text("def fine():\n    return 1\n")
    assert long_functions(tmp_path, MAX_FUNCTION_LINES, {}) == [
        f"made_up.py:2 Made.up: {MAX_FUNCTION_LINES + 1} lines (at most {MAX_FUNCTION_LINES}; split it)"
    ]
    assert long_functions(tmp_path, MAX_FUNCTION_LINES, {("made_up.py", "Made.up"): "why"}) == []
    assert long_files(tmp_path, MAX_FUNCTION_LINES) == [
        f"made_up.py: {MAX_FUNCTION_LINES + 2} lines (at most {MAX_FUNCTION_LINES}; split it by job)"
    ]
