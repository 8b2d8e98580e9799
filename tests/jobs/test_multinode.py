"""Multi-node torchrun jobs for real, on 127.0.0.1: two torchrun agents as two nodes.

Each "node" is one ``python -m torch.distributed.run`` agent with its own working
folder and environment, 2 processes of gloo with 2 DataLoader workers each. The
agents meet through a c10d rendezvous; the table is on an S3-compatible server
(moto's, in its own process); the checkpoint is one file in a shared folder.
A rank (or a whole node) is SIGKILLed mid-epoch and torchrun restarts the group by
itself; the job resumes from the last checkpoint and the epoch is exactly once.
The settings are those of docs/multinode.md.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import lance
import pytest

from benchmarks.harness.s3 import make_bucket, moto_server
from streaming import StreamingDataset, TorchrunStoreWarning
from streaming.dataset import torchrun

import shm_watch
from attempt_logs import attempts, check_exactly_once
from doc_examples import examples
from helpers import ids_of, make_table, table_data
from launching import PROCS, free_port, wait_for_the_job_to_end

RANK_SCRIPT = PROCS / "multinode_rank.py"
RANK_LOG = PROCS / "rank_log"  # its sitecustomize.py logs what each rank trains
ROOT = Path(__file__).parents[2]
KEY_ID, SECRET = "AKIAMULTINODEID", "multinode-secret"
NUM_SPLITS, BATCH, ROWS = 8, 4, 330  # 4 ranks: 20 steps of 16 samples; 2 ranks: 8 samples a step


@pytest.fixture(scope="module")
def s3(tmp_path_factory) -> Iterator[dict[str, str]]:
    """moto's S3 server in a process of its own, as object storage is for a real job."""
    with (tmp_path_factory.mktemp("moto") / "moto.log").open("w") as log, moto_server(log) as endpoint:
        options = {
            "aws_endpoint": endpoint,
            "aws_access_key_id": KEY_ID,
            "aws_secret_access_key": SECRET,
            "aws_region": "us-east-1",
            "allow_http": "true",
        }
        make_bucket(endpoint, "tables", options)
        yield options


@pytest.fixture(scope="module")
def uri(s3) -> str:
    uri = "s3://tables/multinode.lance"
    lance.write_dataset(table_data(0, 200), uri, storage_options=s3)
    lance.write_dataset(table_data(200, ROWS - 200), uri, mode="append", storage_options=s3)
    lance.dataset(uri, storage_options=s3).delete("id IN (7, 250)")
    return uri


def planned(uri: str, s3: dict[str, str]) -> Counter:
    data = StreamingDataset(
        uri, storage_options=s3, num_splits=NUM_SPLITS, shuffle_seed=5, block_rows=4, shuffle_buffer_size=32
    )
    return Counter(ids_of(data))


def shm_segments() -> set[str]:
    """The loader's rings in /dev/shm that this test run made (another job's are not judged)."""
    return shm_watch.ours({name for name in os.listdir("/dev/shm") if name.startswith("lsr")})


def run_job(
    uri: str,
    s3: dict[str, str],
    root: Path,
    scratch: Path,
    *,
    nnodes: str,
    node_env: list[dict[str, str]],
    **args,
):
    """Two torchrun agents (node 0 hosts the rendezvous store); wait for both; return their exit codes."""
    shared = root / "shared"
    shared.mkdir(parents=True)
    port, token = free_port(), uuid.uuid4().hex
    agents, logs = [], []
    for node, extra in enumerate(node_env):
        folder = root / f"node{node}"
        folder.mkdir(parents=True)
        (scratch / f"n{node}").mkdir()  # a short TMPDIR: the fork server's socket lives there
        env = {
            **os.environ,
            "TMPDIR": str(scratch / f"n{node}"),
            "LS_JOB": token,
            "LS_S3_ENDPOINT": s3["aws_endpoint"],
            "LS_S3_KEY_ID": KEY_ID,
            "LS_S3_SECRET": SECRET,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",  # a fresh store for every attempt (see the docs)
            **extra,
        }
        conf = f"is_host={int(node == 0)},last_call_timeout=5,keep_alive_interval=1,keep_alive_max_attempt=3"
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nnodes={nnodes}",
            "--nproc-per-node=2",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{port}",
            "--rdzv-id=multinode-test",
            f"--rdzv-conf={conf}",
            "--max-restarts=1",
            "--monitor-interval=0.5",
            str(RANK_SCRIPT),
            f"--uri={uri}",
            f"--out={shared}",
            "--timeout=30",
            *(f"--{name.replace('_', '-')}={value}" for name, value in args.items()),
        ]
        logs.append((folder / "agent.log").open("w"))
        agents.append(
            subprocess.Popen(command, cwd=folder, env=env, stdout=logs[-1], stderr=subprocess.STDOUT)
        )
    try:
        deadline = time.monotonic() + 150
        for agent in agents:
            agent.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        for agent, log in zip(agents, logs):
            if agent.poll() is None:
                agent.kill()
                agent.wait()
            log.close()
    wait_for_the_job_to_end(token)
    return [agent.returncode for agent in agents], shared


def agent_logs(root: Path) -> str:
    return "\n".join((root / f"node{node}" / "agent.log").read_text()[-6000:] for node in range(2))


def test_a_killed_rank_and_torchrun_restarts_both_nodes(tmp_path, short_tmp):
    """The example of docs/multinode.md, run unchanged (here only: ``test_docs.py`` leaves
    it to this test): 2 nodes x 2 ranks x 2 workers, the table on a local S3 server; rank 1
    SIGKILLs itself after step 9; with --max-restarts=1 both agents restart their workers,
    which resume from the checkpoint of step 8 and finish the epoch exactly, on the same 4
    ranks. ``rank_log/sitecustomize.py`` logs what every rank trained."""
    ((page, line, code),) = [param.values for param in examples() if param.values[0] == "multinode.md"]
    (tmp_path / "example.py").write_text(code)
    log, token = tmp_path / "log", uuid.uuid4().hex
    env = {
        **os.environ,
        "TMPDIR": str(short_tmp),
        "LS_JOB": token,
        "LS_RANK_LOG": str(log),
        "PYTHONPATH": os.pathsep.join([str(RANK_LOG), str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    before = shm_segments()
    done = subprocess.run(
        [sys.executable, "example.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, (
        f"the example at docs/{page} line {line} failed:\n{done.stdout}\n{done.stderr}"
    )
    wait_for_the_job_to_end(token)
    found = attempts(log)
    assert [(attempt["step"], attempt["world_size"]) for attempt in found] == [(0, 4), (8, 4)]
    assert max(len(records) for records in found[0]["ranks"].values()) >= 9, "killed before step 9"
    check_exactly_once(found, Counter(range(320)))  # the example's table: ids 0 to 319
    assert shm_segments() <= before, "shared memory left behind"


@pytest.mark.slow
def test_a_lost_node_and_the_job_goes_on_with_the_other(uri, s3, tmp_path, short_tmp):
    """--nnodes=1:2: node 1 dies at step 10 (agent and ranks SIGKILLed) and never comes
    back; node 0's agent restarts its workers alone, on 2 ranks, from the checkpoint
    of step 8, and they finish the epoch exactly."""
    before = shm_segments()
    codes, shared = run_job(
        uri, s3, tmp_path, short_tmp, nnodes="1:2", node_env=[{}, {"LS_LOSE_NODE_AT": "10"}], kill_at=0
    )
    assert codes[0] == 0 and codes[1] == -9, agent_logs(tmp_path)
    found = attempts(shared)
    assert (found[-1]["step"], found[-1]["world_size"]) == (8, 2), agent_logs(tmp_path)
    assert any(attempt["world_size"] == 4 for attempt in found[:-1])
    check_exactly_once(found, planned(uri, s3))
    assert shm_segments() <= before, "shared memory left behind"


@pytest.mark.parametrize(
    ("use_agent_store", "nodes", "restarts", "warns"),
    [
        ("True", "2", "1", True),
        ("False", "2", "1", False),  # TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
        ("True", "1", "3", False),  # one node
        ("True", "2", "0", False),  # no restarts
    ],
)
def test_a_multinode_torchrun_job_sharing_the_agent_store_is_warned(
    tmp_path, monkeypatch, use_agent_store, nodes, restarts, warns
):
    """The cause of the hang: the agent's store outlives an attempt (pytorch/pytorch#135712).
    A dataset built under torchrun says so once per process, where a restart would hit it."""
    local = make_table(tmp_path / "t.lance", [40])
    monkeypatch.setattr(torchrun, "_store_checked", False)
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", use_agent_store)
    monkeypatch.setenv("GROUP_WORLD_SIZE", nodes)
    monkeypatch.setenv("TORCHELASTIC_MAX_RESTARTS", restarts)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        StreamingDataset(local, num_splits=2, shuffle_seed=1)
        StreamingDataset(local, num_splits=2, shuffle_seed=1)
    found = [warning for warning in caught if warning.category is TorchrunStoreWarning]
    assert len(found) == int(warns), [str(warning.message) for warning in caught]
    if warns:
        assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in str(found[0].message)
        assert found[0].filename == __file__, "the warning points at the caller's line"


def test_two_jobs_on_one_host_keep_their_shared_memory_and_fork_servers_apart(tmp_path):
    """Node-local resources: two gloo jobs of 2 ranks x 2 workers run at once on this
    host (as two jobs sharing a node would), each with its own forkservers and
    shared-memory rings; each delivers its epoch exactly once and leaves nothing."""
    from concurrent.futures import ThreadPoolExecutor

    import launching as jobs

    local = make_table(tmp_path / "t.lance", [120, 90, 103], deleted=[5, 6, 200])
    before = shm_segments()
    with ThreadPoolExecutor(2) as pool:
        runs = [
            pool.submit(jobs.launch, local, tmp_path / f"job{job}", 2, workers=2, batch=6, seed=3 + job)
            for job in range(2)
        ]
        for run in runs:
            run.result()
    for job in range(2):
        records = jobs.delivered(tmp_path / f"job{job}")
        assert Counter(jobs.ids(records)) == jobs.planned(local, 3 + job), f"job {job} is not exactly once"
    assert shm_segments() <= before, "shared memory left behind"
