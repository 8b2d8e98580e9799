"""One gloo rank training on a remote table of the LanceDB stand-in, launched by tests/tables/test_remote.py.

The API key comes from the environment (``REMOTE_RANK_API_KEY``), as a job's secret
would. The rank logs the streaming logger at DEBUG, prints its dataset, saves a
checkpoint, and writes the ids it delivered, all under ``--out``: the test then
reads every file the run wrote, looking for the key.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import lancedb
import torch
import torch.distributed as dist

from streaming import StreamingDataLoader, StreamingDataset, gather_state_dict, save_state_dict

import rank


def main() -> None:
    parser = rank.parser()
    parser.add_argument("--host", required=True)
    parser.add_argument("--filter")
    args = parser.parse_args()
    out = Path(args.out)
    logging.basicConfig(filename=out / f"log{args.rank}.txt", level=logging.DEBUG)
    rank.join(args)
    database = lancedb.connect(
        "db://bench", api_key=os.environ["REMOTE_RANK_API_KEY"], host_override=args.host
    )
    data = StreamingDataset(
        database.open_table("train"),
        num_splits=4,
        shuffle_seed=9,
        block_rows=4,
        shuffle_buffer_size=48,
        filter=args.filter,
    )  # rank and world size from the process group
    print(repr(data), data.state_dict(), flush=True)
    loader = StreamingDataLoader(data, batch_size=2, num_workers=2)
    ids = []
    for step, batch in enumerate(loader):
        ids += batch["id"].tolist()
        count = torch.tensor([len(batch["id"])])
        dist.all_reduce(count)  # a rank with fewer steps would leave the others hanging here
        if step == 3:
            state = gather_state_dict(loader)
            if args.rank == 0:
                save_state_dict(state, out / "checkpoint.json")
                torch.save({"dataset": state}, out / "checkpoint.pt")
    (out / f"ids{args.rank}.json").write_text(json.dumps(ids))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
