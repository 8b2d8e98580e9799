"""Workers without arithmetic: the first batch with workers against k=0's, and how evenly k workers read.

    python -m benchmarks workerstart [--narrow-rows 200000] [--wide-rows 3000] [--server-rows 100000]
                                     [--latency-ms 25] [--repeats 3] [--out docs/benchmarks.md]

**First batch.** Three tables: narrow rows (id, label, float32[128]); 100 KiB rows
(id and a plain ``binary`` column of 100 KiB); narrow rows served by the project's
LanceDB server stand-in with ``--latency-ms`` per request. Every case runs in a fresh
interpreter (``cases/start_probe.py``) that has imported what a trainer imports
before it builds its loader, then times building ``StreamingDataset(table)`` and
``StreamingDataLoader(dataset, batch_size=256, num_workers=k)`` (default settings,
so each table's default ``num_splits``, printed) to the first batch, and the rest of
the epoch (every id checked once): k=0, k=2 (the trainer draws the first batches while its workers start, the
default), and k=2 with ``head_start=False`` (the workers start first, as torch's
DataLoader does). Medians of ``--repeats`` alternating runs of the first batch and
of the epoch end to end (building the loader to the epoch's last batch). The target:
k=2's first batch within 1.5x of k=0's.

**Balance.** One epoch of a 100,000-row local table with ``num_splits=1`` (the
hardest case: one split for k workers) at every k from 1 to 8 (``head_start=False``,
so every row is a worker's):
``rows_read_worker_<w>`` of ``dataset.stats()``; the target is the busiest worker at
most 1.25x the average, with every row read once.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from benchmarks.harness import sections
from benchmarks.harness.machine import load_average, machine_facts
from benchmarks.harness.process import run_json
from benchmarks.harness.tables import TableRef, wide_chunk, write_table
from streaming.testing import LanceDBStandIn

BATCH = 256
KEY = "sk-benchmark"
FIRST_TARGET = 1.5
BALANCE_TARGET = 1.25
CASES = (("k=0", 0, True), ("k=2", 2, True), ("k=2, head_start=False", 2, False))


def binary_chunk(start: int, count: int) -> pa.Table:
    """Rows of (id int64, img binary of 100 KiB, the id in its first 8 bytes)."""
    ids = np.arange(start, start + count, dtype=np.int64)
    values = np.random.default_rng(start).integers(0, 255, (count, 100 << 10), dtype=np.uint8)
    values[:, :8] = ids.view(np.uint8).reshape(count, 8)
    return pa.table({"id": ids, "img": pa.array([row.tobytes() for row in values], type=pa.binary())})


def first_batches(source: dict[str, Any], rows: int, repeats: int) -> dict[str, dict[str, float]]:
    """Median first batch and rate of each case, the cases alternating ``repeats`` times."""
    runs: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in CASES}
    for _ in range(repeats):
        for name, workers, ahead in CASES:
            spec = {**source, "workers": workers, "head_start": ahead, "batch": BATCH, "rows": rows}
            result = run_json("benchmarks.cases.start_probe", json.dumps(spec), timeout=600)
            if "error" in result:
                raise RuntimeError(f"{name}: {result['error']}")
            result["end"] = result["first"] + (result["rows"] - BATCH) / result["rate"]
            runs[name].append(result)
    return {
        name: {
            key: statistics.median(run[key] for run in found)
            for key in ("first", "rate", "end", "num_splits")
        }
        for name, found in runs.items()
    }


def balance(table: TableRef) -> dict[int, list[float]]:
    """Rows each worker read in one epoch, for k = 1 .. 8."""
    from streaming import StreamingDataLoader, StreamingDataset

    found = {}
    for workers in range(1, 9):
        dataset = StreamingDataset(table.open(), shuffle_seed=1, num_splits=1)
        loader = StreamingDataLoader(dataset, batch_size=BATCH, num_workers=workers, head_start=False)
        delivered = sum(len(batch["id"]) for batch in loader)
        stats = dataset.stats()
        read = [stats.get(f"rows_read_worker_{worker}", 0.0) for worker in range(workers)]
        if sum(read) != delivered:
            raise AssertionError(f"k={workers}: the workers read {sum(read)} rows for {delivered} delivered")
        found[workers] = read
    return found


def report(first: dict[str, dict[str, dict[str, float]]], shares: dict[int, list[float]], args: Any) -> str:
    facts = machine_facts()
    lines = [
        f"`python -m benchmarks workerstart --repeats {args.repeats}` ({facts['date']}, commit "
        f"{facts['commit']}, {facts['cores']} cores, torch {facts['torch']}, pylance {facts['pylance']}; "
        f"load average {load_average()}): batches of {BATCH}, default settings (each table's default "
        "`num_splits`: S in the table's row).",
        "",
        "| table | k=0 first batch (s) | k=2 first batch (s) | vs k=0 | target | "
        "k=2, head_start=False (s) | epoch end to end (s), k=0 / k=2 / k=2 no head start |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for table, cases in first.items():
        zero, two, late = cases["k=0"], cases["k=2"], cases["k=2, head_start=False"]
        ratio = two["first"] / zero["first"]
        verdict = "PASS" if ratio <= FIRST_TARGET else "FAIL"
        rates = " / ".join(f"{case['end']:.2f}" for case in (zero, two, late))
        lines.append(
            f"| {table}, S = {zero['num_splits']:.0f} | {zero['first']:.2f} | {two['first']:.2f} | "
            f"{ratio:.2f}x | <= {FIRST_TARGET}x "
            f"{verdict} | {late['first']:.2f} | {rates} |"
        )
    lines += ["", "| k | rows read per worker | busiest / average | target |", "| --- | --- | --- | --- |"]
    for workers, read in shares.items():
        ratio = max(read) / (sum(read) / len(read))
        verdict = "PASS" if ratio <= BALANCE_TARGET else "FAIL"
        counts = ", ".join(f"{value:,.0f}" for value in read)
        lines.append(f"| {workers} | {counts} | {ratio:.3f}x | <= {BALANCE_TARGET}x {verdict} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Write the tables, serve one, measure, print (and with ``--out`` publish) the section."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks workerstart", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--narrow-rows", type=int, default=200_000)
    parser.add_argument("--wide-rows", type=int, default=3_000)
    parser.add_argument("--server-rows", type=int, default=100_000)
    parser.add_argument("--latency-ms", type=float, default=25.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        narrow = write_table(folder, "narrow", rows=args.narrow_rows, fragments=16, chunk=wide_chunk)
        wide = write_table(folder, "wide", rows=args.wide_rows, fragments=4, chunk=binary_chunk)
        served = write_table(folder, "served", rows=args.server_rows, fragments=8, chunk=wide_chunk)
        first = {
            f"{args.narrow_rows:,} narrow rows": first_batches(
                {"table": narrow.to_json()}, args.narrow_rows, args.repeats
            ),
            f"{args.wide_rows:,} rows of 100 KiB": first_batches(
                {"table": wide.to_json()}, args.wide_rows, args.repeats
            ),
        }
        with LanceDBStandIn(folder, api_key=KEY, latency_ms=args.latency_ms) as server:
            source = {"server": {"uri": server.uri, "host": server.host, "key": KEY, "name": served.name}}
            name = f"{args.server_rows:,} narrow rows on a LanceDB server at {args.latency_ms:.0f} ms"
            first[name] = first_batches(source, args.server_rows, args.repeats)
        shares = balance(write_table(folder, "balance", rows=100_000, fragments=8, chunk=wide_chunk))
    sections.publish(report(first, shares, args), name="workerstart", out=args.out)
