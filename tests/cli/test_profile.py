"""``streaming.profile`` and ``lance-streaming profile`` on a local table, on S3 (moto's
server on 127.0.0.1) and on a LanceDB server (the stand-in, a process of its own).

Every number is measured on a real loader. The measuring tests check what must hold
of any measurement (counts, orderings, where the rate comes from, each process's own
memory). The advice tests follow the profile as a user would, on four tables: run it,
apply its first advice, run again, and check that the rows/s or the first batch
improved (medians of three runs each), or that nothing was advised and it said so.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import lance
import lancedb
import numpy as np
import pyarrow as pa
import pytest
from moto_s3 import s3_server

from streaming import LoaderProfile, profile
from streaming.profiling import trials
from streaming.profiling.measure import measure
from streaming.testing import LanceDBStandIn

from helpers import make_table, table_data

API_KEY = "sk-profile-2718281828-never-shown"
KEY_ID, SECRET = "AKIAPROFILETEST", "profile-secret-never-shown"
SMALL = {"num_splits": 2, "block_rows": 8, "shuffle_buffer_size": 64}
NOTHING_HELPED = "no setting tried made the loader faster; "


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


# -- what one run measures ----------------------------------------------------------


def test_a_profile_counts_batches_rows_requests_memory_and_waits(local):
    result = profile(local, batch_size=16, batches=20, tries=False, **SMALL)
    assert result.batches == 20
    assert result.rows == 19 * 16  # rows after the first batch
    assert 0 < result.open_seconds < result.first_batch_seconds
    assert 0 <= result.wait_seconds <= result.loop_seconds
    assert result.stats["rows_read"] >= 20 * 16
    assert result.requests is not None and result.requests > 0, result.requests_note
    assert result.requests_per_1k_rows == pytest.approx(1000 * result.requests / result.stats["rows_read"])
    assert result.trainer_peak_reset and result.trainer_peak_bytes > 50 * 2**20
    assert result.worker_peak_bytes == ()
    assert (result.block_rows, result.shuffle_buffer_size, result.remote) == (8, 64, False)
    assert result.stats["wait_batches"] == 20
    assert result.stats["wait_p50_seconds"] <= result.stats["wait_p99_seconds"] < result.loop_seconds
    assert (result.noise, result.tried) == (None, ())
    assert result.advice() == ["nothing advised: no setting was tried (tries=False)"]


def test_the_rate_comes_after_the_first_window_or_says_it_is_from_memory(local):
    """The first windows (2 splits x 32 rows) are read before the first batch: the run
    draws past them; a table inside one window says its rate is from memory."""
    past = profile(local, batch_size=16, batches=2, tries=False, **SMALL)
    assert past.window == "past" and past.first_window_rows == 64
    assert (past.batches - 1) * 16 >= 64, "drew past the first windows"
    assert any(line.startswith("rate: past the first shuffle windows (64 rows") for line in past.report())
    whole = profile(local, batch_size=16, batches=4, num_splits=2, tries=False)
    assert whole.window == "fits" and whole.batches == 4
    assert any("rate: from memory: the table fits in one shuffle window" in line for line in whole.report())


def test_workers_report_their_own_peak_memory_when_the_epoch_ends_first(local):
    result = profile(local, batch_size=100, batches=1000, num_workers=2, num_splits=4, tries=False)
    assert result.batches == 6  # 600 rows: the epoch ended before the batches asked for
    assert len(result.worker_peak_bytes) == 2
    assert all(peak > 50 * 2**20 for peak in result.worker_peak_bytes), result.worker_peak_bytes
    assert result.requests is None
    assert "run with num_workers=0 to count them" in result.requests_note
    shares = [result.stats[f"wait_worker_{worker}_seconds"] for worker in (0, 1)]
    assert 0 < sum(shares) <= result.stats["wait_seconds"]


def test_the_trainer_memory_is_its_own_not_its_launcher(local):
    """Launched by exec from a process that holds 1 GiB (``ru_maxrss`` carries that
    peak across exec; the trainer's own high-water mark does not)."""
    launcher = (
        "import os, sys\n"
        "held = b'x' * (1 << 30)\n"
        "os.execv(sys.executable, [sys.executable, '-m', 'streaming', 'profile', *sys.argv[1:]])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", launcher, local, "--num-splits", "2", "--batches", "3", "--no-tries"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stdout.splitlines() if line.startswith("peak memory"))
    trainer = float(line.split("trainer ")[1].split(" MiB")[0].replace(",", ""))
    assert 50 < trainer < 1024, line
    assert "during the run; workers none (num_workers=0)" in line


# -- what is tried and advised ---------------------------------------------------------


def follow_the_first_advice(
    table, folder: Path, *, batch_size: int, batches: int, **settings
) -> LoaderProfile:
    """Profile, apply the first advice, profile the new settings again (their three runs
    only); the rate or the first batch must be better, or nothing advised and said so."""
    first = profile(table, batch_size=batch_size, batches=batches, **settings)
    assert first.noise is not None and len(first.noise.rates) == 3
    assert {tried.verdict for tried in first.tried} <= {"faster", "starts sooner", "no better", "slower"}, [
        (tried.candidate.label, tried.error) for tried in first.tried
    ]
    worker_counts = {tried.candidate.changes.get("num_workers") for tried in first.tried} - {None}
    assert worker_counts, "no worker count was tried"
    advice = first.advice()
    if not first.advised:
        assert len(advice) == 1 and advice[0].startswith(NOTHING_HELPED), advice
        return first
    best = first.advised[0]
    assert advice[0].startswith(f"{best.candidate.label}: ") and " rows/s (" in advice[0], advice
    assert " -> " in advice[0] and best.verdict in advice[0]
    change = dict(best.candidate.changes)
    if "cache_dir" in change:
        change["cache_dir"] = str(folder / "cache")
    if "blob_encoding" in change:  # the table written again, its binary columns blob-encoded
        table = blob_encoded(table, folder / "blobs.lance", change.pop("blob_encoding").split(", "))
    keywords = {"batch_size": batch_size, "batches": batches, **settings, **change}
    second = profile(table, tries=(), **keywords)
    assert second.noise is not None and second.tried == ()
    before, after = first.noise, second.noise
    assert after.rate_median > before.rate_median or after.first_median < before.first_median, (
        f"{best.candidate.label} was advised ({best.rate_gain:.2f}x rows/s, {best.first_gain:.2f}x first "
        f"batch) but measured {before.rate_median:,.0f} -> {after.rate_median:,.0f} rows/s and first batch "
        f"{before.first_median:.3f} -> {after.first_median:.3f} s"
    )
    return first


def blob_encoded(uri: str, target: Path, columns: list[str]) -> str:
    data = lance.dataset(uri).to_table()
    blob = {"lance-encoding:blob": "true"}
    schema = pa.schema(
        [pa.field(f.name, pa.large_binary(), metadata=blob) if f.name in columns else f for f in data.schema]
    )
    lance.write_dataset(data.cast(schema), str(target), max_rows_per_file=200)
    return str(target)


def test_following_the_advice_on_a_local_narrow_table(tmp_path):
    count = 40_000
    vectors = np.random.default_rng(1).random((count, 128), dtype=np.float32).reshape(-1)
    data = pa.table(
        {"id": np.arange(count), "vec": pa.FixedSizeListArray.from_arrays(pa.array(vectors), 128)}
    )
    uri = str(tmp_path / "narrow.lance")
    lance.write_dataset(data, uri, max_rows_per_file=10_000)
    first = follow_the_first_advice(
        uri, tmp_path, batch_size=64, batches=40, num_splits=4, block_rows=64, shuffle_buffer_size=2048
    )
    assert first.window == "past"
    labels = [tried.candidate.label for tried in first.tried]
    assert labels[:2] == ["num_workers=1", "num_workers=2"] and "block_rows=256" in labels


def test_following_the_advice_on_a_local_table_of_100_kb_rows(tmp_path):
    count = 600
    draw = np.random.default_rng(2)
    data = pa.table({"id": np.arange(count), "image": pa.array([draw.bytes(100_000) for _ in range(count)])})
    uri = str(tmp_path / "images.lance")
    lance.write_dataset(data, uri, max_rows_per_file=200)
    first = follow_the_first_advice(uri, tmp_path, batch_size=16, batches=6, **SMALL)
    assert first.window == "past" and first.plain_binary_columns == ("image",)
    blobs = [tried for tried in first.tried if tried.candidate.label == "blob_encoding=image"]
    assert len(blobs) == 1 and blobs[0].baseline is not None, "tried on two copies, as stored and as blobs"
    assert len(blobs[0].baseline.rates) == 3 and blobs[0].baseline is not first.noise


@pytest.fixture(scope="module")
def s3() -> Iterator[tuple[str, dict[str, str]]]:
    with s3_server("profile", key_id=KEY_ID, secret=SECRET) as options:
        uri = "s3://profile/table.lance"
        lance.write_dataset(table_data(0, 2000), uri, storage_options=options, max_rows_per_file=500)
        yield uri, options


def test_following_the_advice_on_s3(s3, tmp_path):
    uri, options = s3
    first = follow_the_first_advice(
        uri,
        tmp_path,
        storage_options=options,
        batch_size=32,
        batches=10,
        num_splits=2,
        block_rows=32,
        shuffle_buffer_size=256,
    )
    assert first.kind == "bucket" and first.requests is not None and first.requests > 0
    assert "cache_dir=<a directory on a local disk>" in [tried.candidate.label for tried in first.tried]
    assert SECRET not in repr(first) + "\n".join(first.report() + first.advice())


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[LanceDBStandIn]:
    root = tmp_path_factory.mktemp("server")
    lancedb.connect(str(root)).create_table("train", table_data(0, 2000))
    with LanceDBStandIn(str(root), api_key=API_KEY, latency_ms=25) as stand_in:
        yield stand_in


def test_following_the_advice_on_a_lancedb_server_table_at_25_ms(server, tmp_path):
    table = server.connect(api_key=API_KEY).open_table("train")
    first = follow_the_first_advice(
        table, tmp_path, batch_size=32, batches=10, num_splits=2, block_rows=64, shuffle_buffer_size=256
    )
    assert first.kind == "remote" and first.window == "past"
    assert "a LanceDB server's requests are not counted by its client" in first.requests_note
    assert "cache_dir" not in " ".join(tried.candidate.label for tried in first.tried)
    assert server.stats()["requests"].get("query", 0) > 0  # the rows came from the server


def test_a_change_the_package_refuses_is_reported_never_advised(local):
    """A candidate is built as the user would build it: the package's own check decides."""
    candidate = trials.Candidate({"num_workers": -1}, "made up")

    def run(**keywords):
        del keywords["step_factor"]
        return measure(local, batches=2, step_seconds=0.0, **keywords)[0]

    outcome = trials.run_candidate(candidate, run, batch_size=16, num_workers=0, settings=SMALL)
    tried = trials.refused(candidate, outcome)
    assert tried.verdict == "refused" and not tried.helped and "num_workers" in tried.error


def test_a_loader_that_keeps_up_needs_no_change_and_tries_none(local):
    """Every row is read before the loop (one window holds the table) and the step is long."""
    result = profile(local, batch_size=16, batches=6, step_seconds=0.05, num_splits=2)
    assert result.stats["windows_read"] == 2
    assert result.wait_share < 0.10 and result.tried == ()
    assert result.advice() == [
        f"the loader keeps up: the trainer waits for data {100 * result.wait_share:.0f}% of the loop "
        "with a 50 ms step; no setting needs to change"
    ]


# -- the command ----------------------------------------------------------------------


def test_the_command_prints_the_report_what_it_tried_the_advice_and_a_progress_bar(local):
    result = cli(
        local, "--num-splits", "2", "--block-rows", "8", "--batch-size", "16", "--batches", "15",
        "--try", "block_rows", "--try", "shuffle_buffer_size", "--progress",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"table: {local} at version 3: num_splits=2, block_rows=8, shuffle_buffer_size=" in out
    assert "loader: batch_size=16, num_workers=0, training step 0 ms per batch" in out
    assert "after it: 14 batches, 224 rows in " in out
    for line in (
        "first batch: ",
        "rate: ",
        "  reading ",
        "  waiting in the trainer: ",
        "waits for a batch (stats()): p50 ",
    ):
        assert line in out, line
    assert "peak memory (each process's own high-water mark, VmHWM): trainer " in out
    assert "requests: " in out and "per 1,000 rows (Lance's read operations in this process)" in out
    assert "tried on this table, against 3 more runs of your settings (" in out
    assert "\n  block_rows=32: " in out and "num_workers=" not in out.split("tried on this table")[1]
    assert "what to change:\n  - " in out
    assert "/15 [" in result.stderr and "batch/s" in result.stderr  # tqdm's bar, on stderr only


def test_the_command_refuses_bad_settings_in_one_line(local):
    result = cli(local, "--num-splits", "4", "--batch-size", "0")
    assert result.returncode == 1
    assert result.stderr.startswith("lance-streaming: error: ") and len(result.stderr.splitlines()) == 1


def test_the_profile_function_is_public_and_documented():
    import streaming

    assert {"profile", "LoaderProfile", "gather_stats"} <= set(streaming.__all__)
    assert "::: streaming.profile" in (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text()
