"""One rank of a multi-node torchrun job, launched by ``torchrun`` (env:// rendezvous).

The table is on object storage; its endpoint and credentials come from this
node's environment (``LS_S3_*``). The checkpoint is one file in a folder every
node shares. Every start of the worker group is an *attempt*: rank 0 numbers it
and broadcasts the number, and every rank logs each delivered batch to
``OUT/attempts/<n>/rank<r>.jsonl`` (flushed before the step's all-reduce), with
the step the attempt resumed from in ``OUT/attempts/<n>/resumed.json``.

Failures, once per job: ``--kill-rank R --kill-at N`` SIGKILLs global rank R after
step N; ``LS_LOSE_NODE_AT=N`` in one node's environment makes that node die at
step N of a world of more than one node (its first rank SIGKILLs its torchrun
agent, and each of its ranks SIGKILLs itself).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from streaming import (
    StreamingDataLoader,
    StreamingDataset,
    gather_state_dict,
    load_state_dict,
    save_state_dict,
)

NUM_SPLITS = 8


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--uri", required=True)
    parser.add_argument("--out", type=Path, required=True, help="a folder every node shares")
    parser.add_argument("--batch", type=int, default=4, help="samples per rank and step")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--checkpoint-every", type=int, default=4)
    parser.add_argument("--kill-rank", type=int, default=1, help="this global rank SIGKILLs itself...")
    parser.add_argument("--kill-at", type=int, default=0, help="...after this step, once per job")
    parser.add_argument("--timeout", type=float, default=30, help="the process group's collective timeout")
    return parser.parse_args()


def storage_options() -> dict[str, str]:
    return {
        "aws_endpoint": os.environ["LS_S3_ENDPOINT"],
        "aws_access_key_id": os.environ["LS_S3_KEY_ID"],
        "aws_secret_access_key": os.environ["LS_S3_SECRET"],
        "aws_region": "us-east-1",
        "allow_http": "true",
    }


def once(out: Path, name: str) -> bool:
    """True the first time this job asks (a marker file in the shared folder), False after."""
    try:
        (out / name).touch(exist_ok=False)
    except FileExistsError:
        return False
    return True


def main() -> None:
    args = parse()
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.timeout))
    rank, world_size = dist.get_rank(), dist.get_world_size()
    # decided by every rank before the broadcast below, so before any rank can write the marker
    lose_at = int(os.environ.get("LS_LOSE_NODE_AT", "0"))
    if world_size == int(os.environ["LOCAL_WORLD_SIZE"]) or (args.out / "lost").exists():
        lose_at = 0
    attempts = args.out / "attempts"
    box: list[object] = [None]
    if rank == 0:
        attempts.mkdir(exist_ok=True)
        box[0] = len(list(attempts.iterdir()))
        (attempts / str(box[0])).mkdir()
    dist.broadcast_object_list(box, src=0)
    here = attempts / str(box[0])
    checkpoint = args.out / "checkpoint.json"
    resume = json.loads(checkpoint.read_text()) if checkpoint.exists() else None
    data = StreamingDataset(
        args.uri,
        storage_options=storage_options(),
        num_splits=NUM_SPLITS,
        shuffle_seed=args.seed,
        block_rows=4,
        shuffle_buffer_size=32,
    )  # rank and world size: the process group's
    loader = StreamingDataLoader(data, batch_size=args.batch, num_workers=args.workers, timeout=120)
    if resume:
        load_state_dict(loader, resume["state"])
    step = resume["step"] if resume else 0
    if rank == 0:
        (here / "resumed.json").write_text(json.dumps({"step": step, "world_size": world_size}))
    with (here / f"rank{rank}.jsonl").open("a") as log:
        for batch in loader:
            step += 1
            ids = batch["id"].tolist()
            log.write(json.dumps({"step": step, "ids": ids, "pid": os.getpid()}) + "\n")
            log.flush()
            if step == lose_at:
                (args.out / "lost").touch()
                if int(os.environ["LOCAL_RANK"]) == 0:
                    os.kill(os.getppid(), signal.SIGKILL)  # this node's torchrun agent
                os.kill(os.getpid(), signal.SIGKILL)
            count = torch.tensor([len(ids)])
            dist.all_reduce(count)  # ranks with unequal steps would hang here
            if args.checkpoint_every and step % args.checkpoint_every == 0:
                state = gather_state_dict(loader)
                if rank == 0:
                    save_state_dict({"step": step, "state": state}, checkpoint)
            if step == args.kill_at and rank == args.kill_rank and once(args.out, "killed"):
                os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
