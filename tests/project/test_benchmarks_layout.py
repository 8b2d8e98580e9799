"""The shape of ``benchmarks/``: a tool with one entry point, not a second product.

Read from the source with ``ast`` (imports inside functions included, and
``import_module`` / ``__import__`` of a literal name):

- the layers import only downwards: ``harness`` < ``cases`` < ``suites`` < the
  package's ``__main__``; the harness imports nothing of ``streaming``;
- no import cycle among the modules of ``benchmarks/``;
- ``streaming`` is used through its public API only (``import streaming``,
  ``from streaming import NAME`` with ``NAME`` in ``streaming.__all__``, and the public
  subpackages of ``PUBLIC_SUBPACKAGES``), except the imports ``INTERNAL_ALLOWED`` lists
  with why;
- no module imports a private name or module of another (``from m import _x``): the
  harness's public functions are what a suite uses.

Each rule is also fed a made-up violation and must find it.
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

import streaming

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "benchmarks"

LAYERS = ("harness", "cases", "suites", "app")
"""Bottom to top; a module may import its own layer and the layers below it."""

INTERNAL_ALLOWED = {
    ("suites/commit.py", "streaming.core.ledger"): "the suite times Ledger.commit itself, the trainer's "
    "per-batch bookkeeping, which no public call isolates",
    ("suites/commit.py", "streaming.core.progress"): "builds the SplitProgress reports Ledger.commit takes",
    ("suites/waits.py", "streaming.core.stats"): "times Waits, the loader's per-batch record of the "
    "loop's waits, on its own: the public API only shows its figures",
    ("suites/transfer.py", "streaming.workers.transfer"): "the suite compares the shared-memory slots "
    "themselves with a pipe, outside any loader",
    ("cases/scenarios.py", "streaming.core.plan"): "'The pure plan at scale' times the plan at 1B rows, "
    "no table behind it; only the pure plan can be built without one",
    ("suites/remote_table.py", "streaming.core.plan"): "times the pure plan of a 100M-row remote table, "
    "which the suite does not write",
    ("suites/remote_table.py", "streaming.tables.remote"): "FRAGMENT_ROWS: how the remote reader cuts a "
    "table into fragments, so the 100M-row plan is the one a reader would build",
    ("cases/width_probe.py", "streaming.loader.launch"): "PRELOAD: what the fork server imports for "
    "every worker; the probe times those imports in a fresh interpreter (the floor of a k>0 first "
    "batch), which no public call isolates",
    ("suites/bucket.py", "streaming.core.profiles"): "the mixing rows use the profiles' nominal "
    "block_rows and shuffle_buffer_size, which the public API only applies, never names",
}
"""Internal ``streaming`` modules a benchmark module imports (path under benchmarks/,
module) and why no public route serves."""

PUBLIC = set(streaming.__all__)
PUBLIC_SUBPACKAGES = {"streaming.testing"}
"""Documented in docs/api.md apart from ``streaming.__all__`` (``from streaming.testing import
LanceDBStandIn``): public, though ``import streaming`` never loads them."""
DYNAMIC = {"import_module", "importlib.import_module", "__import__"}


@dataclass(frozen=True)
class Module:
    name: str  # "benchmarks.harness.measure"
    path: str  # "harness/measure.py"
    tree: ast.Module

    @property
    def package(self) -> str:
        return self.name if self.path.endswith("__init__.py") else self.name.rpartition(".")[0]

    @property
    def layer(self) -> str:
        parts = self.name.split(".")
        return parts[1] if len(parts) > 2 and parts[1] in LAYERS else "app"


def module(path: str, source: str) -> Module:
    parts = ["benchmarks", *path.removesuffix(".py").split("/")]
    return Module(".".join(parts[:-1] if parts[-1] == "__init__" else parts), path, ast.parse(source))


def read_benchmarks() -> dict[str, Module]:
    found = [module(p.relative_to(PACKAGE).as_posix(), p.read_text()) for p in PACKAGE.rglob("*.py")]
    return {each.name: each for each in found}


def with_made_up(sources: Mapping[str, str]) -> dict[str, Module]:
    made_up = [module(path, source) for path, source in sources.items()]
    return {**read_benchmarks(), **{each.name: each for each in made_up}}


@dataclass(frozen=True)
class Import:
    path: str
    line: int
    target: str  # a dotted module name, or "streaming:NAME" for ``from streaming import NAME``


def imports(importer: Module, modules: Mapping[str, Module]) -> Iterator[Import]:
    """Every module ``importer`` imports, anywhere in its body."""
    for node in ast.walk(importer.tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(importer.path, line, alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = importlib.util.resolve_name("." * node.level + base, importer.package)
            for alias in node.names:
                if base == "streaming":
                    yield Import(importer.path, line, f"streaming:{alias.name}")
                elif f"{base}.{alias.name}" in modules or is_streaming_module(f"{base}.{alias.name}"):
                    yield Import(importer.path, line, f"{base}.{alias.name}")
                else:
                    yield Import(importer.path, line, base)
        elif isinstance(node, ast.Call) and ast.unparse(node.func) in DYNAMIC and node.args:
            name = node.args[0]
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                yield Import(importer.path, line, name.value)


def is_streaming_module(name: str) -> bool:
    """``name`` is a module or package of ``streaming``."""
    path = ROOT.joinpath(*name.split("."))
    return name.startswith("streaming.") and (path.with_suffix(".py").is_file() or path.is_dir())


def ours(target: str) -> bool:
    return target == "benchmarks" or target.startswith("benchmarks.")


def layer_of(target: str, modules: Mapping[str, Module]) -> str:
    found = modules.get(target)
    return found.layer if found is not None else "app"


# -- the rules ---------------------------------------------------------------------


def downward(modules: Mapping[str, Module]) -> list[str]:
    """Imports of a higher layer, and the harness's imports of ``streaming``."""
    findings = []
    for importer in modules.values():
        rank = LAYERS.index(importer.layer)
        for use in imports(importer, modules):
            if ours(use.target) and LAYERS.index(layer_of(use.target, modules)) > rank:
                findings.append(f"benchmarks/{use.path}:{use.line} ({importer.layer}) imports {use.target}")
            if importer.layer == "harness" and use.target.split(":")[0].split(".")[0] == "streaming":
                findings.append(f"benchmarks/{use.path}:{use.line} (harness) imports {use.target}")
    return findings


def public_only(modules: Mapping[str, Module]) -> list[str]:
    """Imports of ``streaming`` beyond its public names, unless allowed."""
    findings = []
    for importer in modules.values():
        for use in imports(importer, modules):
            target = use.target
            if target.startswith("streaming:"):
                if target.split(":")[1] not in PUBLIC:
                    findings.append(f"benchmarks/{use.path}:{use.line} imports {target} (not in __all__)")
            elif target in PUBLIC_SUBPACKAGES:
                continue
            elif target.startswith("streaming.") and (use.path, target) not in INTERNAL_ALLOWED:
                findings.append(f"benchmarks/{use.path}:{use.line} imports {target}")
    return findings


def cycles(modules: Mapping[str, Module]) -> list[str]:
    """Each import cycle among the modules of ``benchmarks/``, as ``a -> b -> a``."""
    graph = {
        name: sorted({use.target for use in imports(each, modules) if use.target in modules} - {name})
        for name, each in modules.items()
    }
    found: list[str] = []
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for target in graph[name]:
            if state.get(target) == 1:
                found.append(" -> ".join([*path[path.index(target) :], target]))
            elif target not in state:
                visit(target, [*path, target])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    return found


def private_names(modules: Mapping[str, Module]) -> list[str]:
    """Imports of another module's private name or module (``from m import _x``,
    ``import a._b``, ``import_module("a._b")``): use what it makes public instead."""
    findings = []
    for importer in modules.values():
        for node in ast.walk(importer.tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
                names = [f"{'.' * node.level}{node.module or ''}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Call) and ast.unparse(node.func) in DYNAMIC and node.args:
                literal = getattr(node.args[0], "value", None)
                names = [literal] if isinstance(literal, str) else []
            for name in names:
                if any(part.startswith("_") and not part.startswith("__") for part in name.split(".")):
                    findings.append(f"benchmarks/{importer.path}:{node.lineno} imports {name}")
    return findings


RULES = {"downward": downward, "public-only": public_only, "acyclic": cycles, "private-name": private_names}


@pytest.mark.parametrize("rule", sorted(RULES))
def test_the_benchmarks_keep_the_rule(rule):
    findings = RULES[rule](read_benchmarks())
    assert not findings, "\n".join(findings)


def test_every_allowed_internal_import_is_still_made():
    modules = read_benchmarks()
    made = {(use.path, use.target) for each in modules.values() for use in imports(each, modules)}
    stale = sorted(set(INTERNAL_ALLOWED) - made)
    assert not stale, f"remove these from INTERNAL_ALLOWED, nothing imports them any more: {stale}"


MADE_UP = {
    "downward": {"harness/made_up.py": "from benchmarks.suites import bench\n"},
    "public-only": {"suites/made_up.py": "def f():\n    from streaming.core.plan import EpochPlan\n"},
    "private-name": {"suites/made_up.py": "def f():\n    from benchmarks.harness.measure import _children\n"},
    "acyclic": {
        "cases/made_up_a.py": "def f():\n    from benchmarks.cases import made_up_b\n",
        "cases/made_up_b.py": "from benchmarks.cases.made_up_a import f\n",
    },
}


@pytest.mark.parametrize("rule", sorted(RULES))
def test_the_checker_finds_a_made_up_violation(rule):
    assert RULES[rule](with_made_up(MADE_UP[rule])), f"{rule} missed {MADE_UP[rule]}"


@pytest.mark.parametrize(
    "source",
    [
        "def f():\n    import importlib\n    importlib.import_module('streaming.loader.loader')\n",
        "from streaming import _HOMES\n",
        "from streaming.testing.standin import KEY_VARIABLE\n",
    ],
)
def test_a_hidden_internal_import_is_found(source):
    assert public_only(with_made_up({"cases/made_up.py": source}))


def test_the_checker_passes_a_clean_made_up_suite():
    clean = {
        "suites/made_up.py": "import streaming\nfrom streaming import StreamingDataset\n"
        "from streaming.testing import LanceDBStandIn\n"
        "from benchmarks.cases.contenders import preload\nfrom benchmarks.harness import sections\n"
    }
    modules = with_made_up(clean)
    assert not [finding for rule in RULES.values() for finding in rule(modules) if "made_up" in finding]


# -- the entry point -------------------------------------------------------------------


def benchmarks(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "benchmarks", *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_list_names_every_suite_with_one_line():
    done = benchmarks("--list")
    assert done.returncode == 0, done.stderr
    suites = sorted(p.stem for p in (PACKAGE / "suites").glob("*.py") if not p.stem.startswith("_"))
    listed = [line.split()[0] for line in done.stdout.splitlines() if line.startswith("  ")]
    assert listed == suites, done.stdout
    assert all(len(line.split()) > 3 for line in done.stdout.splitlines() if line.startswith("  "))


def test_an_unknown_suite_is_refused_with_the_list():
    done = benchmarks("nope")
    assert done.returncode == 2
    suites = sorted(p.stem for p in (PACKAGE / "suites").glob("*.py") if not p.stem.startswith("_"))
    assert "unknown suite 'nope'" in done.stderr and ", ".join(suites) in done.stderr, done.stderr


def test_a_suite_gives_its_options():
    done = benchmarks("transfer", "--help")
    assert done.returncode == 0, done.stderr
    assert "usage: python -m benchmarks transfer" in done.stdout and "--batches" in done.stdout


def test_every_suite_has_a_summary_a_main_and_its_own_usage():
    for path in sorted((PACKAGE / "suites").glob("*.py")):
        if path.stem.startswith("_"):
            continue
        tree = ast.parse(path.read_text())
        mains = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "main"]
        assert ast.get_docstring(tree) and mains, f"{path.name} needs a docstring and main(argv)"
        main_block = '__name__ == "__main__"'
        assert main_block not in path.read_text(), f"{path.name}: run by python -m benchmarks only"
        assert mains[0].args.args and mains[0].args.args[0].arg == "argv", f"{path.name}: main(argv)"
        progs = [
            ast.literal_eval(keyword.value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("ArgumentParser")
            for keyword in node.keywords
            if keyword.arg == "prog"
        ]
        assert progs == [f"python -m benchmarks {path.stem}"], f"{path.name}: its parser's prog is {progs}"


def test_the_package_root_holds_only_the_entry_point():
    """A module at the root would be a second entry point; suites go in ``suites/``."""
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    folders = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert not loose, f"move {loose} into benchmarks/suites/ (a suite) or harness/ or cases/"
    assert folders == ["cases", "harness", "suites"], folders
