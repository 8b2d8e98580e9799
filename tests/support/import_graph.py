"""The import graph of ``streaming/`` and the rules it keeps, read from the source with
``ast``; ``tests/project/test_architecture.py`` holds the package to ``RULES`` and
``tests/project/test_architecture_doc.py`` holds docs/architecture.md to the graph."""

from __future__ import annotations

import ast
import functools
import importlib.util
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "streaming"

LAYERS = (
    "core",
    "state",
    "tables",
    "samples",
    "workers",
    "dataset",
    "loader",
    "mixture",
    "profiling",
    "app",
    "testing",
)
"""Bottom to top; a module may import its own wing and the wings below it. ``testing``
(the helpers users test their pipelines with) is above the application: nothing of the
package, the root included, imports it, so ``import streaming`` never loads it."""

BASE = {"errors", "_compat"}
"""Top-level modules every wing may import (they import nothing of the package)."""

APP = {"cli", "distributed", "demo", "__main__"}
"""What users run and import (with the package root): on top of everything."""

LANCE = ("lance", "lancedb")
LANCE_WINGS = ("tables", "samples")
"""The wings that talk to Lance and to LanceDB servers: the kinds of table and their caches
(``tables``: the only modules that import Lance today), and the making of samples
(``samples``), which reads tables through ``tables``."""
PURE = ("core", "state")
"""Wings that import neither torch nor Lance."""

LANCE_OUTSIDE_WINGS = {
    "streaming.demo": "it builds its table with lancedb like a user would; it is an application",
    "streaming.testing": "the LanceDB server stand-in answers from real Lance tables through Lance's "
    "own engine, and hands a test lancedb's client; nothing of the package imports it",
}
"""Modules, or whole wings, that import Lance or lancedb outside ``LANCE_WINGS``, with why."""

OWN = {"self", "cls", "os"}
"""Names whose private members a module may read: its own object's, and ``os._exit``
(documented; every other private standard-library or torch name is ``_compat.py``'s,
``tests/project/test_private_hooks.py``)."""

ACCESSORS = {"getattr", "setattr", "delattr", "hasattr"}
DYNAMIC = {"import_module", "importlib.import_module", "__import__"}

PRIVATE_MEMBERS_ALLOWED = {
    ("workers/assembly.py", "first._fields"): "a namedtuple's documented field names",
    ("workers/supervisor.py", "supervisor._workers"): "its own module's class, made by supervise() there",
    ("tables/source.py", "FilterIndex._FIELDS"): "its own module's class, rebuilt by the unpickler there",
    ("tables/source.py", "index._folder"): "its own module's class, rebuilt by the unpickler there",
    (
        "tables/snapshotcache.py",
        "handle._ds",
    ): "pylance's; the pinned version's manifest bytes, which lance.LanceDataset(serialized_manifest=) "
    "takes back (pylance's own pickling reads them the same way)",
}
"""Private members of something other than ``self``/``cls`` read outside ``_compat.py``
(``x._y`` or ``getattr(x, "_y")``), with why."""

# -- reading the package ---------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Module:
    name: str  # dotted from the root: "streaming.core.plan"; the root is "streaming"
    path: str  # under streaming/: "core/plan.py"
    tree: ast.Module

    @property
    def package(self) -> str:
        """Where its relative imports start."""
        return self.name if self.path.endswith("__init__.py") else self.name.rpartition(".")[0]


def module(path: str, source: str) -> Module:
    parts = ["streaming", *path.removesuffix(".py").split("/")]
    name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    return Module(name, path, ast.parse(source))


def read_package() -> dict[str, Module]:
    found = [module(p.relative_to(PACKAGE).as_posix(), p.read_text()) for p in PACKAGE.rglob("*.py")]
    return {found_module.name: found_module for found_module in sorted(found, key=lambda m: m.name)}


def with_made_up(modules: Mapping[str, Module], sources: Mapping[str, str]) -> dict[str, Module]:
    """``modules`` with made-up modules added (or replacing real ones): ``{path: source}``."""
    return {**modules, **{found.name: found for found in (module(p, s) for p, s in sources.items())}}


def wing(name: str) -> str:
    parts = name.split(".")
    if len(parts) == 1 or parts[1] in APP:
        return "app"
    return "base" if parts[1] in BASE else parts[1]


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


# -- resolving imports -----------------------------------------------------------


def origin(node: ast.ImportFrom, importer: Module) -> str:
    """The absolute name of the module an ``ImportFrom`` reads from."""
    if node.level == 0:
        return node.module or ""
    return importlib.util.resolve_name("." * node.level + (node.module or ""), importer.package)


def top_level(body: list[ast.AST]) -> Iterator[ast.AST]:
    """The module-level statements, inside ``if``/``try`` blocks too (not in functions)."""
    for statement in body:
        yield statement
        if isinstance(statement, (ast.If, ast.Try, ast.ExceptHandler)):
            for block in ("body", "handlers", "orelse", "finalbody"):
                yield from top_level(getattr(statement, block, []))


@functools.cache
def reexports(exporter: Module) -> dict[str, tuple[str, str]]:
    """Names a module binds by importing them at module level (``TYPE_CHECKING`` included),
    and those of a ``_HOMES`` table of lazy re-exports: name -> (module, name there)."""
    found: dict[str, tuple[str, str]] = {}
    for node in top_level(exporter.tree.body):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                found[alias.asname or alias.name] = (origin(node, exporter), alias.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Dict):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(target, ast.Name) and target.id == "_HOMES" for target in targets):
                homes = ast.literal_eval(node.value)
                found |= {
                    name: (importlib.util.resolve_name(home, exporter.package), name)
                    for name, home in homes.items()
                }
    return found


def defining(package: str, name: str, modules: Mapping[str, Module], depth: int = 0) -> str | None:
    """The package module that defines ``name`` as imported from ``package``: a submodule,
    the origin of a re-export, or ``package`` itself; ``None`` for no module of ours."""
    if f"{package}.{name}" in modules:
        return f"{package}.{name}"
    if package not in modules:
        return None
    source = reexports(modules[package]).get(name)
    if source is None or depth > len(modules):
        return package
    return defining(*source, modules, depth + 1) or package


# -- what a module uses ------------------------------------------------------------


@dataclass(frozen=True)
class Use:
    path: str  # the user, under streaming/
    name: str  # the user's dotted name
    line: int
    kind: str  # package, external, private-name, private-member, vars
    target: str  # a package module, an external top-level name, or the expression

    def __str__(self) -> str:
        verb = {"private-member": "reads", "vars": "uses"}.get(self.kind, "imports")
        return f"streaming/{self.path}:{self.line} ({wing(self.name)}) {verb} {self.target}"


def imported(node: ast.AST, importer: Module, modules: Mapping[str, Module]) -> Iterator[tuple[str, str]]:
    if isinstance(node, ast.Call) and ast.unparse(node.func) in DYNAMIC and node.args:
        name, anchor = node.args[0], [ast.unparse(arg) for arg in node.args[1:2]]
        if isinstance(name, ast.Constant) and isinstance(name.value, str):  # a literal: as an import
            start = importer.name if anchor == ["__name__"] else importer.package
            node = ast.Import(names=[ast.alias(importlib.util.resolve_name(name.value, start))])
    if isinstance(node, ast.Import):
        for alias in node.names:
            target = alias.name
            while target not in modules and "." in target:
                target = target.rpartition(".")[0]
            yield ("package", target) if target in modules else ("external", target)
    elif isinstance(node, ast.ImportFrom):
        source = origin(node, importer)
        if source.split(".")[0] != "streaming":
            yield "external", source.split(".")[0]
            return
        for alias in node.names:
            target = defining(source, alias.name, modules)
            if target is not None:
                yield "package", target
            if is_private(alias.name) and f"{source}.{alias.name}" not in modules:
                yield "private-name", f"{alias.name} from {source}"


def reached(node: ast.AST) -> Iterator[tuple[str, str]]:
    """Another object's private member (``x._y``, ``getattr(x, "_y")``, ``setattr``,
    ``delattr``, ``hasattr``) or its attributes wholesale (``vars(x)``, ``x.__dict__``)."""
    if isinstance(node, ast.Attribute) and not (isinstance(node.value, ast.Name) and node.value.id in OWN):
        if node.attr == "__dict__":
            yield "vars", ast.unparse(node)
        elif is_private(node.attr):
            yield "private-member", ast.unparse(node)
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        if node.func.id == "vars":
            yield "vars", ast.unparse(node)
        elif node.func.id in ACCESSORS and len(node.args) >= 2:
            subject, name = node.args[:2]
            literal = isinstance(name, ast.Constant) and isinstance(name.value, str)
            own = isinstance(subject, ast.Name) and subject.id in OWN
            if literal and is_private(name.value) and not own:
                yield "private-member", f"{ast.unparse(subject)}.{name.value}"


def uses(user: Module, modules: Mapping[str, Module]) -> list[Use]:
    found = []
    for node in ast.walk(user.tree):
        for kind, target in (*imported(node, user, modules), *reached(node)):
            found.append(Use(user.path, user.name, getattr(node, "lineno", 0), kind, target))
    return found


def all_uses(modules: Mapping[str, Module]) -> list[Use]:
    return [use for user in modules.values() for use in uses(user, modules)]


# -- the rules -----------------------------------------------------------------------


def points_up(use: Use) -> bool:
    if use.kind != "package" or wing(use.target) == "base":
        return False
    source = wing(use.name)
    return source == "base" or LAYERS.index(wing(use.target)) > LAYERS.index(source)


def base_imports_ours(use: Use) -> bool:
    return use.kind == "package" and wing(use.name) == "base" and use.target != use.name


def lance_outside_its_wings(use: Use) -> bool:
    excepted = any(use.name == name or use.name.startswith(f"{name}.") for name in LANCE_OUTSIDE_WINGS)
    outside = wing(use.name) not in LANCE_WINGS and not excepted
    return use.kind == "external" and use.target in LANCE and outside


def heavy_in_pure(use: Use) -> bool:
    return use.kind == "external" and use.target in ("torch", *LANCE) and wing(use.name) in PURE


def private_name_imported(use: Use) -> bool:
    return use.kind == "private-name"


def private_member_read(use: Use) -> bool:
    allowed = (use.path, use.target) in PRIVATE_MEMBERS_ALLOWED or use.path == "_compat.py"
    return use.kind == "private-member" and not allowed


def vars_used(use: Use) -> bool:
    return use.kind == "vars" and use.path != "_compat.py"


def cycles(found: list[Use]) -> list[str]:
    graph: dict[str, set[str]] = defaultdict(set)
    for use in found:
        if use.kind == "package" and use.target != use.name:
            graph[use.name].add(use.target)
    loops, state = [], {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                loops.append(" -> ".join([*path[path.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return loops


def each(broken: Callable[[Use], bool]) -> Callable[[list[Use]], list[str]]:
    return lambda found: [str(use) for use in found if broken(use)]


RULES: dict[str, Callable[[list[Use]], list[str]]] = {
    "an import points up": each(points_up),
    "a base module imports the package": each(base_imports_ours),
    "an import cycle": cycles,
    "Lance outside tables/ and samples/": each(lance_outside_its_wings),
    "torch or Lance in a pure wing": each(heavy_in_pure),
    "a private name imported": each(private_name_imported),
    "a private member of another object": each(private_member_read),
    "vars() or __dict__ of an object": each(vars_used),
}
"""The contract: rule -> its findings among every use of every module."""

MODULES = read_package()
USES = all_uses(MODULES)


def uses_with(sources: Mapping[str, str]) -> list[Use]:
    """Every use of the package with made-up modules added: ``{path: source}``."""
    modules = with_made_up(MODULES, sources)
    new = {module(path, source).name for path, source in sources.items()}
    return [use for use in USES if use.name not in new] + [
        use for name in sorted(new) for use in uses(modules[name], modules)
    ]
