"""One rank of a chaos-campaign training run (launched by ``chaos.py`` and the soak).

Uses the public API only, as a careful user would. Every delivered batch is
appended to ``OUT/log-run<run>-rank<r>.jsonl`` and fsynced before the step's
all-reduce, so a SIGKILL loses nothing already delivered. Checkpoints go to
``OUT/ckpt/step-<step>-run-<run>/``: either one merged state from
``gather_state_dict`` (``--ckpt-mode=gather``) or one ``loader.state_dict()`` per
rank (``--ckpt-mode=ranks``), merged on resume. Rank 0 prints ``step N``,
``ckpt N`` (just before a checkpoint write), ``saved N`` and ``done`` on stdout,
which the campaign reads to place its kills.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from streaming import (
    StreamingDataLoader,
    StreamingDataset,
    gather_state_dict,
    load_state_dict,
    save_state_dict,
)

import rank


def parse() -> argparse.Namespace:
    parser = rank.parser()
    for name in ("uri", "ckpt-mode"):
        parser.add_argument(f"--{name}", required=True)
    for name in ("run", "workers", "batch", "splits", "seed"):
        parser.add_argument(f"--{name}", type=int, required=True)
    parser.add_argument("--filter", default="")
    parser.add_argument("--resume", type=Path, default=None, help="a complete checkpoint folder")
    parser.add_argument("--checkpoint-every", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--stand-in", default="", help="read --uri's table through this LanceDB stand-in")
    return parser.parse_args()


def record_worker(worker_id: int) -> None:
    """``worker_init_fn``: leave the worker's pid where the campaign checks it has gone."""
    folder = Path(os.environ["CHAOS_PIDS"])
    (folder / str(os.getpid())).touch()


def read_checkpoint(folder: Path) -> tuple[int, dict[str, Any]]:
    """The step and the merged state of a complete checkpoint folder."""
    merged = folder / "merged.json"
    if merged.exists():
        saved = json.loads(merged.read_text())
        return saved["step"], saved["state"]
    saved_ranks = [json.loads(path.read_text()) for path in sorted(folder.glob("rank*.json"))]
    state = StreamingDataset.merge_state_dicts([saved["state"] for saved in saved_ranks])
    return saved_ranks[0]["step"], state


def checkpoint(args: argparse.Namespace, loader: StreamingDataLoader, step: int) -> None:
    folder = args.out / "ckpt" / f"step-{step:06d}-run-{args.run}"
    meta = {"step": step, "world_size": args.world_size, "run": args.run}
    if args.ckpt_mode == "gather":
        state = gather_state_dict(loader)
        if args.rank == 0:
            folder.mkdir(parents=True, exist_ok=True)
            say(args, f"ckpt {step}")
            save_state_dict({**meta, "state": state}, folder / "merged.json")
    else:
        state = loader.state_dict()
        folder.mkdir(parents=True, exist_ok=True)
        say(args, f"ckpt {step}")
        save_state_dict({**meta, "state": state}, folder / f"rank{args.rank}.json")
    say(args, f"saved {step}")


def say(args: argparse.Namespace, line: str) -> None:
    if args.rank == 0:
        print(line, flush=True)


def table(args: argparse.Namespace) -> Any:
    """The table: ``--uri``, or with ``--stand-in`` the same table through a LanceDB server
    (the key comes in the environment; lancedb's own retries quick, so ours are met)."""
    if not args.stand_in:
        return args.uri
    import lancedb

    from streaming.testing import FAST_RETRIES
    from streaming.testing.standin import KEY_VARIABLE

    key = os.environ[KEY_VARIABLE]
    server = args.stand_in
    database = lancedb.connect("db://bench", api_key=key, host_override=server, client_config=FAST_RETRIES)
    return database.open_table(Path(args.uri).stem)


def build(args: argparse.Namespace) -> tuple[StreamingDataset, StreamingDataLoader, int]:
    step, state = read_checkpoint(args.resume) if args.resume else (0, None)
    dataset = StreamingDataset(
        table(args),
        num_splits=args.splits,
        shuffle_seed=args.seed,
        epoch=state["epoch"] if state else 0,
        columns=["id"],
        filter=args.filter or None,
    )  # rank and world size come from the process group
    loader = StreamingDataLoader(
        dataset,
        batch_size=args.batch,
        num_workers=args.workers,
        timeout=60 if args.workers else 0,
        worker_init_fn=record_worker,
    )
    if state is not None:
        load_state_dict(loader, state)
    return dataset, loader, step


def train(
    args: argparse.Namespace, dataset: StreamingDataset, loader: StreamingDataLoader, step: int
) -> None:
    path = args.out / f"log-run{args.run}-rank{args.rank}.jsonl"
    with path.open("a") as log:
        for epoch in range(dataset.epoch, args.epochs):
            loader.set_epoch(epoch)
            for batch in loader:
                step += 1
                ids = batch["id"].tolist()
                log.write(json.dumps({"run": args.run, "step": step, "epoch": epoch, "ids": ids}) + "\n")
                log.flush()
                os.fsync(log.fileno())
                dist.all_reduce(torch.tensor([len(ids)]))  # unequal lengths would hang here
                say(args, f"step {step}")
                if step % args.checkpoint_every == 0:
                    checkpoint(args, loader, step)


def main() -> None:
    args = parse()
    rank.join(args, timeout_s=30)
    dataset, loader, step = build(args)
    train(args, dataset, loader, step)
    dist.barrier()
    dist.destroy_process_group()
    say(args, "done")


if __name__ == "__main__":
    main()
