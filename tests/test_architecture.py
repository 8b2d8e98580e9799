"""The import contract of ``streaming/``: wings import downward only, no cycles, Lance in one wing.

Read from the source with ``ast`` (function-level imports included), so the
picture in docs/architecture.md cannot drift: a lower wing that imports a higher
one, a module outside ``read/`` that imports Lance, a pure wing that imports
torch, an import cycle between modules, or a module that imports another
module's private name fails here, naming the file and the line.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "streaming"

LAYERS = ("core", "state", "read", "dataset", "loader", "mixture", "app")
"""Bottom to top; a module may import its own wing and the wings below it."""

BASE = {"errors", "_compat"}
"""Top-level modules every wing may import (they import nothing of the package)."""

APP = {"cli", "distributed", "demo", "__init__", "__main__"}
"""What users run and import: on top of everything."""

LANCE = ("lance", "lancedb")
PURE = ("core", "state")
"""Wings that import neither torch nor Lance."""

LANCE_OUTSIDE_READ = {"demo"}
"""The demo builds its table with ``lancedb`` like a user would; it is an application."""


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)] = path
    return found


MODULES = modules()


def wing(module: str) -> str:
    head = module.split(".")[0]
    if head in BASE:
        return "base"
    if head in APP:
        return "app"
    return head


def resolve(module: str, node: ast.ImportFrom) -> list[str]:
    """The package modules ``node`` (in ``module``) imports, as dotted names under streaming."""
    if node.level == 0:
        if not (node.module or "").startswith("streaming"):
            return []
        base = (node.module or "").split(".")[1:]
    else:
        path = MODULES[module]
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        if module == "__init__":
            package = []
        base = package[: len(package) - (node.level - 1)] + (node.module.split(".") if node.module else [])
    targets = []
    for alias in node.names:
        full = ".".join([*base, alias.name])
        targets.append(full if full in MODULES else ".".join(base))
    return [target for target in targets if target in MODULES]


def imports() -> list[tuple[str, int, str, str]]:
    """(module, line, imported package module or external top-level name, kind)."""
    found = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level == 0 and not (node.module or "").startswith("streaming"):
                    found.append((module, node.lineno, (node.module or "").split(".")[0], "external"))
                for target in resolve(module, node):
                    found.append((module, node.lineno, target, "package"))
                for alias in node.names:
                    if (
                        alias.name.startswith("_")
                        and not alias.name.startswith("__")
                        and alias.name != "_compat"
                    ):
                        found.append((module, node.lineno, alias.name, "private-name"))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    kind = "package" if alias.name.startswith("streaming.") else "external"
                    name = (
                        alias.name.removeprefix("streaming.")
                        if kind == "package"
                        else alias.name.split(".")[0]
                    )
                    found.append((module, node.lineno, name, kind))
    return found


IMPORTS = imports()


def test_the_wings_are_the_ones_the_docs_draw():
    wings = {wing(module) for module in MODULES}
    assert wings == {*LAYERS, "base"}, wings
    assert len(MODULES) > 50


def test_wings_import_only_downward():
    broken = []
    for module, line, target, kind in IMPORTS:
        if kind != "package":
            continue
        source, destination = wing(module), wing(target)
        if destination == "base":
            continue
        if source == "base" or LAYERS.index(destination) > LAYERS.index(source):
            broken.append(
                f"streaming/{module.replace('.', '/')}.py:{line} ({source}) imports {target} ({destination})"
            )
    assert not broken, "imports pointing up:\n" + "\n".join(broken)


def test_only_the_read_wing_imports_lance():
    found = [
        f"{module}:{line}"
        for module, line, name, kind in IMPORTS
        if kind == "external"
        and name in LANCE
        and wing(module) != "read"
        and module not in LANCE_OUTSIDE_READ
    ]
    assert not found, found


@pytest.mark.parametrize("pure", PURE)
def test_the_pure_wings_import_neither_torch_nor_lance(pure):
    found = [
        f"{module}:{line} imports {name}"
        for module, line, name, kind in IMPORTS
        if kind == "external" and wing(module) == pure and name in ("torch", *LANCE)
    ]
    assert not found, found


def test_the_base_modules_import_nothing_of_the_package():
    found = [
        f"{module}:{line}"
        for module, line, _, kind in IMPORTS
        if kind == "package" and wing(module) == "base"
    ]
    assert not found, found


def test_no_module_imports_another_modules_private_names():
    found = [
        f"{module}:{line} imports {name}" for module, line, name, kind in IMPORTS if kind == "private-name"
    ]
    assert not found, found


def test_no_import_cycles():
    graph: dict[str, set[str]] = defaultdict(set)
    for module, _, target, kind in IMPORTS:
        if kind == "package" and target != module:
            graph[module].add(target)
    cycles, state = [], {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = "done"

    for module in sorted(MODULES):
        if module not in state:
            visit(module, [module])
    assert not cycles, cycles


def test_the_check_sees_a_violation():
    """The checker itself: an upward import in a made-up module is found."""
    node = ast.parse("from ..loader.loader import StreamingDataLoader").body[0]
    assert isinstance(node, ast.ImportFrom)
    assert resolve("core.plan", node) == ["loader.loader"]
    assert LAYERS.index(wing("loader.loader")) > LAYERS.index(wing("core.plan"))


PRIVATE_READS_ALLOWED = {
    (
        "dataset/watchdog.py",
        "multiprocessing.spawn._main",
    ): "the standard library's; tells a spawned worker's own start apart",
    ("loader/supervisor.py", "supervisor._workers"): "its own module's class, made by supervise() there",
    ("read/source.py", "FilterIndex._FIELDS"): "its own module's class, rebuilt by the unpickler there",
    ("read/source.py", "index._folder"): "its own module's class, rebuilt by the unpickler there",
    (
        "read/cached.py",
        "handle._ds",
    ): "pylance's; the pinned version's manifest bytes, which lance.LanceDataset(serialized_manifest=) "
    "takes back (pylance's own pickling reads them the same way)",
}
"""Reads of a private attribute of something other than ``self``/``cls``, with why."""


def test_no_module_reads_the_private_members_of_another():
    """Loaders reach datasets and mixtures through the declared protocol (``dataset/host.py``);
    ``_compat.py`` is where every private torch and standard-library hook lives."""
    found = []
    for module, path in MODULES.items():
        if module == "_compat":
            continue
        relative = str(path.relative_to(PACKAGE))
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                not isinstance(node, ast.Attribute)
                or not node.attr.startswith("_")
                or node.attr.startswith("__")
            ):
                continue
            base = node.value
            if isinstance(base, ast.Name) and base.id in (
                "self",
                "cls",
                "_compat",
                "os",
                "sys",
            ):  # os._exit, sys._getframe: documented
                continue
            if (relative, ast.unparse(node)) not in PRIVATE_READS_ALLOWED:
                found.append(f"streaming/{relative}:{node.lineno} reads {ast.unparse(node)}")
    assert not found, "\n".join(found)
