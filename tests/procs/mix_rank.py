"""One rank of a real torch.distributed (gloo) job training on a mixture, launched by the tests.

Logs every delivered batch to ``OUT/rank<r>.jsonl`` before the step's all-reduce (so
unequal lengths would hang), checkpoints with ``gather_state_dict`` + ``save_state_dict``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import torch.distributed as dist

from streaming import StreamingDataLoader, gather_state_dict, load_state_dict, save_state_dict

import rank
from mixtures import GLOBAL_BATCH, mixture


def parse() -> argparse.Namespace:
    parser = rank.parser()
    parser.add_argument("--a", required=True)
    parser.add_argument("--b", required=True)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--stop", default="first_exhausted")
    parser.add_argument("--resume", type=Path, default=None)
    parser.add_argument("--checkpoint-every", type=int, default=0)
    parser.add_argument("--stop-after", type=int, default=0)
    return parser.parse_args()


def main() -> None:
    args = parse()
    rank.join(args)
    mix = mixture({"a": args.a, "b": args.b}, dist.get_rank(), dist.get_world_size(), stop=args.stop)
    timeout = 120 if args.workers else 0
    batch = GLOBAL_BATCH // args.world_size
    loader = StreamingDataLoader(mix, batch_size=batch, num_workers=args.workers, timeout=timeout)
    if args.resume:
        load_state_dict(loader, args.resume)
    log = (args.out / f"rank{args.rank}.jsonl").open("a")
    for batch in loader:
        step = mix.step
        log.write(json.dumps({"step": step, "ids": batch["id"].tolist()}) + "\n")
        log.flush()
        count = torch.tensor([len(batch["id"])])
        dist.all_reduce(count)
        if args.checkpoint_every and step % args.checkpoint_every == 0:
            state = gather_state_dict(loader)
            if args.rank == 0:
                save_state_dict(state, args.out / f"checkpoint{step}.json")
        if step == args.stop_after:
            break
    log.close()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
