"""The command line starts without torch unless the command needs it.

Each command runs in a fresh interpreter under ``python -X importtime``, which lists
every module it imports on stderr; torch costs about a second of every call (most of
``plan``'s time on a small table), so only commands that really use it may import it:
reading a ``torch.save`` checkpoint, running a loader.
"""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from streaming import StreamingDataset
from streaming.cli._tables import DATASET_DEFAULTS

from helpers import make_table, take

_IMPORTED = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)\s*$", re.MULTILINE)


def imported_by(*args: str, cwd: Path) -> set[str]:
    """The modules ``python -m streaming ARGS`` imports in a fresh interpreter (exit 0 asserted)."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "streaming", *args],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=cwd,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    return set(_IMPORTED.findall(result.stderr))


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    """A table, one rank's JSON state of it, and a torch checkpoint holding that state."""
    folder = tmp_path_factory.mktemp("start")
    uri = make_table(folder / "table.lance", [40, 30])
    dataset = StreamingDataset(uri, num_splits=2, rank=0, world_size=2)
    iterator = iter(dataset)
    take(iterator, 3)
    state = dataset.state_dict()
    iterator.close()
    (folder / "rank0.json").write_text(json.dumps(state))
    torch.save({"dataset": state}, folder / "rank0.pt")
    return {
        "folder": str(folder),
        "uri": uri,
        "state": str(folder / "rank0.json"),
        "pt": str(folder / "rank0.pt"),
    }


COMMANDS = {
    "help": ["--help"],
    "plan": ["plan", "{uri}", "--num-splits", "4", "--world-size", "2", "--num-workers", "2"],
    "plan with a filter": ["plan", "{uri}", "--num-splits", "2", "--filter", "label < 5"],
    "inspect": ["inspect", "{state}"],
    "inspect --no-table": ["inspect", "{state}", "--no-table"],
    "merge": ["merge", "{state}", "-o", "{folder}/merged.json"],
    "cache": ["cache", "{folder}/cache"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_command_that_needs_no_torch_does_not_import_it(files, command):
    (Path(files["folder"]) / "cache" / "store").mkdir(parents=True, exist_ok=True)
    args = [arg.format(**files) for arg in COMMANDS[command]]
    modules = imported_by(*args, cwd=Path(files["folder"]))
    assert "streaming.cli" in modules  # the listing is real
    assert "torch" not in modules, f"{command}: imported torch"
    if command.startswith("plan") or command == "inspect":
        assert "lance" in modules  # the table really was opened


def test_reading_a_torch_checkpoint_imports_torch(files):
    """The check above can fail: the one command here that needs torch imports it."""
    modules = imported_by("inspect", files["pt"], cwd=Path(files["folder"]))
    assert "torch" in modules


def test_the_commands_build_datasets_with_the_constructors_defaults():
    """``plan`` and ``inspect`` build the engine from ``DATASET_DEFAULTS``; they stay
    ``StreamingDataset``'s keywords and defaults."""
    parameters = inspect.signature(StreamingDataset.__init__).parameters
    defaults = {name: p.default for name, p in parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert defaults == DATASET_DEFAULTS
