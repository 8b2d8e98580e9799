"""No private standard-library or torch name outside ``streaming/_compat.py``.

A private name of the standard library or torch (``sys._getframe``,
``multiprocessing.spawn._main``, ``multiprocessing.current_process()._inheriting``,
``torch.utils.data._utils``) may change in any release. ``_compat.py`` holds every one
behind a named hook, and ``tests/project/test_compat.py`` calls each hook against the
installed versions, so an upgrade that breaks one fails there first.

Read from the source with ``ast`` (imports inside functions included). A module's
standard-library and torch names are the ones its imports bind (``import sys``,
``import multiprocessing.spawn``, ``from multiprocessing import current_process``,
``import torch.utils.data as data``). Found outside ``_compat.py``:

- an import of a private module or name of theirs (``import _multiprocessing``,
  ``from torch.utils.data._utils import collate``, ``from sys import _getframe``);
- a private member reached from one of their names, through attributes, calls and
  subscripts (``sys._getframe(1)``, ``multiprocessing.current_process()._inheriting``),
  or by ``getattr``/``hasattr``/``setattr``/``delattr`` with a literal name.

Our own objects' private members (``self._x``, ``other._y``) are
``tests/project/test_architecture.py``'s rules, not this test's. ``DOCUMENTED`` lists the
names with a leading underscore that the standard library documents as public.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "streaming"

THEIRS = frozenset(sys.stdlib_module_names) | {"torch"}
"""Top-level modules whose private names only ``_compat.py`` may use."""

HOOKS = "_compat.py"

DOCUMENTED = {"os._exit": "the os module's reference documents it: a child's exit after fork"}

ACCESSORS = {"getattr", "hasattr", "setattr", "delattr"}


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def theirs(dotted: str) -> bool:
    return dotted.split(".")[0] in THEIRS


def bound_names(tree: ast.Module) -> dict[str, str]:
    """Each name an import binds to a standard-library or torch module or name: name -> dotted."""
    bound = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if theirs(alias.name):
                    name = alias.asname or alias.name.split(".")[0]
                    bound[name] = alias.name if alias.asname else name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and theirs(node.module or ""):
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return bound


def root(node: ast.expr) -> ast.expr:
    """Where a chain of attributes, calls and subscripts starts: ``a`` of ``a.b().c[0]``."""
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node


def private_imports(node: ast.AST) -> Iterator[str]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            if theirs(alias.name) and any(is_private(part) for part in alias.name.split(".")):
                yield f"imports {alias.name}"
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and theirs(node.module or ""):
        for alias in node.names:
            dotted = f"{node.module}.{alias.name}"
            if any(is_private(part) for part in dotted.split(".")):
                yield f"imports {dotted}"


def private_members(node: ast.AST, bound: dict[str, str]) -> Iterator[str]:
    def from_theirs(subject: ast.expr) -> bool:
        start = root(subject)
        return isinstance(start, ast.Name) and start.id in bound

    if isinstance(node, ast.Attribute) and is_private(node.attr) and from_theirs(node.value):
        if ast.unparse(node) not in DOCUMENTED:
            yield f"reads {ast.unparse(node)}"
    elif isinstance(node, ast.Call) and ast.unparse(node.func) in ACCESSORS and len(node.args) >= 2:
        subject, name = node.args[0], getattr(node.args[1], "value", None)
        if isinstance(name, str) and is_private(name) and from_theirs(subject):
            yield f"reads {ast.unparse(subject)}.{name}"


def findings(path: str, source: str) -> list[str]:
    """Each private standard-library or torch name ``source`` (at ``path`` under streaming/) uses."""
    if path == HOOKS:
        return []
    tree = ast.parse(source)
    bound = bound_names(tree)
    found = []
    for node in ast.walk(tree):
        for what in (*private_imports(node), *private_members(node, bound)):
            found.append(f"streaming/{path}:{getattr(node, 'lineno', 0)} {what}")
    return found


def test_only_compat_uses_a_private_standard_library_or_torch_name():
    found = [
        finding
        for file in sorted(PACKAGE.rglob("*.py"))
        for finding in findings(file.relative_to(PACKAGE).as_posix(), file.read_text())
    ]
    assert not found, "move each behind a named hook in streaming/_compat.py:\n" + "\n".join(found)


def test_compat_holds_private_names_the_check_would_find():
    """The exemption is used: ``_compat.py`` read as any other module is found."""
    assert findings("made_up.py", (PACKAGE / HOOKS).read_text())


MADE_UP = [
    "import sys\ndef f():\n    frame = sys._getframe(1)",
    "import multiprocessing.spawn\ndef f(frames):\n    return multiprocessing.spawn._main.__code__ in frames",
    "import multiprocessing\nx = getattr(multiprocessing.current_process(), '_inheriting', 0)",
    "import multiprocessing\ndef f():\n    return multiprocessing.current_process()._inheriting",
    "from multiprocessing import current_process\nx = current_process()._inheriting",
    "from sys import _getframe",
    "def f():\n    from torch.utils.data._utils.pin_memory import pin_memory",
    "import torch._C",
    "import _multiprocessing",
    "import torch.utils.data as data\nx = data._utils",
    "import multiprocessing.util\nx = multiprocessing.util._finalizer_registry",
    "import torch\nx = hasattr(torch.utils.data, '_utils')",
]


@pytest.mark.parametrize("source", MADE_UP)
def test_the_check_finds_a_made_up_private_name(source):
    assert findings("loader/made_up.py", source), source


CLEAN = """
import os
import sys
import multiprocessing
from .. import _compat
from ..core.plan import RowRange
from ._common import storage_options
def f(self, other, frame):
    os._exit(0)
    frame = _compat.caller_frame()
    process = multiprocessing.current_process().name
    return self._x, other._y, getattr(other, "_z", None), sys.modules, frame.f_back, RowRange
"""


def test_the_check_passes_our_own_private_names():
    assert findings("loader/made_up.py", CLEAN) == []
