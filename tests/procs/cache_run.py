"""A training run over a table on object storage with the local cache, in a process of
its own (one gloo rank of several with ``--world-size``), launched by tests/tables/test_cache.py.

The storage options come in the ``CACHE_TEST_OPTIONS`` environment variable (JSON),
never on the command line. Every delivered batch goes to ``--out`` as a JSON line
(flushed at once, so a killed run's deliveries are on disk), and after each epoch
the rank's ``stats()``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal

import torch
import torch.distributed as dist

from streaming import StreamingDataLoader, StreamingDataset

import rank


def parse() -> argparse.Namespace:
    parser = rank.parser(alone=True)
    parser.add_argument("--uri", required=True)
    parser.add_argument("--cache-dir", default=None)
    parser.add_argument("--cache-limit", type=int, default=None)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--file-size-limit", type=int, default=0, help="RLIMIT_FSIZE: writes past it fail")
    return parser.parse_args()


def main() -> None:
    args = parse()
    if args.file_size_limit:  # a disk that takes no more than this per file: writes fail with EFBIG
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (args.file_size_limit, args.file_size_limit))
    if args.world_size > 1:
        rank.join(args, timeout_s=120)
    data = StreamingDataset(
        args.uri,
        storage_options=json.loads(os.environ["CACHE_TEST_OPTIONS"]),
        num_splits=8,
        block_rows=64,
        shuffle_buffer_size=2048,
        cache_dir=args.cache_dir,
        cache_limit=args.cache_limit,
    )
    loader = StreamingDataLoader(
        data, batch_size=16, num_workers=args.workers, timeout=120 if args.workers else 0
    )
    with (args.out / f"rank{args.rank}.jsonl").open("a") as log:
        for epoch in range(args.epochs):
            loader.set_epoch(epoch)
            for batch in loader:
                ids = batch["id"].tolist()
                log.write(json.dumps({"epoch": epoch, "ids": ids}) + "\n")
                log.flush()
                if args.world_size > 1:
                    dist.all_reduce(torch.tensor([len(ids)]))
            log.write(json.dumps({"epoch": epoch, "stats": data.stats()}) + "\n")
            log.flush()
    if args.world_size > 1:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
