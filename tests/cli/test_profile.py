"""``streaming.profile`` and ``lance-streaming profile`` on a local table, on S3 (moto's
server on 127.0.0.1) and on a LanceDB server (the stand-in, a process of its own).

Every number is measured on a real loader: the assertions check what must hold of
any measurement (counts, orderings, which setting the advice names for a cost that
the test makes dominant), never a timing threshold.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import lance
import lancedb
import pytest
from moto_s3 import s3_server

from streaming import profile
from streaming.testing import LanceDBStandIn

from helpers import make_table, table_data

API_KEY = "sk-profile-2718281828-never-shown"
KEY_ID, SECRET = "AKIAPROFILETEST", "profile-secret-never-shown"
SMALL = {"num_splits": 2, "block_rows": 8, "shuffle_buffer_size": 64}


def slow_transform(batch):
    """A transform that costs far more per row than reading it (CPU-bound, no sleep)."""
    samples = []
    for value in batch.column("id").to_pylist():
        digest = str(value).encode()
        for _ in range(1000):
            digest = hashlib.sha256(digest).digest()
        samples.append({"id": value, "digest": digest.hex()})
    return samples


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "streaming", "profile", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )
    for secret in (API_KEY, SECRET):
        assert secret not in result.stdout + result.stderr, "a secret was printed"
    return result


@pytest.fixture(scope="module")
def local(tmp_path_factory) -> str:
    return make_table(tmp_path_factory.mktemp("profile") / "table.lance", [300, 200, 100])


def test_a_profile_counts_batches_rows_requests_and_memory(local):
    result = profile(local, batch_size=16, batches=20, **SMALL)
    assert result.batches == 20
    assert result.rows == 19 * 16  # rows after the first batch
    assert 0 < result.open_seconds < result.first_batch_seconds
    assert 0 <= result.wait_seconds <= result.loop_seconds
    assert result.stats["rows_read"] >= 20 * 16
    assert result.requests is not None and result.requests > 0, result.requests_note
    assert result.requests_per_1k_rows == pytest.approx(1000 * result.requests / result.stats["rows_read"])
    assert result.trainer_peak_bytes > 50 * 2**20
    assert result.worker_peak_bytes == ()
    assert (result.block_rows, result.shuffle_buffer_size, result.remote) == (8, 64, False)


def test_a_profile_stops_at_the_end_of_the_epoch(local):
    result = profile(local, batch_size=100, batches=1000, num_splits=4)
    assert result.batches == 6  # 600 rows: 4 splits of 150
    assert result.rows == 500


def test_workers_report_their_peak_memory_and_requests_say_why_not(local):
    result = profile(local, batch_size=16, batches=12, num_workers=2, **SMALL)
    assert len(result.worker_peak_bytes) == 2
    assert all(peak > 50 * 2**20 for peak in result.worker_peak_bytes), result.worker_peak_bytes
    assert result.requests is None
    assert "run with num_workers=0 to count them" in result.requests_note


def test_an_expensive_transform_is_named_and_more_workers_advised(local):
    result = profile(local, batch_size=16, batches=10, transform=slow_transform, **SMALL)
    per_row_read = result.stats["read_seconds"] / result.stats["rows_read"]
    assert result.stats["transform_seconds"] / result.stats["rows_delivered"] > per_row_read
    advice = result.advice()
    assert advice[0].startswith("no training step was given (--step-ms)")
    assert advice[1].startswith("num_workers: turning rows into samples takes")


def test_a_loader_that_keeps_up_needs_no_change(local):
    """Every row is read before the loop (one window holds the table) and the step is long."""
    result = profile(local, batch_size=16, batches=6, step_seconds=0.05, num_splits=2)
    assert result.stats["windows_read"] == 2
    assert result.wait_share < 0.10
    assert result.advice() == [
        f"the loader keeps up: the trainer waits for data {100 * result.wait_share:.0f}% of the loop "
        "with a 50 ms step; no setting needs to change"
    ]


def test_the_command_prints_the_report_the_advice_and_a_progress_bar(local):
    result = cli(
        local, "--num-splits", "2", "--block-rows", "8", "--batch-size", "16", "--batches", "15", "--progress"
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"table: {local} at version 3: num_splits=2, block_rows=8, shuffle_buffer_size=" in out
    assert "loader: batch_size=16, num_workers=0, training step 0 ms per batch" in out
    assert "after it: 14 batches, 224 rows in " in out
    for line in (
        "first batch: ",
        "  reading ",
        "  transforms ",
        "  waiting in the trainer: ",
        "peak memory: ",
    ):
        assert line in out, line
    assert "requests: " in out and "per 1,000 rows (Lance's read operations in this process)" in out
    assert "what to change:\n  - " in out
    assert "/15 [" in result.stderr and "batch/s" in result.stderr  # tqdm's bar, on stderr only
    quiet = cli(local, "--num-splits", "2", "--batches", "3")
    assert quiet.returncode == 0 and "batch/s" not in quiet.stderr  # not a terminal: no bar


def test_the_command_refuses_bad_settings_in_one_line(local):
    result = cli(local, "--num-splits", "4", "--num-workers", "3")
    assert result.returncode == 1
    assert result.stderr.startswith("lance-streaming: error: ") and len(result.stderr.splitlines()) == 1


@pytest.fixture(scope="module")
def s3() -> Iterator[tuple[str, dict[str, str]]]:
    with s3_server("profile", key_id=KEY_ID, secret=SECRET) as options:
        uri = "s3://profile/table.lance"
        lance.write_dataset(table_data(0, 400), uri, storage_options=options, max_rows_per_file=100)
        yield uri, options


def test_a_profile_on_s3_counts_requests_and_advises_blocks_and_a_cache(s3):
    uri, options = s3
    args = [f"--storage-option={name}={value}" for name, value in options.items()]
    result = cli(
        uri, "--num-splits", "2", "--block-rows", "8", "--batch-size", "16", "--batches", "10", *args
    )
    assert result.returncode == 0, result.stderr
    requests = next(line for line in result.stdout.splitlines() if line.startswith("requests: "))
    assert float(requests.split()[1]) > 0, requests
    assert (
        "  - block_rows: " in result.stdout
        and "with block_rows=8; each block is one request" in result.stdout
    )
    assert "  - cache_dir: every epoch and every resume reads this table from object storage" in result.stdout


def test_a_profile_of_s3_through_the_function_matches_the_table(s3):
    uri, options = s3
    result = profile(uri, storage_options=options, batch_size=16, batches=5, **SMALL)
    assert result.remote and result.kind == "bucket" and result.table_uri == uri
    assert "cache_dir" in " ".join(result.advice())
    assert SECRET not in repr(result) + "\n".join(result.report())


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[LanceDBStandIn]:
    root = tmp_path_factory.mktemp("server")
    lancedb.connect(str(root)).create_table("train", table_data(0, 500))
    with LanceDBStandIn(str(root), api_key=API_KEY) as stand_in:
        yield stand_in


def test_a_profile_of_a_lancedb_server_table(server):
    server.reset()
    result = cli(
        "db://bench/train",
        "--num-splits",
        "2",
        "--block-rows",
        "16",
        "--batch-size",
        "16",
        "--batches",
        "10",
        "--host-override",
        server.host,
        env={"LANCEDB_API_KEY": API_KEY},
    )
    assert result.returncode == 0, result.stderr
    assert "table: db://bench/train at version 1: num_splits=2, block_rows=16" in result.stdout
    assert "requests: not known (a LanceDB server's requests are not counted by its client)" in result.stdout
    assert "  - block_rows: small blocks with block_rows=16" in result.stdout
    assert "cache_dir" not in result.stdout.split("what to change:")[1]
    assert server.stats()["requests"].get("query", 0) > 0  # the rows came from the server


def test_the_profile_function_is_public_and_documented():
    import streaming

    assert "profile" in streaming.__all__
    assert "::: streaming.profile" in (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
