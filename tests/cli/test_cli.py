"""The command line, run as a user runs it: real processes on real tables and states.

Exit codes: 0 for success, 1 for a failure (one line on stderr, no traceback), 2 for
a usage error. ``demo`` is covered by ``test_demo.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import lance
import pyarrow as pa
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming import StreamingDataset
from streaming.cli.plan import _fragments_of_split
from streaming.core.plan import EpochPlan, PlanSettings

from helpers import ids_of, json_roundtrip, live_ids, make_table, take
from reference import locate

ROOT = Path(__file__).resolve().parents[2]
SIZES, DELETED = [70, 45, 60], [3, 50]  # 173 live rows: S = 4 gives L = 43 and 1 surplus row


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """Run ``python -m streaming ARGS`` in a fresh process."""
    return subprocess.run(
        [sys.executable, "-m", "streaming", *args], capture_output=True, text=True, timeout=180, cwd=cwd
    )


def assert_fails(result: subprocess.CompletedProcess[str], code: int, *fragments: str) -> None:
    """Exit ``code`` with one clear line on stderr (plus usage lines for code 2)."""
    assert result.returncode == code, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    if code == 1:
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert last.startswith("lance-streaming"), last
    for fragment in fragments:
        assert fragment in last, f"{fragment!r} not in {last!r}"


def dataset(uri: str, **kwargs) -> StreamingDataset:
    return StreamingDataset(uri, num_splits=4, shuffle_seed=1, block_rows=4, shuffle_buffer_size=64, **kwargs)


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    """A table, two ranks' states after 10 samples each, and a torch checkpoint of rank 1."""
    folder = tmp_path_factory.mktemp("cli")
    uri = make_table(folder / "table.lance", SIZES, deleted=DELETED)
    states, delivered = [], []
    for rank in range(2):
        data = dataset(uri, rank=rank, world_size=2)
        iterator = iter(data)
        delivered += take(iterator, 10)
        states.append(json_roundtrip(data.state_dict()))
        iterator.close()
        (folder / f"rank{rank}.json").write_text(json.dumps(states[rank]))
    torch.save({"model": {"weight": torch.zeros(3)}, "dataset": states[1]}, folder / "rank1.pt")
    return {"folder": folder, "uri": uri, "states": states, "delivered": delivered}


def test_inspect_shows_progress_snapshot_and_settings(run):
    result = cli("inspect", str(run["folder"] / "rank0.json"))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "epoch: 0" in out
    assert "done: 11.6% of the epoch (20 of 172 planned samples; split length 43)" in out
    assert "owned splits: 0, 2 of 4 (one rank's state" in out
    assert f"snapshot: {run['uri']} at version {run['states'][0]['table']['version']}" in out
    assert "num_splits=4 shuffle=True shuffle_seed=1 block_rows=4 window_rows=16 clump_rows=1" in out
    assert "filter=None columns=id,label,vec,text" in out
    assert "split    0 [##..................] 5/43  11.6%\n" in out
    assert "split    1 [##..................] 5/43  11.6% (lockstep)\n" in out


def test_inspect_shows_packed_blocks_and_documents(tmp_path):
    path = str(tmp_path / "docs.lance")
    documents = [[100 + i] * (i % 9) for i in range(200)]
    lance.write_dataset(pa.table({"tokens": pa.array(documents, pa.list_(pa.int32()))}), path)
    packed = StreamingDataset(
        path, num_splits=4, columns=["tokens"], pack_sequences=32, eos_id=1, pad_id=0, blocks_per_epoch=40
    )
    iterator = iter(packed)
    for _ in range(8):
        next(iterator)
    (tmp_path / "state.json").write_text(json.dumps(packed.state_dict()))
    result = cli("inspect", str(tmp_path / "state.json"))
    assert result.returncode == 0, result.stderr
    assert "done: 20.0% of the epoch (8 of 40 planned samples; split length 10)" in result.stdout
    assert "pack_sequences=32 eos_id=1 pad_id=0 blocks_per_epoch=40" in result.stdout
    document = packed.state_dict()["positions_consumed_per_split"][0]
    assert f"split    0 [####................] 2/10  20.0%, next document {document}\n" in result.stdout


def test_inspect_finds_the_state_inside_a_torch_checkpoint(run):
    path = str(run["folder"] / "rank1.pt")
    result = cli("inspect", path)
    assert result.returncode == 0, result.stderr
    assert f"state: {path} (at 'dataset')" in result.stdout
    assert "owned splits: 1, 3 of 4" in result.stdout
    offline = cli("inspect", path, "--key", "dataset", "--no-table")
    assert offline.returncode == 0, offline.stderr
    assert "done: 20 samples consumed over 4 splits; percent unknown" in offline.stdout
    assert "split    1: 5 consumed\n" in offline.stdout


def test_inspect_without_the_table_still_shows_the_counts(run, tmp_path):
    moved = json.loads(json.dumps(run["states"][0]))
    moved["table"]["uri"] = str(tmp_path / "gone.lance")
    (tmp_path / "moved.json").write_text(json.dumps(moved))
    result = cli("inspect", str(tmp_path / "moved.json"))
    assert result.returncode == 0, result.stderr
    assert "percent unknown, the table could not be checked: " in result.stdout
    assert "split    2: 5 consumed\n" in result.stdout
    bad_option = cli("inspect", str(tmp_path / "moved.json"), "--storage-option", "region")
    assert_fails(bad_option, 1, "--storage-option 'region' must look like KEY=VALUE")


def test_merge_writes_one_state_that_resumes_on_another_topology(run, tmp_path):
    out = tmp_path / "merged.json"
    result = cli("merge", str(run["folder"] / "rank0.json"), str(run["folder"] / "rank1.pt"), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert f"merged 2 states (epoch 0, 4 of 4 splits owned, 20 samples consumed) into {out}" in result.stdout
    merged = json.loads(out.read_text())
    assert merged == StreamingDataset.merge_state_dicts(run["states"])
    resumed = dataset(run["uri"])  # one rank instead of two
    resumed.load_state_dict(merged)
    rest = ids_of(resumed)
    planned = live_ids(run["uri"])
    assert len(set(run["delivered"] + rest)) == len(run["delivered"]) + len(rest) == 172
    assert set(run["delivered"] + rest) <= planned
    shown = cli("inspect", str(out))
    assert "owned splits: all 4 (a merged state" in shown.stdout


def test_merge_warns_about_missing_ranks_and_refuses_lagging_ones(run, tmp_path):
    alone = cli("merge", str(run["folder"] / "rank0.json"), "-o", str(tmp_path / "alone.json"))
    assert alone.returncode == 0, alone.stderr
    assert "lance-streaming: warning: no state owns splits [1, 3]" in alone.stderr
    data = dataset(run["uri"], rank=1, world_size=2)
    iterator = iter(data)
    take(iterator, 14)
    (tmp_path / "ahead.json").write_text(json.dumps(data.state_dict()))
    iterator.close()
    states = [str(run["folder"] / "rank0.json"), str(tmp_path / "ahead.json")]
    lagging = cli("merge", *states, "-o", str(tmp_path / "lag.json"))
    assert_fails(lagging, 1, "owned counts differ between states", "allow_lag=True")
    assert not (tmp_path / "lag.json").exists()
    allowed = cli("merge", *states, "-o", str(tmp_path / "lag.json"), "--allow-lag")
    assert allowed.returncode == 0, allowed.stderr


def test_plan_shows_splits_fragments_and_topology(run):
    result = cli(
        "plan",
        run["uri"],
        "--num-splits",
        "4",
        "--world-size",
        "2",
        "--num-workers",
        "2",
        "--shuffle-seed",
        "1",
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "planned rows N = 173 (live rows) in 3 fragments" in out
    assert "split length L = N // S = 43; 1 surplus row left out of epoch 0" in out
    assert "every rank gets 2 splits = 86 samples per epoch" in out
    assert (
        "rank 1: splits 1, 3\n    worker 0: splits 1 (43 samples)\n    worker 1: splits 3 (43 samples)" in out
    )
    plan = dataset(run["uri"]).plan
    shown = {
        int(line.split(":")[0].split()[1]): {int(i) for i in line.split("fragments")[1].split(",")}
        for line in out.splitlines()
        if ": fragments " in line
    }
    truth = {split: {locate(plan, split, position)[0] for position in range(43)} for split in range(4)}
    assert shown == truth


def test_plan_with_a_filter_plans_matching_rows_only(run):
    result = cli("plan", run["uri"], "--num-splits", "8", "--filter", "label < 5", "--no-shuffle")
    assert result.returncode == 0, result.stderr
    matching = len(live_ids(run["uri"], where="label < 5"))
    assert f"planned rows N = {matching} (live rows matching the filter)" in result.stdout
    assert f"split length L = N // S = {matching // 8}; {matching % 8} surplus" in result.stdout
    assert "split    0: fragments 0\n" in result.stdout  # storage order


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--num-splits", "3", "--world-size", "2"], "num_splits=3 is not divisible by world_size=2"),
        (["--num-splits", "400"], "the table has 173 rows to plan but num_splits=400"),
        (["--num-splits", "4", "--filter", "nope > 1"], "filter='nope > 1' could not be applied"),
        (["--num-splits", "4", "--storage-option", "novalue"], "must look like KEY=VALUE"),
    ],
)
def test_plan_failures_are_one_line_with_exit_1(run, args, message):
    assert_fails(cli("plan", run["uri"], *args), 1, message)


def test_state_failures_are_one_line_with_exit_1(run, tmp_path):
    assert_fails(cli("inspect", str(tmp_path / "missing.json")), 1, "No such file or directory")
    (tmp_path / "broken.json").write_text('{"epoch": ')
    assert_fails(cli("inspect", str(tmp_path / "broken.json")), 1, "broken.json is neither a JSON state nor")
    peer = {"samples_consumed_per_split": [0, 0], "num_splits": 2, "epoch": 0}
    (tmp_path / "peer.json").write_text(json.dumps(peer))
    assert_fails(cli("inspect", str(tmp_path / "peer.json")), 1, "it comes from another plan")
    damaged = dict(run["states"][0])
    damaged["samples_consumed_per_split"] = [1, 2]
    (tmp_path / "damaged.json").write_text(json.dumps(damaged))
    assert_fails(
        cli("merge", str(tmp_path / "damaged.json"), "-o", str(tmp_path / "o.json")), 1, "has 2 entries"
    )
    torch.save({"model": {}}, tmp_path / "model.pt")
    assert_fails(cli("inspect", str(tmp_path / "model.pt")), 1, "holds no lance-streaming state")
    assert_fails(cli("inspect", str(run["folder"] / "rank1.pt"), "--key", "optim"), 1, "has no key 'optim'")


def test_usage_errors_exit_2():
    assert_fails(cli(), 2, "required")
    assert_fails(cli("inspect"), 2, "the following arguments are required: STATE")
    assert_fails(cli("merge", "a.json"), 2, "-o/--output")
    assert_fails(cli("plan", "t.lance"), 2, "--num-splits")
    assert_fails(cli("inspect", "s.json", "--bogus"), 2, "unrecognized arguments: --bogus")


def test_bench_passes_its_arguments_on_and_needs_a_checkout(tmp_path):
    elsewhere = cli("bench", "--quick", cwd=tmp_path)
    assert_fails(elsewhere, 1, "the benchmarks ship with the source repository")
    if not (ROOT / "benchmarks" / "__main__.py").is_file():
        pytest.skip("no benchmarks package in this checkout")
    result = cli("bench", "--help")
    assert result.returncode == 0, result.stderr
    assert "usage: python -m benchmarks bench" in result.stdout


def test_console_script_is_installed():
    script = Path(sys.executable).with_name("lance-streaming")
    if not script.exists():
        pytest.skip("the package is not installed with its console script")
    result = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    for command in ("demo", "inspect", "merge", "plan", "bench"):
        assert command in result.stdout


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(st.integers(0, 40), min_size=1, max_size=8).filter(lambda rows: sum(rows) > 0),
    shuffle=st.booleans(),
    seed=st.integers(0, 2**20),
    data=st.data(),
)
def test_fragments_of_split_match_the_plan(rows, shuffle, seed, data):
    num_splits = data.draw(st.integers(1, sum(rows)))
    settings_ = PlanSettings(
        num_splits=num_splits, shuffle=shuffle, seed=seed, epoch=0, block_rows=4, window_rows=8, clump_rows=1
    )
    plan = EpochPlan(list(range(100, 100 + len(rows))), rows, settings_)
    for split in range(num_splits):
        truth = {locate(plan, split, position)[0] for position in range(plan.split_length)}
        found = _fragments_of_split(plan, split)
        assert sorted(found) == sorted(truth), f"split {split} of {num_splits}, rows {rows}"
