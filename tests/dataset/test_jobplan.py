"""One plan per job: with a ``filter``, rank 0 scans the table once for the whole
job and every rank checks that it planned what the others did (real gloo ranks)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from streaming import StreamingDataset

from helpers import ids_of, make_table
from launching import PROCS, launch_script

RANK_SCRIPT = PROCS / "plan_rank.py"
FILTER = "id % 3 != 1"


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    return make_table(tmp_path_factory.mktemp("plan") / "t.lance", [120, 90, 103], deleted=[5, 6, 200])


def run_ranks(uri: str, out: Path, world_size: int, *extra: str) -> list[dict]:
    codes, outputs = launch_script(RANK_SCRIPT, out, world_size, f"--uri={uri}", f"--filter={FILTER}", *extra)
    assert codes == [0] * world_size, "\n".join(outputs)
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(world_size)]


def test_rank_0_scans_once_for_the_job_and_every_rank_plans_the_same_epoch(uri, tmp_path):
    reports = run_ranks(uri, tmp_path / "job", 3)
    assert not any("error" in report for report in reports), reports
    assert [report["scans"] for report in reports] == [2, 0, 0], "two datasets: two scans, both on rank 0"
    assert [report["scans_on_load"] for report in reports] == [0, 0, 0], "a state of the same version"
    assert len({report["version"] for report in reports}) == 1
    whole = StreamingDataset(uri, num_splits=6, shuffle_seed=4, filter=FILTER)
    delivered = Counter(i for report in reports for i in report["ids"])
    assert delivered == Counter(ids_of(whole)), "the ranks' plans do not make the filtered epoch once"
    assert all(i % 3 != 1 for i in delivered)


def test_ranks_on_different_versions_all_refuse_with_the_version_to_pass(uri, tmp_path):
    """The table changed while the job started: a rank's plan would not fit the
    others', so every rank raises the same ValueError instead of hanging."""
    reports = run_ranks(uri, tmp_path / "job", 3, "--version-on-rank1=3")
    errors = {report.get("error") for report in reports}
    assert len(errors) == 1 and None not in errors, reports
    message = errors.pop()
    assert "different versions" in message and "[4, 3, 4]" in message and "version=" in message
    assert [report["scans"] for report in reports] == [0, 0, 0], "refused before any scan"


def test_a_bad_filter_is_the_same_error_on_every_rank(uri, tmp_path):
    reports = run_ranks(uri, tmp_path / "job", 2, "--filter=no_such_column > 1")
    errors = {report.get("error") for report in reports}
    assert len(errors) == 1 and "no_such_column" in errors.pop()


def test_a_rank_with_other_settings_makes_every_rank_refuse(uri, tmp_path):
    reports = run_ranks(uri, tmp_path / "job", 3, "--seed-on-rank1=5")
    errors = {report.get("error") for report in reports}
    assert len(errors) == 1 and None not in errors, reports
    assert "ranks [1] planned another epoch than rank 0" in errors.pop()
    assert [report["scans"] for report in reports] == [1, 0, 0], "rank 0 scanned once, for the job"
