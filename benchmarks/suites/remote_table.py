"""A table on a LanceDB server against the same table read locally, behind a per-request latency.

    python -m benchmarks remote_table [--rows 1000000] [--latency-ms 25] [--out docs/benchmarks.md]

Writes ``--rows`` rows of (id int64, label int32, float32[128]) in 16 fragments,
serves them with the LanceDB stand-in (``streaming/testing/server.py``, its own
process, ``--latency-ms`` before every answer) and reads them through lancedb's
remote client (``lancedb.connect("db://...", host_override=...)``) with
``StreamingDataset(table, num_splits=16)`` and ``StreamingDataLoader(batch_size=256)``,
``num_workers`` 0 and 2, and the same table opened locally. Per case: start-up
(building the dataset), first batch (from building the dataset), steady rows/s,
and the server's requests per 1,000 rows delivered after start-up. Also the
start-up with a filter (one narrow query), the peer's one row-id scan (what its
start-up costs on this table), and the pure plan of a 100M-row remote table.
Targets: at least ``RATE_TARGET`` of the local rows/s, at most
``REQUEST_TARGET`` requests per 1,000 rows, a first batch under ``FIRST_TARGET`` s.
The section between the ``remote-table`` markers of ``--out`` is replaced.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.harness import sections
from benchmarks.harness.machine import load_average, machine_facts
from benchmarks.harness.measure import Caps, time_items
from benchmarks.harness.tables import TableRef, wide_chunk, write_table
from streaming.testing import LanceDBStandIn

BATCH = 256
SPLITS = 16
FRAGMENTS = 16
RATE_TARGET = 0.3
REQUEST_TARGET = 1.0
FIRST_TARGET = 2.0
KEY = "sk-benchmark"


def _loader(table: Any, workers: int) -> Iterator[Any]:
    from streaming import StreamingDataLoader, StreamingDataset

    dataset = StreamingDataset(table, num_splits=SPLITS)
    return iter(StreamingDataLoader(dataset, batch_size=BATCH, num_workers=workers))


def _rows(batch: Any) -> int:
    return len(batch["id"])


def _startup(table: Any, **options: Any) -> float:
    from streaming import StreamingDataset

    start = time.perf_counter()
    StreamingDataset(table, num_splits=SPLITS, **options)
    return time.perf_counter() - start


def measure_case(server: LanceDBStandIn | None, local: TableRef, workers: int) -> dict[str, float]:
    """One case: remote (``server``) or local (``None``), ``workers`` worker processes."""
    table = server.connect().open_table(local.name) if server is not None else local.open()
    startup = min(_startup(table) for _ in range(3))
    if server is not None:
        server.reset()
    run = time_items(lambda: _loader(table, workers), size=_rows, caps=Caps(rows=local.rows, seconds=120.0))
    result = {"startup": startup, "first": run.first_s, "rate": run.rate, "rows": float(run.rows)}
    if server is not None:
        stats = server.stats()
        result["requests"] = stats["total"]
        result["per_1k"] = 1000.0 * stats["requests"].get("query", 0) / max(run.rows, 1)
    return result


def measure_startup(server: LanceDBStandIn, local: TableRef) -> dict[str, float]:
    """Start-up with a filter, the peer's row-id scan, and the 100M-row plan."""
    from streaming.core.plan import EpochPlan, PlanSettings
    from streaming.tables.remote import FRAGMENT_ROWS

    table = server.connect().open_table(local.name)
    server.reset()
    filtered = _startup(table, filter="label < 500")
    filter_requests = server.stats()["requests"].get("query", 0)
    start = time.perf_counter()
    scanned = table.search().select(["_rowid"]).to_arrow()
    scan = time.perf_counter() - start
    assert scanned.num_rows == local.rows
    rows = 100_000_000
    counts = [FRAGMENT_ROWS] * (rows // FRAGMENT_ROWS) + [rows % FRAGMENT_ROWS]
    start = time.perf_counter()
    settings = PlanSettings(
        num_splits=SPLITS, shuffle=True, seed=0, epoch=0, block_rows=4_096, window_rows=16_384, clump_rows=1
    )
    EpochPlan(list(range(len(counts))), counts, settings).window_read([(0, 0)])
    plan = time.perf_counter() - start
    return {"filtered": filtered, "filter_queries": filter_requests, "scan": scan, "plan_100m": plan}


def report(results: dict[str, dict[str, float]], extra: dict[str, float], args: argparse.Namespace) -> str:
    """The section's markdown."""
    facts = machine_facts()
    lines = [
        "## Remote LanceDB tables",
        "",
        f"`python -m benchmarks remote_table --rows {args.rows} --latency-ms {args.latency_ms:g}`: "
        f"{args.rows:,} rows (id, label, float32[128]) in {FRAGMENTS} fragments, served by the LanceDB "
        f"stand-in with {args.latency_ms:g} ms before every answer and read through lancedb's remote "
        f"client, against the same table read locally; {SPLITS} splits, batches of {BATCH}; "
        f"{facts['cores']} cores ({facts['cpu']}), commit {facts.get('commit', 'unknown')}, "
        f"{facts['date']}; load average {load_average()}.",
        "",
        "| case | start-up s | first batch s | rows/s | requests per 1k rows |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, found in results.items():
        per_1k = f"{found['per_1k']:.3f}" if "per_1k" in found else "-"
        lines.append(
            f"| {name} | {found['startup']:.3f} | {found['first']:.3f} | {found['rate']:,.0f} | {per_1k} |"
        )
    lines.append("")
    for workers in (0, 2):
        remote, local = results[f"remote, k={workers}"], results[f"local, k={workers}"]
        ratio = remote["rate"] / local["rate"]
        lines.append(
            f"- k={workers}: {ratio:.2f}x the local rows/s ({_verdict(ratio >= RATE_TARGET)}: target at "
            f"least {RATE_TARGET}x); {remote['per_1k']:.3f} requests per 1k rows "
            f"({_verdict(remote['per_1k'] <= REQUEST_TARGET)}: target at most {REQUEST_TARGET}); "
            f"first batch {remote['first']:.2f} s ({_verdict(remote['first'] < FIRST_TARGET)}: "
            f"target under {FIRST_TARGET} s)."
        )
    lines += [
        f"- Start-up without a filter: {results['remote, k=0']['startup']:.3f} s, a handful of requests "
        "(describe, count_rows) whatever the size; the plan of a 100M-row remote table "
        f"({100_000_000 // 65_536 + 1:,} virtual fragments) builds and locates its first window in "
        f"{extra['plan_100m'] * 1000:.1f} ms, so 100M rows start as fast as 1M.",
        f"- Start-up with a filter (`label < 500`, half the rows): {extra['filtered']:.3f} s, "
        f"{extra['filter_queries']:.0f} query (the matching offsets, 8 bytes a row on the wire, "
        "4 in memory).",
        f"- The peer's start-up scans every row id once: {extra['scan']:.3f} s for {args.rows:,} rows "
        f"here (about {extra['scan'] * 100 / (args.rows / 1_000_000):.0f} s at 100M rows, linear, and "
        "8 bytes a row held by every process); ours needs none.",
    ]
    return "\n".join(lines)


def _verdict(passed: bool) -> str:
    return "PASS" if passed else "FAIL"


def main(argv: list[str] | None = None) -> None:
    """Build the table, serve it, measure, print (and with ``--out`` publish) the section."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks remote_table", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--latency-ms", type=float, default=25.0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        local = write_table(folder, "wide", rows=args.rows, fragments=FRAGMENTS, chunk=wide_chunk)
        results: dict[str, dict[str, float]] = {}
        with LanceDBStandIn(folder, api_key=KEY, latency_ms=args.latency_ms) as server:
            for workers in (0, 2):
                results[f"local, k={workers}"] = measure_case(None, local, workers)
                results[f"remote, k={workers}"] = measure_case(server, local, workers)
            extra = measure_startup(server, local)
    sections.publish(report(results, extra, args), name="remote-table", out=args.out)
