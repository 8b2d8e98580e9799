"""The import contract of ``streaming/`` (docs/architecture.md draws it).

Read from the source with ``ast`` (function-level and ``TYPE_CHECKING`` imports
included). Every import is resolved to the package module that defines what it
names: relative imports (``from .. import X``, ``from . import x``, ``from ..wing
import y``), absolute ones (``from streaming import X``, ``import streaming.x``), and
re-exports followed to their origin, including the names the package root
re-exports lazily (its ``_HOMES`` table). So an upward import cannot hide behind
the package root or a wing's ``__init__``.

``RULES`` is the contract, one row per rule. ``MADE_UP`` feeds the checker one
made-up violation of each rule and sees it fail; a clean made-up module passes.
A finding names the file, the line and what it imports or reads.
``tests/project/test_architecture_doc.py`` holds the page to the package.
"""

from __future__ import annotations

import pytest

from import_graph import (
    LAYERS,
    MODULES,
    PRIVATE_MEMBERS_ALLOWED,
    RULES,
    USES,
    points_up,
    uses,
    uses_with,
    wing,
    with_made_up,
)


@pytest.mark.parametrize("rule", RULES)
def test_the_package_keeps_the_rule(rule):
    found = RULES[rule](USES)
    assert not found, f"{rule}:\n" + "\n".join(found)


def test_the_wings_are_the_ones_the_docs_draw():
    wings = {wing(name) for name in MODULES}
    assert wings == {*LAYERS, "base"}, wings
    assert len(MODULES) > 50


def test_every_exception_is_still_needed():
    """An allowed private read that is gone leaves its list."""
    found = {(use.path, use.target) for use in USES}
    stale = sorted(set(PRIVATE_MEMBERS_ALLOWED) - found)
    assert not stale, f"no longer found, remove from the allow-lists: {stale}"


# -- the checker's self-test ------------------------------------------------------------

MADE_UP = [
    ("an import points up", {"core/made_up.py": "from ..loader.loader import StreamingDataLoader"}),
    ("an import points up", {"core/made_up.py": "from .. import StreamingDataLoader"}),
    ("an import points up", {"core/made_up.py": "from streaming import StreamingMixture"}),
    ("an import points up", {"samples/made_up.py": "from .. import dataset"}),
    ("an import points up", {"tables/made_up.py": "from ..samples import rows"}),
    ("an import points up", {"state/made_up.py": "from ..loader import loader"}),
    ("an import points up", {"dataset/made_up.py": "import streaming.loader.launch"}),
    ("an import points up", {"tables/made_up.py": "def f():\n    from streaming import __version__"}),
    (
        "an import points up",
        {"core/made_up.py": "import importlib\nimportlib.import_module('..loader.loader', __package__)"},
    ),
    ("an import points up", {"cli/made_up.py": "from ..testing import LanceDBStandIn"}),
    ("an import points up", {"demo.py": "import streaming.testing.standin"}),
    ("an import points up", {"__init__.py": "from .testing import LanceDBStandIn"}),
    ("a base module imports the package", {"errors.py": "from .core.plan import EpochPlan"}),
    ("an import cycle", {"core/made_a.py": "from . import made_b", "core/made_b.py": "from . import made_a"}),
    ("Lance outside tables/ and samples/", {"dataset/made_up.py": "import lance"}),
    ("Lance outside tables/ and samples/", {"cli/made_up.py": "import lancedb"}),
    ("Lance outside tables/ and samples/", {"workers/made_up.py": "import lance"}),
    ("torch or Lance in a pure wing", {"core/made_up.py": "import torch"}),
    ("torch or Lance in a pure wing", {"state/made_up.py": "from lance import LanceDataset"}),
    ("a private name imported", {"dataset/made_up.py": "from ..core.plan import _made_up"}),
    ("a private member of another object", {"loader/made_up.py": "def f(d):\n    return d._options"}),
    (
        "a private member of another object",
        {"loader/made_up.py": "def f(d):\n    return getattr(d, '_options', None)"},
    ),
    ("a private member of another object", {"loader/made_up.py": "def f(d):\n    setattr(d, '_x', 1)"}),
    ("a private member of another object", {"loader/made_up.py": "def f(d):\n    delattr(d, '_x')"}),
    ("vars() or __dict__ of an object", {"mixture/made_up.py": "def f(a, b):\n    vars(a).update(vars(b))"}),
    ("vars() or __dict__ of an object", {"mixture/made_up.py": "def f(a, b):\n    a.__dict__.update(b)"}),
]

CLEAN = """
from __future__ import annotations
import json
import streaming.core.progress
from .. import errors
from ..errors import StreamingWarning
from streaming import SnapshotGoneError
import lance
from . import source
from .source import read_rows
from ..core.plan import RowRange
from ..state.format import StreamState
def f(self, other):
    return getattr(self, "_x"), self._y, other.public, getattr(other, "__name__"), other.__class__
"""


@pytest.mark.parametrize(
    ("rule", "sources"), MADE_UP, ids=[f"{rule}: {sources}" for rule, sources in MADE_UP]
)
def test_the_checker_finds_a_made_up_violation(rule, sources):
    new = set(RULES[rule](uses_with(sources))) - set(RULES[rule](USES))
    assert new, f"{rule}: not found in {sources}"


def test_the_checker_passes_a_clean_made_up_module():
    found = [use for use in uses_with({"tables/made_up.py": CLEAN}) if use.path == "tables/made_up.py"]
    assert {use.target for use in found if use.kind == "package"} >= {
        "streaming.errors",
        "streaming.state.format",
    }
    for rule, check in RULES.items():
        assert not check(found), (rule, check(found))


def test_the_testing_wing_is_on_top_and_may_import_lance():
    """``streaming.testing`` imports Lance (the stand-in serves real tables) and whatever lies
    below; a module elsewhere that imports it breaks "an import points up"."""
    assert LAYERS[-1] == "testing"
    made_up = {"testing/made_up.py": "import lance\nimport lancedb\nfrom ..loader.loader import X"}
    found = [use for use in uses_with(made_up) if use.path == "testing/made_up.py"]
    assert {use.target for use in found} >= {"lance", "lancedb", "streaming.loader.loader"}
    for rule, check in RULES.items():
        assert not check(found), (rule, check(found))


@pytest.mark.parametrize(
    ("source", "target"),
    [
        ("from .. import StreamingDataLoader", "streaming.loader.loader"),
        ("from streaming import StreamingDataset", "streaming.dataset.dataset"),
        ("from streaming import SnapshotGoneError", "streaming.errors"),
        ("from streaming import gather_state_dict", "streaming.distributed"),
        ("from streaming import __version__", "streaming"),
        ("import streaming", "streaming"),
        ("import streaming.core.plan", "streaming.core.plan"),
        ("from . import plan", "streaming.core.plan"),
        ("from .. import core", "streaming.core"),
        ("from ..mixture import loader", "streaming.mixture.loader"),
        ("from ..dataset.host import Options", "streaming.core.options"),
        ("from ..cli import main", "streaming.cli"),
        ("__import__('streaming.samples.view')", "streaming.samples.view"),
        ("from importlib import import_module\nimport_module('..state', __package__)", "streaming.state"),
    ],
)
def test_an_import_resolves_to_the_module_that_defines_the_name(source, target):
    made_up = with_made_up(MODULES, {"core/made_up.py": source})
    found = [use.target for use in uses(made_up["streaming.core.made_up"], made_up) if use.kind == "package"]
    assert found == [target]


def test_a_name_the_root_re_exports_only_lazily_resolves_to_its_home():
    """The ``_HOMES`` table of the root alone (no ``TYPE_CHECKING`` import) is followed."""
    root = '_HOMES = {"Made": ".loader.loader"}\n__all__ = ["Made"]'
    found = uses_with({"__init__.py": root, "core/made_up.py": "from streaming import Made"})
    imported = [use for use in found if use.path == "core/made_up.py" and use.kind == "package"]
    assert [use.target for use in imported] == ["streaming.loader.loader"]
    assert [str(use) for use in imported if points_up(use)] == [
        "streaming/core/made_up.py:1 (core) imports streaming.loader.loader"
    ]
