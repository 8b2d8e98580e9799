"""One rank of a gloo job that only builds a dataset with a ``filter`` and reports its plan.

Writes ``OUT/rank<r>.json``: how many filter scans this process ran, the table
version, the ids this rank would deliver over the epoch, and the construction
error if any (``--version-on-rank1`` makes the ranks open different versions,
``--seed-on-rank1`` plan with different seeds).
"""

from __future__ import annotations

import json

import torch.distributed as dist

import streaming.tables.source
from streaming import StreamingDataLoader, StreamingDataset

import rank

scans = 0
original = streaming.tables.source.build_filter_index


def counted(*args, **kwargs):
    global scans
    scans += 1
    return original(*args, **kwargs)


def main() -> None:
    parser = rank.parser()
    parser.add_argument("--uri", required=True)
    parser.add_argument("--filter", required=True)
    parser.add_argument("--version-on-rank1", type=int, default=None)
    parser.add_argument("--seed-on-rank1", type=int, default=4)
    args = parser.parse_args()
    streaming.tables.source.build_filter_index = counted
    rank.join(args)
    report: dict = {}
    try:
        version = args.version_on_rank1 if args.rank == 1 else None
        seed = args.seed_on_rank1 if args.rank == 1 else 4
        settings = {"num_splits": 6, "shuffle_seed": seed, "filter": args.filter, "version": version}
        data = StreamingDataset(args.uri, **settings)
        report["version"] = data.state_dict()["table"]["version"]
        loader = StreamingDataLoader(data, batch_size=4, num_workers=2, timeout=60)  # workers get the index
        report["ids"] = [int(i) for batch in loader for i in batch["id"].tolist()]
        state = data.state_dict()
        again = StreamingDataset(args.uri, **settings)
        before = scans
        again.load_state_dict(state)  # the same version: its filter index is reused
        report["scans_on_load"] = scans - before
    except ValueError as error:
        report["error"] = str(error)
    report["scans"] = scans
    (args.out / f"rank{args.rank}.json").write_text(json.dumps(report))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
