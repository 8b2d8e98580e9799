"""The command line on tables of a LanceDB server (``db://``), against the stand-in server.

The stand-in (``streaming/testing/standin.py``) answers lancedb's own remote
client from real Lance tables, in a process of its own. The API key reaches the
command line through ``LANCEDB_API_KEY`` or ``--api-key-file`` and never appears in
its output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import lancedb
import pyarrow as pa
import pytest

from streaming import StreamingDataset
from streaming.testing import LanceDBStandIn

from helpers import take

API_KEY = "sk-cli-remote-3141592653-never-shown"
URI = "db://bench/train"
ROWS = 300


def cli(*args: str, key: str | None = API_KEY, host: str | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m streaming ARGS`` in a fresh process, the key (if any) in its environment only."""
    env = {name: value for name, value in os.environ.items() if name != "LANCEDB_API_KEY"}
    if key is not None:
        env["LANCEDB_API_KEY"] = key
    extra = ["--host-override", host] if host else []
    result = subprocess.run(
        [sys.executable, "-m", "streaming", *args, *extra],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert API_KEY not in result.stdout + result.stderr, "the API key was printed"
    assert ".rs:" not in result.stdout + result.stderr, result.stdout + result.stderr
    return result


def one_error_line(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lance-streaming: error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LanceDBStandIn]:
    root = tmp_path_factory.mktemp("server")
    table = pa.table({"id": pa.array(range(ROWS), pa.int64()), "label": [i % 7 for i in range(ROWS)]})
    lancedb.connect(str(root)).create_table("train", table)
    with LanceDBStandIn(str(root), api_key=API_KEY) as stand_in:
        yield stand_in


@pytest.fixture(scope="module")
def state_file(server: LanceDBStandIn, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Rank 0's state after 12 samples of a 2-rank run on the server's table."""
    dataset = StreamingDataset(
        server.connect().open_table("train"), num_splits=4, rank=0, world_size=2, block_rows=8
    )
    iterator = iter(dataset)
    take(iterator, 12)
    state = dataset.state_dict()
    iterator.close()
    assert state["table"]["uri"] == URI
    path = tmp_path_factory.mktemp("states") / "rank0.json"
    path.write_text(json.dumps(state))
    return path


def test_plan_opens_a_db_table_with_the_key_from_the_environment(server):
    result = cli("plan", URI, "--num-splits", "4", "--world-size", "2", host=server.host)
    assert result.returncode == 0, result.stderr
    assert f"table: {URI} at version 1" in result.stdout
    assert f"planned rows N = {ROWS} (live rows) in 1 fragment" in result.stdout
    assert "every rank gets 2 splits = 150 samples per epoch" in result.stdout


def test_plan_reads_the_key_from_a_file(server, tmp_path):
    (tmp_path / "key").write_text(API_KEY + "\n")
    result = cli(
        "plan", URI, "--num-splits", "3", "--api-key-file", str(tmp_path / "key"), key=None, host=server.host
    )
    assert result.returncode == 0, result.stderr
    assert "split length L = N // S = 100" in result.stdout
    missing = cli(
        "plan",
        URI,
        "--num-splits",
        "3",
        "--api-key-file",
        str(tmp_path / "no-such.key"),
        key=None,
        host=server.host,
    )
    one_error_line(missing, f"--api-key-file '{tmp_path / 'no-such.key'}' cannot be read (No such file")


def test_plan_says_what_to_do_without_a_key_with_a_wrong_key_and_for_a_missing_table(server):
    missing_key = cli("plan", URI, "--num-splits", "4", key=None, host=server.host)
    one_error_line(
        missing_key, "is a table on a LanceDB server, which needs its API key: set LANCEDB_API_KEY"
    )
    wrong_key = cli("plan", URI, "--num-splits", "4", key="sk-wrong", host=server.host)
    one_error_line(wrong_key, "refused the API key for 'db://bench/train' (it answered 401 Unauthorized)")
    assert "sk-wrong" not in wrong_key.stderr
    missing_table = cli("plan", "db://bench/nope", "--num-splits", "4", host=server.host)
    one_error_line(missing_table, "has no such table", "check the database, namespace and table name")
    no_table = cli("plan", "db://bench", "--num-splits", "4", host=server.host)
    one_error_line(no_table, "names no table of a LanceDB server: write db://DATABASE/TABLE")


def test_inspect_checks_a_remote_state_against_the_server(server, state_file):
    result = cli("inspect", str(state_file), host=server.host)
    assert result.returncode == 0, result.stderr
    assert "done: 8.0% of the epoch (24 of 300 planned samples; split length 75)" in result.stdout
    assert f"snapshot: {URI} at version 1" in result.stdout


def test_inspect_without_the_key_says_why_in_one_sentence(server, state_file):
    result = cli("inspect", str(state_file), key=None, host=server.host)
    assert result.returncode == 0, result.stderr
    done = next(line for line in result.stdout.splitlines() if line.startswith("done: "))
    assert done == (
        "done: 24 samples consumed over 4 splits; percent unknown, the table could not be checked: "
        f"{URI!r} is a table on a LanceDB server, which needs its API key: set LANCEDB_API_KEY "
        "(or pass --api-key-file FILE), and --host-override URL for LanceDB Enterprise"
    )
    assert "object store" not in result.stdout
