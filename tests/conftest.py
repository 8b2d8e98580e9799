"""Fixtures: the table shapes every guarantee is checked on."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import make_table

# name -> (fragment sizes, deleted ids)
SHAPES = {
    "one_fragment": ([97], []),
    "uneven_fragments": ([5, 40, 1, 23, 64, 9], []),
    "emptied_fragment": ([20, 15, 30], list(range(20, 35))),  # the middle fragment is emptied
    "deleted_rows": ([30, 41, 26], [0, 3, 31, 32, 33, 70, 96]),
}


@pytest.fixture(params=sorted(SHAPES))
def table_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A small table in each shape of ``SHAPES``."""
    sizes, deleted = SHAPES[request.param]
    return make_table(tmp_path / f"{request.param}.lance", sizes, deleted=deleted)


@pytest.fixture
def small_uri(tmp_path: Path) -> str:
    """A 120-row table in four uneven fragments with a few deleted rows."""
    return make_table(tmp_path / "small.lance", [50, 7, 33, 34], deleted=[4, 55, 60])
