"""The walkthrough notebook runs top to bottom in a fresh kernel, and is stored with its outputs.

The stored outputs are what a reader sees on the web (plots included), so they come
from one clean run of the current cells: refresh them by executing the notebook
(for example ``jupyter execute --inplace notebooks/walkthrough.ipynb``) after editing it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import nbclient
import nbformat

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "walkthrough.ipynb"
DELIVERED = "delivered 12000 of 12000 planned samples, 0 duplicates"
SAME_STEPS = "250 of 250 global steps hold exactly the rows of the uninterrupted run"


def _outputs(notebook: Any) -> list[tuple[int, Any]]:
    return [
        (index, output)
        for index, cell in enumerate(notebook.cells)
        if cell.cell_type == "code"
        for output in cell.outputs
    ]


def _text(notebook: Any) -> str:
    return "".join(output.get("text", "") for _, output in _outputs(notebook))


def _cells_with_images(notebook: Any) -> list[int]:
    return sorted({index for index, output in _outputs(notebook) if "image/png" in output.get("data", {})})


def test_walkthrough_notebook_runs(tmp_path):
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        notebook,
        timeout=180,  # per cell
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()  # raises CellExecutionError, naming the cell, on the first error
    errors = [output for _, output in _outputs(notebook) if output.output_type == "error"]
    assert not errors, errors
    assert DELIVERED in _text(notebook)
    assert SAME_STEPS in _text(notebook)
    assert len(_cells_with_images(notebook)) == 3, "expected the two progress charts and the step comparison"
    stored = nbformat.read(NOTEBOOK, as_version=4)
    assert _cells_with_images(stored) == _cells_with_images(notebook), "stored outputs are stale: re-execute"


def test_walkthrough_notebook_is_stored_with_its_outputs():
    """A reader on the web sees the plots: the committed notebook holds one clean run's outputs."""
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(notebook)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    counts = [cell.execution_count for cell in code]
    assert counts == list(range(1, len(code) + 1)), f"not one top-to-bottom run: execution counts {counts}"
    assert not [output for _, output in _outputs(notebook) if output.output_type == "error"]
    assert _cells_with_images(notebook), "the stored notebook has no plot: execute it before committing"
    assert DELIVERED in _text(notebook) and SAME_STEPS in _text(notebook)


def test_the_notebook_extra_brings_what_the_notebook_needs():
    """`pip install ".[notebook]"` (in a checkout) is named where readers look and brings the plots' needs."""
    root = NOTEBOOK.parents[1]
    pyproject = (root / "pyproject.toml").read_text(encoding="utf-8")
    extra = re.search(r"^notebook = \[(.*?)^\]", pyproject, re.MULTILINE | re.DOTALL)
    assert extra is not None, "pyproject.toml has no notebook extra"
    names = set(re.findall(r'"([A-Za-z0-9_.-]+)', extra.group(1)))
    imported = set(re.findall(r"^import (\w+)", _sources(NOTEBOOK), re.MULTILINE))
    core = {"lancedb", "numpy", "pyarrow", "torch", "json", "tempfile", "time"}
    assert imported - core <= {"matplotlib"} <= names, (imported, names)
    assert {"ipykernel", "notebook"} <= names, names
    for page in ("README.md", "docs/getting-started.md"):  # from a checkout: the package is on no index
        assert 'pip install ".[notebook]"' in (root / page).read_text(encoding="utf-8"), page


def _sources(path: Path) -> str:
    notebook = nbformat.read(path, as_version=4)
    return "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "code")
