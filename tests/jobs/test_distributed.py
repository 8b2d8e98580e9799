"""Real torch.distributed (gloo, 127.0.0.1) jobs: topology changes, crash, two epochs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest
import torch.distributed as dist

from streaming import (
    PartialStateWarning,
    StreamingDataset,
    gather_state_dict,
    load_state_dict,
    save_state_dict,
)

import shm_watch
from helpers import FailOnIds, ids_of, make_table
from launching import NUM_SPLITS, delivered, ids, launch, planned


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    return make_table(tmp_path_factory.mktemp("dist") / "t.lance", [120, 90, 103], deleted=[5, 6, 200])


def test_two_ranks_two_workers_then_four_ranks_and_one_rank(uri, tmp_path):
    """2x2 runs, checkpoints as JSON, exits; 4 ranks and 1 rank each resume exactly.

    The 4 ranks load in-process (``num_workers=0``) and the 1 rank with 2 workers, so
    a state written by worker processes resumes both with and without them; a resume
    into one worker per rank is the other tests' (3 ranks x 1 worker)."""
    first = tmp_path / "first"
    launch(uri, first, 2, workers=2, batch=6, checkpoint_every=4, stop_after=8)
    records = delivered(first)
    seeds = {record["seed"] for record in records}
    assert len(seeds) == 1, "shuffle_seed=None must give every rank rank 0's seed"
    seed = seeds.pop()
    checkpoint = first / "checkpoint.json"
    assert json.loads(checkpoint.read_text())["step"] == 8
    every = json.loads((first / "stats.json").read_text())  # gather_stats: both ranks, on rank 0
    assert [rank["wait_batches"] for rank in every] == [8, 8], every
    for rank in every:
        assert rank["wait_p50_seconds"] <= rank["wait_p95_seconds"] <= rank["wait_p99_seconds"]
        assert 0 < rank["wait_worker_0_seconds"] + rank["wait_worker_1_seconds"] <= rank["wait_seconds"]
    for world_size, workers, batch in ((4, 0, 3), (1, 2, 12)):
        second = tmp_path / f"resume{world_size}"
        launch(uri, second, world_size, workers=workers, batch=batch, resume=checkpoint)
        counts = Counter(ids(records) + ids(delivered(second)))
        assert counts == planned(uri, seed), f"resume on {world_size} ranks is not exactly once"
        steps = Counter(record["step"] for record in delivered(second))
        assert set(steps.values()) == {world_size}, "every rank must take every step"


def slot_segments() -> set[str]:
    """Names of ``streaming.workers.transfer`` segments in /dev/shm this test run made
    (another job's are not judged)."""
    return shm_watch.ours({name for name in os.listdir("/dev/shm") if name.startswith("lsr")})


def test_sigkill_then_resume_from_the_last_checkpoint(uri, tmp_path):
    """A rank is SIGKILLed mid-epoch; only what came after the checkpoint is replayed, once.

    Also shows that its DataLoader workers exit with it: launch() waits for the
    rank's output pipe, which orphaned workers would hold open forever; and that
    their shared-memory rings do not outlive them.
    """
    before = slot_segments()
    crashed = tmp_path / "crashed"
    kill_at = 11  # a step after the checkpoint at step 8, before the next one
    codes = launch(uri, crashed, 2, workers=2, batch=6, seed=3, checkpoint_every=4, kill_at=kill_at)
    assert codes[0] == -9, "rank 0 should have died from SIGKILL"
    assert slot_segments() == before, "the killed rank's workers left shared memory behind"
    checkpoint = json.loads((crashed / "checkpoint.json").read_text())
    saved_at = checkpoint["step"]
    assert saved_at == 8
    before = ids(delivered(crashed, up_to_step=saved_at))
    lost_work = ids([r for r in delivered(crashed) if r["step"] > saved_at])
    assert lost_work, "the kill should come after some uncheckpointed steps"
    resumed = tmp_path / "resumed"
    # the same world size in-process: nothing but the lost work is replayed, whatever the workers
    launch(uri, resumed, 2, workers=0, batch=6, resume=crashed / "checkpoint.json")
    after = ids(delivered(resumed))
    assert Counter(before + after) == planned(uri, 3)
    assert set(lost_work) <= set(after), "samples delivered after the checkpoint are replayed"


def test_two_epochs_checkpoint_in_the_second(uri, tmp_path):
    first = tmp_path / "first"
    split_length = sum(planned(uri, 9).values()) // NUM_SPLITS
    steps_per_epoch = 2 * -(-3 * split_length // 6)  # 2 workers, 3 splits and batches of 6 each
    stop = steps_per_epoch + 4
    launch(uri, first, 2, workers=2, batch=6, seed=9, epochs=2, checkpoint_every=2, stop_after=stop)
    checkpoint = json.loads((first / "checkpoint.json").read_text())
    assert checkpoint["state"]["epoch"] == 1 and checkpoint["step"] == stop
    records = delivered(first)
    assert Counter(ids(records, 0)) == planned(uri, 9, 0)
    second = tmp_path / "second"
    launch(uri, second, 2, workers=2, batch=6, epochs=2, resume=first / "checkpoint.json")
    assert Counter(ids(records, 1) + ids(delivered(second), 1)) == planned(uri, 9, 1)
    assert planned(uri, 9, 0) != planned(uri, 9, 1) or ids(records, 0) != ids(records, 1)


def test_gather_state_dict_needs_a_process_group(uri):
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match=r"initialised torch\.distributed process group"):
        gather_state_dict(StreamingDataset(uri, num_splits=NUM_SPLITS))


def test_gather_at_every_step_including_the_last_round_resumes_with_equal_ranks(uri, tmp_path):
    """k=3 workers and a batch that ends no cycle: a checkpoint after every step, the
    last one in the epoch's last batch, merges and resumes on 3 ranks with equal lengths,
    repeating at most one sample per new rank (a partial cycle split unevenly). The new
    ranks load in-process: the bound is the same whatever their worker count."""
    first = tmp_path / "first"
    launch(uri, first, 2, workers=3, batch=7, checkpoint_every=1, stop_after=21, seed=9)
    checkpoint = json.loads((first / "checkpoint.json").read_text())
    assert checkpoint["step"] == 21, "a checkpoint at every step, the last before the epoch's last batch"
    before = Counter(ids(delivered(first)))
    second = tmp_path / "resumed"
    launch(uri, second, 3, workers=0, batch=5, resume=first / "checkpoint.json")
    steps = Counter(record["step"] for record in delivered(second))
    assert set(steps.values()) == {3}, "every one of the 3 new ranks takes every step"
    total = before + Counter(ids(delivered(second)))
    assert not planned(uri, 9) - total, "samples lost"
    replayed = sum((total - planned(uri, 9)).values())
    assert replayed <= 3 - 1, f"{replayed} samples replayed, over the bound"


def test_replace_keeps_ranks_in_step_when_their_transforms_fail_on_different_rows(uri, tmp_path):
    """Two gloo ranks with two workers each, whose transforms fail on different rows:
    with ``on_transform_error="replace"`` every rank takes every step through the
    epoch's end (the per-step all-reduce would hang otherwise), no bad row is
    delivered, and a checkpoint resumed on three ranks gives the stream of one
    uninterrupted process."""
    failing = {3, 10, 17, 24, 31}

    def rank_ids(rank: int) -> set[int]:
        settings = {"block_rows": 4, "shuffle_buffer_size": 96, "shuffle_seed": 4}
        return set(ids_of(StreamingDataset(uri, num_splits=NUM_SPLITS, rank=rank, world_size=2, **settings)))

    drops = [len(failing & rank_ids(rank)) for rank in range(2)]
    assert drops[0] != drops[1], "the ranks must fail on different numbers of rows"
    options = {"workers": 2, "batch": 6, "seed": 4, "fail_ids": ",".join(map(str, sorted(failing)))}
    # the stream does not depend on the topology: one process gives the reference
    reference = StreamingDataset(
        uri,
        num_splits=NUM_SPLITS,
        shuffle_seed=4,
        block_rows=4,
        shuffle_buffer_size=96,
        transform=FailOnIds(failing),
        on_transform_error="replace",
    )
    full = Counter(ids_of(reference))
    assert not failing & set(full) and sum(full.values()) == sum(planned(uri, 4).values())
    first = tmp_path / "first"
    launch(uri, first, 2, on_error="replace", checkpoint_every=5, stop_after=10, **options)
    second = tmp_path / "second"
    launch(uri, second, 3, on_error="replace", resume=first / "checkpoint.json", **{**options, "workers": 1})
    assert set(Counter(record["step"] for record in delivered(second)).values()) == {3}
    assert Counter(ids(delivered(first))) + Counter(ids(delivered(second))) == full


def test_endless_ranks_cross_epochs_at_the_same_step_and_resume_on_another_world_size(uri, tmp_path):
    """G15: two gloo ranks with two workers each train an endless dataset into its
    second epoch; every step has the same epoch on every rank; a checkpoint taken in
    the second epoch resumes on three ranks (in-process), which finish it exactly and go on."""
    options = {"batch": 6, "seed": 8, "endless": True}
    first = tmp_path / "first"
    launch(uri, first, 2, workers=2, checkpoint_every=1, stop_after=42, **options)
    records = delivered(first)
    epochs = {}
    for record in records:
        epochs.setdefault(record["step"], set()).add(record["epoch"])
    assert all(len(seen) == 1 for seen in epochs.values()), "ranks crossed at different steps"
    # 12 splits of 25: a rank's 6 splits give 150 samples, 25 batches of 6 (any worker count)
    assert epochs[25] == {0} and epochs[26] == {1}, "an epoch is 25 steps on every rank"
    second = tmp_path / "second"
    launch(uri, second, 3, workers=0, stop_after=56, resume=first / "checkpoint.json", **options)
    resumed = delivered(second)
    assert set(Counter(record["step"] for record in resumed).values()) == {3}
    total = Counter(ids(records, epoch=1)) + Counter(ids(resumed, epoch=1))
    assert total == planned(uri, 8, epoch=1), "epoch 1 not exactly once across the resume"
    by_step = {record["step"]: record["epoch"] for record in resumed}
    assert [by_step[step] for step in sorted(by_step)] == [1] * 6 + [2] * 8, "32 samples per rank left"


KILLED_SAVE = """
import json, os, sys
from streaming import save_state_dict
first, second, path = sys.argv[1:]
save_state_dict(json.loads(open(first).read()), path)  # a complete state
def killed_here(fd):  # the second save is SIGKILLed after its write, before its rename
    print("writing", flush=True)
    sys.stdin.read()
os.fsync = killed_here
save_state_dict(json.loads(open(second).read()), path)
"""


def test_a_save_killed_mid_write_leaves_the_last_state_and_a_partial_file_ignored_loudly(uri, tmp_path):
    """A process SIGKILLed inside ``save_state_dict`` leaves ``<path>.partial``: loading
    warns and reads the last complete state; the next save removes the leftover."""
    data = StreamingDataset(uri, num_splits=NUM_SPLITS, shuffle_seed=3)
    iterator = iter(data)
    for _ in range(5):
        next(iterator)
    first = data.state_dict()
    for _ in range(7):
        next(iterator)
    second = data.state_dict()
    del iterator
    (tmp_path / "first.json").write_text(json.dumps(first))
    (tmp_path / "second.json").write_text(json.dumps(second))
    path, partial = tmp_path / "state.json", tmp_path / "state.json.partial"
    args = [str(tmp_path / "first.json"), str(tmp_path / "second.json"), str(path)]
    saver = subprocess.Popen(
        [sys.executable, "-c", KILLED_SAVE, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert saver.stdout.readline() == "writing\n", "the saver died before its second save"
    finally:
        saver.kill()
        saver.communicate(timeout=60)
    assert saver.returncode == -9
    assert partial.exists(), "a save killed mid-write leaves its partial file"
    assert json.loads(path.read_text()) == first, "the last complete state is untouched"

    resumed = StreamingDataset(uri, num_splits=NUM_SPLITS, shuffle_seed=3)
    with pytest.warns(PartialStateWarning, match=r"state\.json\.partial is the leftover of a save"):
        load_state_dict(resumed, path)
    assert resumed.state_dict()["samples_consumed_per_split"] == first["samples_consumed_per_split"]

    save_state_dict(second, path)
    assert not partial.exists(), "the next save replaces the leftover"
    assert json.loads(path.read_text()) == second

    path.unlink()
    partial.write_text('{"format_version": 2, "num_sp')  # a first save, killed mid-write
    with pytest.raises(FileNotFoundError, match=r"no state at .*state\.json: only state\.json\.partial"):
        load_state_dict(resumed, path)
