"""Start-up with a ``filter`` on 1, 4 and 8 gloo ranks: one scan per job against one per rank.

    python -m benchmarks filterplan [--rows 4000000] [--repeats 3] [--out docs/benchmarks.md]

A narrow table (id int64, label int32 = id % 1000) of ``--rows`` rows in 16
fragments; ``filter="label < 500"`` matches half of them. For each world size, a
job of that many gloo ranks (``torch.multiprocessing.spawn``, all on this host)
builds ``StreamingDataset(uri, num_splits=8, filter=...)`` after a barrier, in
two ways:

- one plan per job: rank and world size from the process group, so rank 0 scans
  and broadcasts the filter index and every rank checks the plan;
- one plan per rank: ``rank=`` and ``world_size=`` passed, so every rank scans.

The time is from the barrier to the end of a barrier after construction (the
slowest rank), median of ``--repeats`` jobs. The section between the
``filterplan`` markers of ``--out`` is replaced.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from benchmarks.harness import sections
from benchmarks.harness.machine import load_average, machine_facts
from benchmarks.harness.tables import narrow_chunk, write_table

FILTER = "label < 500"
WORLDS = (1, 4, 8)
FRAGMENTS = 16
SPLITS = 8


def _rank(rank: int, world_size: int, port: int, uri: str, mode: str, out: Any) -> None:
    import torch
    import torch.distributed as dist

    from streaming import StreamingDataset

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=300),
    )
    import lance

    lance.dataset(uri).count_rows()  # Lance imported and the table's metadata read: not timed
    dist.barrier()
    start = time.perf_counter()
    if mode == "job":
        StreamingDataset(uri, num_splits=SPLITS, filter=FILTER)
    elif mode == "rank":
        StreamingDataset(uri, num_splits=SPLITS, filter=FILTER, rank=rank, world_size=world_size)
    else:  # no filter: what building a dataset costs the ranks of this host anyway
        StreamingDataset(uri, num_splits=SPLITS)
    dist.barrier()
    elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    if rank == 0:
        Path(out).write_text(repr(float(elapsed.item())))
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _job(world_size: int, uri: str, mode: str) -> float:
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "seconds")
        mp.spawn(_rank, args=(world_size, _free_port(), uri, mode, out), nprocs=world_size)
        return float(Path(out).read_text())


MODES = ("job", "rank", "none")


def measure(uri: str, repeats: int) -> dict[tuple[int, str], list[float]]:
    times: dict[tuple[int, str], list[float]] = {}
    for _ in range(repeats):  # interleaved, so a load change hits every case alike
        for world_size in WORLDS:
            for mode in MODES:
                if world_size == 1 and mode == "rank":
                    continue  # the same thing as "job": one rank scans
                times.setdefault((world_size, mode), []).append(_job(world_size, uri, mode))
    return times


def report(times: dict[tuple[int, str], list[float]], rows: int, repeats: int) -> str:
    facts = machine_facts()

    def median(world_size: int, mode: str) -> float:
        return statistics.median(times.get((world_size, mode), times[(world_size, "job")]))

    one = median(1, "job")
    lines = [
        "## Start-up with a filter, per job and per rank",
        "",
        f"`python -m benchmarks filterplan --rows {rows} --repeats {repeats}`: a table of {rows:,} rows "
        f"(id, label) in {FRAGMENTS} fragments, `filter={FILTER!r}` (half the rows), {SPLITS} splits; "
        "gloo ranks on this host; time from a barrier to the slowest rank's end of construction, "
        f"median of {repeats} jobs; {facts['cores']} cores ({facts['cpu']}), commit "
        f"{facts.get('commit', 'unknown')}, {facts['date']}; load average {load_average()}. "
        "One plan per job: rank and world size from the process group (rank 0 scans, broadcasts "
        "the index, every rank checks the plan); one plan per rank: `rank=` and `world_size=` "
        "passed, every rank scans; no filter: the same dataset without `filter`.",
        "",
        "| ranks | one plan per job (s) | vs 1 rank | one plan per rank (s) | vs 1 rank | no filter (s) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for world_size in WORLDS:
        job, rank, none = median(world_size, "job"), median(world_size, "rank"), median(world_size, "none")
        lines.append(
            f"| {world_size} | {job:.3f} | {job / one:.2f}x | {rank:.3f} | {rank / one:.2f}x | {none:.3f} |"
        )
    eight = median(8, "job") / one
    filter_part = (median(8, "job") - median(8, "none")) / (one - median(1, "none"))
    lines += [
        "",
        f"- Target: 8 ranks within 1.3x of 1 rank with one plan per job; measured {eight:.2f}x: "
        f"{'met' if eight <= 1.3 else '**not met**'}. "
        f"Without what building any dataset costs 8 ranks sharing {facts['cores']} cores (the "
        f"no-filter column), the filter's part at 8 ranks is {filter_part:.2f}x that of 1 rank.",
        "- With one plan per rank, the ranks of one host share its cores for W scans.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks filterplan", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--rows", type=int, default=4_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        table = write_table(folder, "t", rows=args.rows, fragments=FRAGMENTS, chunk=narrow_chunk)
        times = measure(table.uri, args.repeats)
    sections.publish(report(times, args.rows, args.repeats), name="filterplan", out=args.out)
