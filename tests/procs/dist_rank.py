"""One rank of a real torch.distributed (gloo) training job, launched by the tests.

Logs every delivered batch to ``OUT/rank<r>.jsonl`` (flushed before the step's
all-reduce, so a killed process's deliveries are on disk), all-reduces every step
so unequal lengths would hang, and checkpoints the merged state as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from pathlib import Path

import lance
import torch
import torch.distributed as dist

from streaming import (
    StreamingDataLoader,
    StreamingDataset,
    gather_state_dict,
    gather_stats,
    load_state_dict,
    save_state_dict,
)

import rank
from helpers import FailOnIds, table_data

NUM_SPLITS = 12


def parse() -> argparse.Namespace:
    parser = rank.parser()
    parser.add_argument("--uri", required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=None, help="None: drawn on rank 0 and broadcast")
    parser.add_argument("--resume", type=Path, default=None)
    parser.add_argument("--checkpoint-every", type=int, default=0)
    parser.add_argument("--stop-after", type=int, default=0, help="stop after this many steps in total")
    parser.add_argument("--kill-at", type=int, default=0, help="rank 0 SIGKILLs itself after this step")
    parser.add_argument("--fail-ids", default="", help="comma-separated ids the transform fails on")
    parser.add_argument("--on-error", default="raise", help="on_transform_error")
    parser.add_argument("--endless", action="store_true", help="one endless run (needs --stop-after)")
    parser.add_argument("--follow-latest", action="store_true", help="follow_latest=True")
    parser.add_argument("--append-at", type=int, default=0, help="rank 0 appends 40 rows after this step")
    return parser.parse_args()


def main() -> None:
    args = parse()
    rank.join(args)
    resume = json.loads(args.resume.read_text()) if args.resume else None
    seed = resume["state"]["shuffle_seed"] if resume else args.seed
    epoch = resume["state"]["epoch"] if resume else 0
    failing = [int(i) for i in args.fail_ids.split(",") if i]
    data = StreamingDataset(
        args.uri,
        num_splits=NUM_SPLITS,
        shuffle_seed=seed,
        epoch=epoch,
        block_rows=4,
        shuffle_buffer_size=96,
        transform=FailOnIds(failing) if failing else None,
        on_transform_error=args.on_error,
        endless=args.endless,
        follow_latest=args.follow_latest,
    )  # rank and world size come from the process group
    timeout = 120 if args.workers else 0  # torch refuses a timeout without worker processes
    loader = StreamingDataLoader(data, batch_size=args.batch, num_workers=args.workers, timeout=timeout)
    if resume:
        load_state_dict(loader, resume["state"])
    log = (args.out / f"rank{args.rank}.jsonl").open("a")
    step = resume["step"] if resume else 0
    for current in range(epoch, epoch + 1 if args.endless else args.epochs):
        loader.set_epoch(current)
        for batch in loader:
            step += 1
            ids = batch["id"].tolist()
            log.write(
                json.dumps(
                    {
                        "step": step,
                        "epoch": data.epoch,
                        "ids": ids,
                        "seed": data.shuffle_seed,
                        "version": data.version,
                    }
                )
                + "\n"
            )
            log.flush()
            count = torch.tensor([len(ids)])
            dist.all_reduce(count)  # a rank with fewer steps would leave the others hanging here
            if args.checkpoint_every and step % args.checkpoint_every == 0:
                state = gather_state_dict(loader)
                if args.rank == 0:
                    save_state_dict({"step": step, "state": state}, args.out / "checkpoint.json")
            if args.append_at and step == args.append_at and args.rank == 0:
                lance.write_dataset(table_data(10_000, 40), args.uri, mode="append")
            if args.kill_at and step == args.kill_at and args.rank == 0:
                os.kill(os.getpid(), signal.SIGKILL)
            if args.stop_after and step == args.stop_after:
                break
        if args.stop_after and step == args.stop_after:
            break
    log.close()
    every = gather_stats(loader)  # every rank's waits and counters, on every rank
    if args.rank == 0:
        (args.out / "stats.json").write_text(json.dumps(every))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
