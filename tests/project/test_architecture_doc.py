"""docs/architecture.md draws the package as it is: every module, and what each wing imports.

The page's tree (its ```text block) has one line per top-level module (``name.py``) and
one entry per wing (``wing/  what it is: module, module (a note), ...``, continued on
the following indented lines). Checked against ``streaming/``: every module the
tree or the page names exists; every module of a wing (but ``__init__`` and
``__main__``) is listed in the wing's tree entry and named (as `` `module` ``) in its
paragraph under "The wings"; each paragraph's "Imports ..." sentence names exactly
the wings its modules import; and the entries of the wings that talk to Lance
(``tables/``, ``samples/``) note "imports Lance" on exactly the modules that import
Lance. A failure names the module and the place of the page to add it to.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest

from import_graph import LANCE, LANCE_WINGS, LAYERS, PACKAGE, USES, wing

PAGE = PACKAGE.parent / "docs" / "architecture.md"
TEXT = PAGE.read_text()
WINGS = tuple(layer for layer in LAYERS if layer != "app")
SUBPACKAGES = sorted(path.parent.name for path in PACKAGE.glob("*/__init__.py"))
ITEM = re.compile(r"(\w+)(?:\s*\(([^)]*)\))?")


@dataclass(frozen=True)
class Entry:
    name: str  # "errors.py" or "tables/"
    text: str  # the description, continuation lines joined

    def listed(self) -> dict[str, str]:
        """A wing's modules as the entry lists them: module -> its note ('' for none)."""
        listing = self.text.partition(": ")[2]
        leftover = ITEM.sub("", listing)
        assert listing and not leftover.strip(" ,;"), (
            f"{PAGE.name}: cannot read the tree's entry {self.name} ({self.text!r}): write "
            "'what it is: module, module (a note), ...', modules separated by commas"
        )
        return {name: note for name, note in ITEM.findall(listing)}


def tree() -> dict[str, Entry]:
    """The entries of the page's tree, by name (``errors.py``, ``tables/``)."""
    block = TEXT.split("```text\nstreaming/\n", 1)[1].split("```", 1)[0]
    entries: dict[str, list[str]] = {}
    current: list[str] = []
    for line in block.splitlines():
        head = re.match(r"^  (\S+)\s{2,}(.*)$", line)
        if head:
            current = entries.setdefault(head.group(1), [])
            line = head.group(2)
        current.append(line.strip().lstrip("|").split("}")[0].strip())
    return {name: Entry(name, " ".join(part for part in parts if part)) for name, parts in entries.items()}


def paragraphs() -> dict[str, str]:
    """The paragraphs of "The wings", by wing: those that open with **`wing/`...**."""
    section = TEXT.split("\n## The wings\n", 1)[1].split("\n## ", 1)[0]
    found = {}
    for paragraph in section.split("\n\n"):
        head = re.match(r"\*\*`(\w+)/`", paragraph.strip())
        if head:
            found[head.group(1)] = " ".join(paragraph.split())
    return found


def modules_of(name: str) -> list[str]:
    """The modules of a wing that the page lists (``__init__``/``__main__`` are not)."""
    return sorted(path.stem for path in (PACKAGE / name).glob("*.py") if not path.stem.startswith("__"))


TREE = tree()
PARAGRAPHS = paragraphs()


def test_the_tree_has_every_top_level_module_and_every_wing_and_nothing_else():
    have = {path.name for path in PACKAGE.glob("*.py")} | {f"{name}/" for name in SUBPACKAGES}
    missing = sorted(have - set(TREE))
    gone = sorted(set(TREE) - have)
    assert not missing, f"{PAGE.name}: the tree of streaming/ has no line for {missing}: add one each"
    assert not gone, f"{PAGE.name}: the tree draws {gone}, which streaming/ does not have"


@pytest.mark.parametrize("name", SUBPACKAGES)
def test_the_tree_lists_every_module_of_a_wing(name):
    listed = TREE[f"{name}/"].listed()
    missing = [f"streaming/{name}/{module}.py" for module in modules_of(name) if module not in listed]
    gone = [f"streaming/{name}/{module}.py" for module in listed if module not in modules_of(name)]
    assert not missing, f"{PAGE.name}: the tree's entry {name}/ does not list {missing}: add each by its name"
    assert not gone, f"{PAGE.name}: the tree's entry {name}/ lists {gone}, which do not exist"


def test_every_wing_has_its_paragraph():
    missing = sorted(set(WINGS) - set(PARAGRAPHS))
    assert not missing, f"{PAGE.name}: 'The wings' has no paragraph opening **`wing/`...** for {missing}"


@pytest.mark.parametrize("name", WINGS)
def test_the_paragraph_of_a_wing_names_each_of_its_modules(name):
    named = set(re.findall(r"`(\w+)`", PARAGRAPHS.get(name, "")))
    missing = [f"streaming/{name}/{module}.py" for module in modules_of(name) if module not in named]
    assert not missing, (
        f"{PAGE.name}: the paragraph **`{name}/`** of 'The wings' does not name {missing}: "
        "say what each does, its name in backticks"
    )


def test_every_module_path_the_page_names_exists():
    paths = set(re.findall(r"`([\w/]+\.py)`", TEXT))
    rooted = {path for path in paths if path.split("/")[0] in ("tests", "streaming")}  # else in streaming/
    gone = [
        path
        for path in sorted(paths)
        if not (PACKAGE.parent if path in rooted else PACKAGE).joinpath(path).is_file()
    ]
    assert len(paths) > 20
    assert not gone, f"{PAGE.name} names {gone}, which do not exist"


@pytest.mark.parametrize("name", WINGS)
def test_the_paragraph_of_a_wing_names_the_wings_it_imports(name):
    sentence = re.search(r"Imports ([^.]*)\.", PARAGRAPHS.get(name, ""))
    assert sentence, f"{PAGE.name}: the paragraph **`{name}/`** has no 'Imports ...' sentence"
    below = WINGS[: WINGS.index(name)]
    named = set(re.findall(r"`(\w+)`", sentence.group(1))) & set(WINGS)
    said = set(below) if "everything below" in sentence.group(1) else named
    imported = {wing(use.target) for use in USES if use.kind == "package" and wing(use.name) == name}
    imported -= {name, "base"}
    assert said == imported, (
        f"{PAGE.name}: the paragraph **`{name}/`** says it imports {sorted(said)}, "
        f"but its modules import {sorted(imported)}: correct its 'Imports ...' sentence"
    )


@pytest.mark.parametrize("name", LANCE_WINGS)
def test_the_tree_notes_exactly_the_modules_that_import_lance(name):
    noted = {module for module, note in TREE[f"{name}/"].listed().items() if "imports Lance" in note}
    importing = {
        use.name.rpartition(".")[2]
        for use in USES
        if use.kind == "external" and use.target in LANCE and wing(use.name) == name
    }
    unnoted = [f"{module} (imports Lance)" for module in sorted(importing - noted)]
    assert not unnoted, f"{PAGE.name}: the tree's entry {name}/ should say {unnoted}"
    assert noted <= importing, (
        f"{PAGE.name}: the tree's entry {name}/ notes 'imports Lance' on {sorted(noted - importing)}, "
        "which import no Lance"
    )
