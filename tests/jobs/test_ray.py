"""Ray Train jobs for real, on a local Ray cluster started and stopped by each test.

The recipe of docs/ray.md runs unchanged (in CI): a ``TorchTrainer`` of 2 workers with 2
DataLoader workers each; one Ray worker SIGKILLs itself mid-epoch and
``FailureConfig(max_failures=1)`` restarts the group from the last checkpoint. The
elastic job (``ScalingConfig(num_workers=(1, 3))``, ``tests/procs/ray_elastic.py``) loses
a Ray node mid-epoch, goes on with 2 workers, then grows back to 3 when a node joins;
it takes over a minute, so it is marked ``long`` and ``scripts/test.sh`` leaves it out
unless ``LANCE_STREAMING_LONG_TESTS=1``.

Each Ray worker logs every batch it received (``ray_log/sitecustomize.py`` for the
recipe, the process script itself for the elastic job); the attempts together must
deliver every planned sample exactly once. Each test's cluster keeps its files under
the test's temporary folder (``RAY_TMPDIR``), writes no token to ``~/.ray``
(``RAY_AUTH_MODE=disabled``) and leaves no process running: everything it started
carries the test's token in its environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pytest

from streaming import StreamingDataset

import shm_watch
from attempt_logs import attempts, check_exactly_once
from doc_examples import examples
from helpers import ids_of, make_table
from launching import PROCS, wait_for_the_job_to_end

ROOT = Path(__file__).parents[2]
RAY_LOG = PROCS / "ray_log"  # its sitecustomize.py logs what each Ray worker of the recipe trains
TOKEN_FILE = Path.home() / ".ray" / "auth_token"


def ray_env(scratch: Path, token: str, *paths: Path) -> dict[str, str]:
    return {
        **os.environ,
        "TMPDIR": str(scratch),
        "RAY_TMPDIR": str(scratch),  # the cluster's sockets and logs (else /tmp/ray)
        "RAY_AUTH_MODE": "disabled",  # a throwaway local cluster: no token in ~/.ray
        "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.5",  # the controller records reports sooner (2 s)
        "LS_JOB": token,
        "PYTHONPATH": os.pathsep.join([*map(str, paths), str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }


def test_the_ray_example_restarts_a_killed_worker(tmp_path, short_tmp):
    """The example of docs/ray.md, run unchanged (here only: ``test_docs.py`` leaves it to
    this test): 2 Ray workers x 2 DataLoader workers; rank 1 SIGKILLs itself after step 9;
    Ray Train restarts both workers, which resume from the checkpoint of step 8 and
    finish the epoch exactly, on 2 workers again."""
    ((page, line, code),) = [param.values for param in examples() if param.values[0] == "ray.md"]
    (tmp_path / "example.py").write_text(code)
    log, token, had_token = tmp_path / "log", uuid.uuid4().hex, TOKEN_FILE.exists()
    env = ray_env(short_tmp, token, RAY_LOG) | {"LS_RAY_LOG": str(log)}
    before = shm_watch.shm_names()
    try:
        done = subprocess.run(
            [sys.executable, "example.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
        )
    finally:
        wait_for_the_job_to_end(token)
        # the example's SIGKILL of a Ray worker leaves what docs/limits.md says a killed job
        # leaves (its DataLoader queues' semaphores if its workers were still starting, rings
        # not yet received); removed as the command there does: only files no process uses
        assert shm_watch.CURRENT is not None
        for name in shm_watch.CURRENT.leftovers(shm_watch.shm_names() - before):
            if name.startswith(("sem.mp-", "lsr")):
                os.remove(f"/dev/shm/{name}")
    assert done.returncode == 0, f"docs/{page} line {line} failed:\n{done.stdout}\n{done.stderr}"
    assert "finished at step 20 after a restart: True" in done.stdout, done.stdout
    found = attempts(log)
    assert [(attempt["step"], attempt["world_size"]) for attempt in found] == [(0, 2), (8, 2)]
    assert max(len(records) for records in found[0]["ranks"].values()) >= 9, "killed before step 9"
    check_exactly_once(found, Counter(range(240)))  # the example's table: ids 0 to 239
    assert TOKEN_FILE.exists() == had_token, "the cluster wrote ~/.ray/auth_token"


@pytest.mark.long
def test_an_elastic_ray_job_loses_a_node_and_grows_back(tmp_path, short_tmp):
    """``num_workers=(1, 3)`` on three local Ray nodes: the node of one worker is removed
    after step 5 (checkpoint 4 committed), the job goes on with 2 workers from step 4,
    then a node joins and the job grows back to 3 workers from the 2-worker group's last
    checkpoint; every planned sample of the epoch is delivered once over the attempts."""
    table = make_table(tmp_path / "t.lance", [100, 90, 73], deleted=[5, 6, 150])
    out, token = tmp_path / "out", uuid.uuid4().hex
    # a start waits this long for its placement group: after the loss, Ray Train first
    # asks for the old 3 workers (its view of the nodes is refreshed every 20 s)
    env = ray_env(short_tmp, token) | {"RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S": "5"}
    script = PROCS / "ray_elastic.py"
    command = [sys.executable, str(script), f"--table={table}", f"--out={out}", "--timeout=300"]
    try:
        done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
    finally:
        wait_for_the_job_to_end(token)
    assert done.returncode == 0, f"{done.stdout[-5000:]}\n{done.stderr[-10000:]}"
    assert json.loads((out / "result.json").read_text())["events"] == ["lost", "joined"]
    found = attempts(out)
    sizes = [(attempt["step"], attempt["world_size"]) for attempt in found]
    assert sizes[0] == (0, 3) and sizes[1] == (4, 2) and sizes[-1][1] == 3, sizes
    assert sizes[-1][0] > 4, f"the 3 workers resumed from a checkpoint of the 2: {sizes}"
    planned = StreamingDataset(table, num_splits=12, shuffle_seed=3)
    check_exactly_once(found, Counter(ids_of(planned)))
