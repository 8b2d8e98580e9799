"""Object storage, side by side, with a per-request delay: every contender, the frontier, mixing.

    python -m benchmarks bucket [--rows 200000 1000000] [--delays 0 25] [--out docs/benchmarks.md]
    python -m benchmarks bucket --rows 200000 --delays 25 --contenders ours_bucket ours_bucket_k2 \
        --no-frontier --no-mixing     # issue 36's object-storage lines only (a few minutes)

Starts moto's S3 server and a delaying relay (``benchmarks.harness.relay``), each in a
process of its own, writes tables of ``--rows`` rows x (id int64, label int32,
float32[128]) in 16 fragments to the server and to local disk, and measures each
contender over one whole pass (construction and first read included) in a fresh
process: locally and through the relay at each delay. The relay counts requests,
bytes and requests in flight. Then the frontier: ours at each (block_rows,
shuffle_buffer_size) of ``--blocks`` x ``--buffers`` at the last delay, on the
largest table. Then the local cache (the ``bucket_cache`` suite: two epochs with and
without ``cache_dir``, section ``bucket-cache``) at the last delay. Mixing comes
from ``benchmarks.cases.bucket_mixing`` (local label-sorted tables). The section
``bucket`` of ``--out`` is replaced. Its targets include issue 36's lines: k=0
rows/s and first batch against the raw scan, and k=2's requests per 1,000 rows
against k=0's (``ours_bucket_k2``: the URI's defaults with two worker processes).

The default sizes are the issue's table (200,000 rows, smaller than the remote
profile's shuffle buffer, so one window holds all of it) and one five times as
large, whose passes read several windows, as a billion-row table would.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.cases import bucket_mixing as mixing
from benchmarks.cases.bucket_contenders import FIXED, Where, write_tables
from benchmarks.cases.bucket_report import render
from benchmarks.harness import sections
from benchmarks.harness.s3 import Store, running_store
from benchmarks.suites import bucket_cache

MAIN = ("raw_scan", "ours_local", "ours_bucket", "ours_bucket_k2")
"""Contenders measured ``--repeats`` times (median); the others once."""
SLOW_IN_BUCKET = ("ours_local", "peer")
"""Contenders that take minutes for a pass of a table in a bucket: once, under ``--slow-cap``."""


@dataclass
class Result:
    """One contender at one setting: the probe's figures and the relay's counts."""

    key: str
    setting: str
    rows: int
    runs: list[dict[str, Any]]
    relay: dict[str, Any] = field(default_factory=dict)

    @property
    def probe(self) -> dict[str, Any]:
        """The run with the median rate."""
        return sorted(self.runs, key=lambda run: run["rows"] / run["seconds"])[len(self.runs) // 2]

    @property
    def rate(self) -> float:
        """Rows per second over the whole pass (median run)."""
        return float(self.probe["rows"] / self.probe["seconds"]) if self.probe["seconds"] else 0.0


def _probe(key: str, where: Where, cap_s: float) -> dict[str, Any]:
    command = [
        sys.executable,
        "-m",
        "benchmarks.cases.bucket_probe",
        key,
        json.dumps(asdict(where)),
        str(cap_s),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=cap_s + 600, check=False)
    lines = done.stdout.strip().splitlines()
    if done.returncode or not lines:
        return {"key": key, "rows": 0, "seconds": 0.0, "failed": done.stderr.strip()[-300:]}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def measure(
    key: str, setting: tuple[str, int], where: Where, store: Store | None, *, repeats: int, cap_s: float
) -> Result:
    """Probe ``key`` ``repeats`` times at ``setting`` (label, table rows); the relay's
    counts are those of the last run."""
    result = Result(key, setting[0], setting[1], [])
    for _ in range(repeats):
        if store is not None:
            store.reset()
        result.runs.append(_probe(key, where, cap_s))
        if store is not None:
            result.relay = store.stats()
            result.runs[-1]["requests"] = result.relay.get("requests", 0)
        print(f"  {setting} {key:<22} {result.runs[-1]}", file=sys.stderr, flush=True)
    return result


def _contenders(
    args: argparse.Namespace, store: Store, rows: int, local: Where, bucket: Where
) -> list[Result]:
    """Every fixed contender on the table of ``rows`` rows: locally, then at each delay."""
    results = []
    for delay in [None, *args.delays]:
        if delay is not None:
            store.set_delay(delay)
        setting = ("local" if delay is None else f"{delay:g} ms", rows)
        where, relay = (local, None) if delay is None else (bucket, store)
        for key in [key for key in FIXED if key in args.contenders or key == "raw_scan"]:
            slow = key in SLOW_IN_BUCKET and delay is not None
            repeats = args.repeats if key in MAIN and not slow else 1
            cap = args.slow_cap if slow else args.peer_cap if key == "peer" else args.cap
            results.append(measure(key, setting, where, relay, repeats=repeats, cap_s=cap))
    return results


def run(args: argparse.Namespace, folder: str, store: Store) -> dict[str, Any]:
    """Every measurement of the benchmark, as plain data for the report."""
    results: list[Result] = []
    tables = {}
    for rows in args.rows:
        local, bucket = tables[rows] = write_tables(folder, store, rows)
        results += _contenders(args, store, rows, local, bucket)
    cache = (
        None
        if args.no_cache
        else bucket_cache.run(
            argparse.Namespace(delay=args.delays[-1], repeats=args.repeats), folder, store, tables
        )
    )
    setting = (f"{args.delays[-1]:g} ms", args.rows[-1])
    store.set_delay(args.delays[-1])
    frontier = [
        measure(f"ours:{block}:{buffer}", setting, bucket, store, repeats=1, cap_s=args.cap)
        for block in ([] if args.no_frontier else args.blocks)
        for buffer in args.buffers
    ]
    mixes: dict[str, dict[str, float]] = {}
    if not args.no_mixing:
        sorted_tables = mixing.write_sorted(os.path.join(folder, "sorted"), large_rows=args.mixing_rows)
        mixes = _mixing(sorted_tables, args)
    return {"results": results, "frontier": frontier, "mixing": mixes, "cache": cache}


def _mixing(tables: mixing.SortedTables, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    from streaming.core.profiles import PROFILES

    local, remote = PROFILES["local"], PROFILES["bucket"]
    found = {
        "raw_scan": mixing.ratios(mixing.scan_labels, tables, splits=False),
        "ours_local": mixing.ratios(mixing.ours_labels(local.block_rows, local.shuffle_buffer_size), tables),
        "ours_bucket": mixing.ratios(
            mixing.ours_labels(remote.block_rows, remote.shuffle_buffer_size), tables
        ),
        "peer": mixing.ratios(mixing.peer_labels, tables),
        "lance_fragments": mixing.ratios(
            mixing.lance_torch_labels("ShardedFragmentSampler"), tables, splits=False
        ),
        "lance_batches": mixing.ratios(
            mixing.lance_torch_labels("ShardedBatchSampler"), tables, splits=False
        ),
    }
    for block in args.blocks:
        for buffer in args.buffers:
            found[f"ours:{block}:{buffer}"] = mixing.ratios(mixing.ours_labels(block, buffer), tables)
    return found


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks bucket", description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[200_000, 1_000_000], help="table sizes")
    parser.add_argument("--delays", type=float, nargs="+", default=[0.0, 25.0], help="ms per request (0 25)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of the main contenders, median (3)")
    parser.add_argument("--cap", type=float, default=90.0, help="seconds after which a pass stops (90)")
    parser.add_argument("--peer-cap", type=float, default=60.0, help="the same for the peer locally (60)")
    parser.add_argument(
        "--slow-cap",
        type=float,
        default=30.0,
        help="the same for the local defaults and the peer on the bucket (30)",
    )
    parser.add_argument("--raw", type=Path, default=None, help="also write every measurement here (JSON)")
    parser.add_argument("--blocks", type=int, nargs="+", default=[256, 1024, 2048, 4096, 8192])
    parser.add_argument("--buffers", type=int, nargs="+", default=[32_768, 262_144, 1_048_576])
    parser.add_argument(
        "--mixing-rows", type=int, default=mixing.LARGE[0], help="rows of the 1,000-label table"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="Markdown file whose 'bucket' section is replaced"
    )
    parser.add_argument(
        "--no-cache", action="store_true", help="skip the local cache's runs (the bucket_cache suite)"
    )
    parser.add_argument(
        "--contenders",
        nargs="+",
        choices=list(FIXED),
        default=list(FIXED),
        help="only these contenders and the raw scan (default: all)",
    )
    parser.add_argument("--no-frontier", action="store_true", help="skip the frontier's points")
    parser.add_argument("--no-mixing", action="store_true", help="skip the mixing measurements")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and publish its section."""
    args = parse_args(argv)
    with tempfile.TemporaryDirectory() as folder, running_store(os.path.join(folder, "server.log")) as store:
        found = run(args, folder, store)
    text = render(found, args)
    sections.publish(text, name="bucket", out=args.out)
    if found["cache"] is not None:
        sections.publish(found["cache"], name="bucket-cache", out=args.out)
    if args.raw is not None:
        plain = {**found, "results": [asdict(r) for r in found["results"]]}
        plain["frontier"] = [asdict(r) for r in found["frontier"]]
        args.raw.write_text(json.dumps(plain, indent=1))
