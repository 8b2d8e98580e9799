"""The merged state of a large job: its JSON size, and the time of gather_state_dict on gloo.

    python -m benchmarks state_size [--rows 10000000] [--gather-ranks 16]

Size: for each (ranks, DataLoader workers, splits) of ``CASES``, every rank's
``StreamingDataset`` (explicit ``rank`` and ``world_size``, in this process) delivers
half of its share of a ``--rows`` table (at least a batch), ``state_dict()`` is taken from each, and
``StreamingDataset.merge_state_dicts`` merges them; the size is that of the JSON that
``save_state_dict`` writes. The state holds one count per split and nothing per
DataLoader worker, so the workers enter only through ``num_splits`` (a multiple of
ranks x workers).

Time: ``--gather-ranks`` processes (``torch.multiprocessing.spawn``) form a gloo group
on 127.0.0.1; each delivers half of its share, then all call
``gather_state_dict(dataset)`` ``REPEATS`` times; printed are rank 0's median and
slowest call, after one call to warm up.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import tempfile
import time
from pathlib import Path

import lance
import numpy as np
import pyarrow as pa
import torch.distributed as dist
import torch.multiprocessing as mp

from streaming import StreamingDataLoader, StreamingDataset, gather_state_dict

CASES = [(64, 8, 512), (1024, 8, 8192)]
"""(ranks, DataLoader workers a rank, num_splits)."""
REPEATS = 10
SEED = 1


def write_table(path: Path, rows: int) -> str:
    uri = str(path / "ids.lance")
    lance.write_dataset(pa.table({"id": np.arange(rows, dtype=np.int64)}), uri, max_rows_per_file=1 << 20)
    return uri


def half_delivered(uri: str, *, rank: int, world_size: int, num_splits: int) -> StreamingDataset:
    """A rank's dataset after it delivered half of its share (whole batches of 256, at least one)."""
    dataset = StreamingDataset(
        uri, num_splits=num_splits, rank=rank, world_size=world_size, shuffle_seed=SEED
    )
    batches = max(1, len(dataset) // 2 // 256)
    for index, _ in enumerate(StreamingDataLoader(dataset, batch_size=256)):
        if index + 1 == batches:
            break
    return dataset


def merged_size(uri: str, ranks: int, num_splits: int) -> tuple[int, float]:
    """Bytes of the merged state's JSON, and seconds of merge_state_dicts."""
    states = [
        half_delivered(uri, rank=r, world_size=ranks, num_splits=num_splits).state_dict()
        for r in range(ranks)
    ]
    start = time.perf_counter()
    merged = StreamingDataset.merge_state_dicts(states)
    took = time.perf_counter() - start
    return len(json.dumps(merged).encode()), took


def _gather_rank(rank: int, world_size: int, uri: str, num_splits: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    dataset = half_delivered(uri, rank=rank, world_size=world_size, num_splits=num_splits)
    gather_state_dict(dataset)  # warm-up: the first collective sets up the connections
    took = []
    for _ in range(REPEATS):
        dist.barrier()
        start = time.perf_counter()
        gather_state_dict(dataset)
        took.append(time.perf_counter() - start)
    if rank == 0:
        Path(out).write_text(json.dumps(took))
    dist.destroy_process_group()


def gather_times(uri: str, ranks: int, num_splits: int, scratch: Path) -> list[float]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = scratch / f"gather-{ranks}-{num_splits}.json"
    mp.spawn(_gather_rank, args=(ranks, uri, num_splits, port, str(out)), nprocs=ranks)
    return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> None:
    """Print a table of merged state sizes, then the gather times."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks state_size", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--gather-ranks", type=int, default=16)
    parser.add_argument("--gather-splits", type=int, nargs="+", default=[128, 1024])
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        uri = write_table(Path(folder), args.rows)
        print(f"table: {args.rows:,} rows; each rank half way through its share\n")
        print("| ranks | DataLoader workers | num_splits | merged state JSON | merge_state_dicts |")
        print("| ---: | ---: | ---: | ---: | ---: |")
        for ranks, workers, splits in CASES:
            size, took = merged_size(uri, ranks, splits)
            print(
                f"| {ranks:,} | {workers} | {splits:,} | {size / 1024:,.1f} KiB | {took * 1000:,.0f} ms |",
                flush=True,
            )
        print()
        for splits in args.gather_splits:
            took = gather_times(uri, args.gather_ranks, splits, Path(folder))
            print(
                f"gather_state_dict, {args.gather_ranks} ranks on gloo, {splits:,} splits: "
                f"median {statistics.median(took) * 1000:.1f} ms, slowest {max(took) * 1000:.1f} ms "
                f"of {REPEATS} calls",
                flush=True,
            )
