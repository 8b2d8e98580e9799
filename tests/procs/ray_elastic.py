"""An elastic Ray Train job on a local cluster of three Ray nodes, for ``tests/jobs/test_ray.py``.

The driver starts a head node and two worker nodes on this machine
(``ray.cluster_utils.Cluster``, one raylet each, 1 CPU each), so one Ray Train
worker lands on each node, and runs a ``TorchTrainer`` with
``ScalingConfig(num_workers=(1, 3))``:

1. 3 workers train; after the checkpoint of step ``--lose-at`` is committed, the
   worker on one of the worker nodes tells the driver, which removes that node (its
   raylet and the Ray worker on it end): the survivors' next collective fails;
2. Ray Train restarts the group on the 2 workers the cluster still holds, from the last
   checkpoint; after ``--grow-after`` more steps and a committed checkpoint, rank 0
   tells the driver, which adds a node;
3. the elastic controller sees room for 3 workers, stops the 2 and starts 3, which
   resume from the last checkpoint and finish the epoch.

The new node joins as on a real cluster, by ``ray start --address=... --block`` (a
process of its own: ``Cluster.add_node`` works only in the main thread, where
``trainer.fit()`` runs).

Every start of the worker group is an attempt: rank 0 numbers it and broadcasts the
number; each rank logs every batch it receives, before the step's collectives, to
``OUT/attempts/<n>/rank<r>.jsonl`` and rank 0 the step and world size it resumed from
to ``OUT/attempts/<n>/resumed.json``. The driver writes ``OUT/result.json`` at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import ray
import ray.train
import torch
import torch.distributed as dist
from ray.cluster_utils import Cluster
from ray.train import Checkpoint, CheckpointConsistencyMode, FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer

from streaming import (
    StreamingDataLoader,
    StreamingDataset,
    gather_state_dict,
    load_state_dict,
    save_state_dict,
)

NUM_SPLITS = 12  # a multiple of 1, 2 and 3 workers times 1 or 2 DataLoader workers
GLOBAL_BATCH = 12
CHECKPOINT_EVERY = 4


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--table", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--workers", type=int, default=0, help="DataLoader workers in each Ray worker")
    parser.add_argument("--lose-at", type=int, default=5, help="3 workers lose a node after this step")
    parser.add_argument("--grow-after", type=int, default=5, help="steps 2 workers train before growth")
    parser.add_argument("--timeout", type=float, default=240, help="the driver's deadline for the job")
    return parser.parse_args()


def attempt_folder(out: Path, rank: int) -> Path:
    """Rank 0 numbers this start of the group and tells every rank (a collective)."""
    attempts = out / "attempts"
    number = torch.tensor([len(list(attempts.glob("*"))) if rank == 0 and attempts.exists() else 0])
    dist.broadcast(number, src=0)
    folder = attempts / str(int(number.item()))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def wait_to_be_stopped(marker: Path) -> None:
    """Tell the driver (a marker file) and block until Ray stops this worker."""
    ray.train.get_all_reported_checkpoints(consistency_mode=CheckpointConsistencyMode.COMMITTED)
    marker.touch()
    threading.Event().wait()


def train_func(config: dict[str, Any]) -> None:
    out = Path(config["out"])
    rank, world_size = dist.get_rank(), dist.get_world_size()
    folder = attempt_folder(out, rank)
    dataset = StreamingDataset(config["table"], num_splits=NUM_SPLITS, shuffle_seed=3)
    batch_size = GLOBAL_BATCH // world_size
    loader = StreamingDataLoader(dataset, batch_size=batch_size, num_workers=config["workers"])
    step = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint:
        with checkpoint.as_directory() as saved_in:
            saved = json.loads((Path(saved_in) / "state.json").read_text())
        load_state_dict(loader, saved["dataset"])
        step = saved["step"]
    resumed = step
    if rank == 0:
        (folder / "resumed.json").write_text(json.dumps({"step": step, "world_size": world_size}))
    with (folder / f"rank{rank}.jsonl").open("a") as log:
        for batch in loader:
            step += 1
            log.write(json.dumps({"step": step, "ids": batch["id"].tolist(), "pid": os.getpid()}) + "\n")
            log.flush()
            if step % CHECKPOINT_EVERY == 0:
                state = gather_state_dict(loader)
                with tempfile.TemporaryDirectory() as to_save:
                    if rank == 0:
                        save_state_dict({"step": step, "dataset": state}, Path(to_save) / "state.json")
                    mine = Checkpoint.from_directory(to_save) if rank == 0 else None
                    ray.train.report({"step": step}, checkpoint=mine)
            on_doomed_node = ray.get_runtime_context().get_node_id() == config["doomed_node"]
            if world_size == 3 and step == config["lose_at"] and on_doomed_node:
                wait_to_be_stopped(out / "lose")
            if world_size == 2 and step == resumed + config["grow_after"] and rank == 0:
                wait_to_be_stopped(out / "grow")


def await_marker(marker: Path, deadline: float) -> bool:
    while not marker.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def main() -> None:
    args = parse()
    args.out.mkdir(parents=True, exist_ok=True)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    doomed = cluster.add_node(num_cpus=1)
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    deadline = time.monotonic() + args.timeout
    events: list[str] = []
    joined: list[subprocess.Popen[bytes]] = []

    def play() -> None:
        if await_marker(args.out / "lose", deadline):
            cluster.remove_node(doomed)
            events.append("lost")
        if await_marker(args.out / "grow", deadline):
            ray_cli = Path(sys.executable).with_name("ray")
            command = [str(ray_cli), "start", f"--address={cluster.address}", "--num-cpus=1", "--block"]
            joined.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            events.append("joined")

    try:
        ray.init(address=cluster.address)
        player = threading.Thread(target=play, daemon=True)
        player.start()
        trainer = TorchTrainer(
            train_func,
            train_loop_config={
                "table": args.table,
                "out": str(args.out),
                "workers": args.workers,
                "lose_at": args.lose_at,
                "grow_after": args.grow_after,
                "doomed_node": doomed.node_id,
            },
            scaling_config=ScalingConfig(
                num_workers=(1, 3), resources_per_worker={"CPU": 1}, elastic_resize_monitor_interval_s=1
            ),
            run_config=RunConfig(
                name="elastic",
                storage_path=str(args.out / "runs"),
                failure_config=FailureConfig(max_failures=2),
            ),
        )
        result = trainer.fit()
        (args.out / "result.json").write_text(json.dumps({"metrics": result.metrics, "events": events}))
    finally:
        ray.shutdown()
        for node in joined:  # ray start --block stops its node's processes on SIGTERM
            node.send_signal(signal.SIGTERM)
            node.wait(timeout=60)
        cluster.shutdown()


if __name__ == "__main__":
    main()
