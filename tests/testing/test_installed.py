"""The stand-in and the examples that use it run from an installed package, as a user has it.

A wheel of this checkout is installed into a fresh virtual environment that sees this
environment's dependencies (lancedb, torch, ...) but neither the checkout nor its
editable install; every command runs from a folder outside the checkout, with no
``PYTHONPATH``. So ``benchmarks/`` and ``tests/`` cannot be imported, and the server
process must be found as ``python -m streaming.testing.server`` of the installed package.
The examples of docs/remote-tables.md and docs/testing.md run here (``test_docs.py``
leaves them to this file).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import urllib.request
from pathlib import Path

import lancedb
import pyarrow as pa
import pytest

from doc_examples import examples

ROOT = Path(__file__).resolve().parents[2]
run = functools.partial(subprocess.run, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The python of a venv holding a wheel of this checkout, and this environment's dependencies."""
    where = tmp_path_factory.mktemp("installed")
    source = where / "checkout"
    shutil.copytree(ROOT / "streaming", source / "streaming", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    wheel = [*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", "dist", "."]
    assert run(wheel, cwd=source).returncode == 0
    (built,) = (source / "dist").glob("lance_streaming-*-py3-none-any.whl")
    venv = where / "venv"
    assert run([sys.executable, "-m", "venv", "--without-pip", str(venv)]).returncode == 0
    python = venv / "bin" / "python"
    install = [*pip, "--python", str(python), "install", "--no-deps", "--no-index", str(built)]
    assert run(install).returncode == 0
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(run([str(python), "-c", purelib]).stdout.strip())
    # this environment's folders, but not their .pth files: so not the checkout's editable finder
    ours = {sysconfig.get_paths()[kind] for kind in ("purelib", "platlib")}
    (site / "dependencies.pth").write_text("".join(f"{path}\n" for path in sorted(ours)))
    return python


def user_env(tmp_path: Path) -> dict[str, str]:
    scratch = tmp_path / "tmp"
    scratch.mkdir(exist_ok=True)
    return {key: value for key, value in os.environ.items() if key != "PYTHONPATH"} | {"TMPDIR": str(scratch)}


def test_the_installed_package_is_the_one_imported_and_the_checkout_is_not(installed, tmp_path):
    code = (
        "import importlib.util, streaming, streaming.testing\n"
        "print(streaming.testing.__file__)\n"
        "print(importlib.util.find_spec('benchmarks'), importlib.util.find_spec('doc_examples'))"
    )
    found = run([str(installed), "-c", code], cwd=tmp_path, env=user_env(tmp_path))
    assert found.returncode == 0, found.stderr
    where, missing = found.stdout.splitlines()
    assert where.startswith(str(installed.parents[1])), where
    assert missing == "None None"


def test_the_server_starts_by_module_name_from_outside_the_checkout(installed, tmp_path):
    lancedb.connect(tmp_path / "tables").create_table("train", pa.table({"id": list(range(30))}))
    command = [str(installed), "-m", "streaming.testing.server", "--root", str(tmp_path / "tables")]
    refused = run(command, cwd=tmp_path, env=user_env(tmp_path))
    assert refused.returncode != 0 and "LANCEDB_STAND_IN_API_KEY" in refused.stderr
    env = user_env(tmp_path) | {"LANCEDB_STAND_IN_API_KEY": "sk-module"}
    server = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        host = f"http://127.0.0.1:{int(server.stdout.readline())}"
        table = lancedb.connect("db://bench", api_key="sk-module", host_override=host).open_table("train")
        assert table.count_rows("id >= 10") == 20
        with urllib.request.urlopen(urllib.request.Request(f"{host}/_stand_in/stats", data=b"{}")) as reply:
            assert json.loads(reply.read())["requests"]["count_rows"] == 1
    finally:
        server.terminate()
        server.wait(timeout=30)
        server.stdout.close()


def run_example(page: str, line: int, code: str, python: Path, tmp_path: Path) -> str:
    (tmp_path / "example.py").write_text(code)
    found = run([str(python), "example.py"], cwd=tmp_path, env=user_env(tmp_path), timeout=600)
    assert found.returncode == 0, (
        f"the example at docs/{page} line {line} failed:\n{found.stdout}\n{found.stderr}"
    )
    return found.stdout


def test_the_remote_tables_example_runs_installed(installed, tmp_path):
    ((page, line, code),) = [param.values for param in examples() if param.values[0] == "remote-tables.md"]
    assert "resumed: 13600 rows in" in run_example(page, line, code, installed, tmp_path)


def test_the_testing_example_runs_installed(installed, tmp_path):
    ((page, line, code),) = [param.values for param in examples() if param.values[0] == "testing.md"]
    assert "2 passed" in run_example(page, line, code, installed, tmp_path)
