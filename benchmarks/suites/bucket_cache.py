"""The local cache (``cache_dir=``) of the ``bucket`` suite: two epochs with and without it.

    python -m benchmarks bucket_cache [--rows 200000 1000000] [--delay 25] [--out docs/benchmarks.md]

(``python -m benchmarks bucket`` runs it too, on its tables, unless ``--no-cache``.)
For each table size: ours with the bucket profile (k=0, batches of 256) reads two
epochs in one fresh process through the relay, without the cache and with an empty
one; then a second process reads an epoch over the warm cache (another run on the
machine); and the same two epochs from the table's copy on local disk, the same
plan (the reference the cache's second epoch is held to by issue 28) and the
local copy's default settings (the local profile: issue 36's reference). Each epoch's rows/s
covers its whole pass (the first includes construction); the relay's requests are
counted per epoch. The section ``bucket-cache`` of ``--out`` is replaced.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.cases.bucket_contenders import BATCH_SIZE, NUM_SPLITS, Where, write_tables
from benchmarks.harness import sections
from benchmarks.harness.s3 import Store, running_store

RUNS = (
    ("bucket", "bucket, no cache"),
    ("cache", "bucket, cache_dir (empty at the start)"),
    ("warm", "bucket, cache_dir (a second process, cache warm)"),
    ("local", "local disk copy, no cache (the same plan)"),
    ("local_default", "local disk copy, default settings (the local profile)"),
)


def probe(
    where: Where, cache_dir: str | None, relay: str | None, epochs: int, profile: str = "bucket"
) -> list[dict[str, Any]]:
    """Read ``epochs`` epochs in this process with ``profile`` ("auto": the URI's default);
    rows, seconds and relay requests of each."""
    import warnings

    from streaming import StreamingDataLoader, StreamingDataset

    warnings.simplefilter("ignore")
    store = Store("", relay) if relay else None
    found = []
    start = time.perf_counter()
    dataset = StreamingDataset(
        where.uri,
        storage_options=where.options,
        num_splits=NUM_SPLITS,
        storage_profile=profile,
        cache_dir=cache_dir,
    )
    for epoch in range(epochs):
        if store is not None and epoch:
            store.reset()
        dataset.set_epoch(epoch)
        rows = sum(len(batch["id"]) for batch in StreamingDataLoader(dataset, batch_size=BATCH_SIZE))
        seconds = time.perf_counter() - start
        relayed = store.stats() if store is not None else {}
        found.append(
            {
                "epoch": epoch,
                "rows": rows,
                "seconds": seconds,
                "requests": relayed.get("requests", 0),
                "rows_cached": dataset.stats()["rows_cached"],
            }
        )
        start = time.perf_counter()
    return found


def _run(
    where: Where, cache_dir: str | None, store: Store | None, epochs: int, profile: str = "bucket"
) -> list[dict[str, Any]]:
    if store is not None:
        store.reset()
    relay = store.relay_endpoint if store is not None else ""
    command = [sys.executable, "-m", "benchmarks", "bucket_cache", "--probe", json.dumps(asdict(where))]
    command += [cache_dir or "", relay, str(epochs), profile]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)
    if done.returncode:
        raise RuntimeError(done.stderr[-2000:])
    result: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure(
    local: Where, bucket: Where, store: Store, folder: str, rows: int, repeats: int
) -> dict[str, Any]:
    """Every run of one table size, ``repeats`` times (each cached run starts empty); per
    run and epoch the median rows/s and requests over the repeats."""
    runs: dict[str, list[list[dict[str, Any]]]] = {key: [] for key, _ in RUNS}
    for repeat in range(repeats):
        cache = os.path.join(folder, f"cache{rows}-{repeat}")
        runs["bucket"].append(_run(bucket, None, store, 2))
        runs["cache"].append(_run(bucket, cache, store, 2))
        runs["warm"].append(_run(bucket, cache, store, 1))
        runs["local"].append(_run(local, None, None, 2))
        runs["local_default"].append(_run(local, None, None, 2, "auto"))
        shutil.rmtree(cache, ignore_errors=True)
        for key, found in runs.items():
            print(f"  {rows} {key}: {found[-1]}", file=sys.stderr, flush=True)
    return {
        key: [_median([run[epoch] for run in found]) for epoch in range(len(found[0]))]
        for key, found in runs.items()
    }


def _rate(epoch: dict[str, Any]) -> float:
    return float(epoch["rows"] / epoch["seconds"]) if epoch["seconds"] else 0.0


def _median(epochs: list[dict[str, Any]]) -> dict[str, Any]:
    """One epoch's figures over the repeats: the median rate (as rows over seconds) and
    the median of each count."""
    middle = len(epochs) // 2
    by_rate = sorted(epochs, key=_rate)[middle]
    return {
        **by_rate,
        "requests": sorted(epoch["requests"] for epoch in epochs)[middle],
        "rows_cached": sorted(epoch["rows_cached"] for epoch in epochs)[middle],
    }


def render(measured: dict[int, dict[str, Any]], delay: float, repeats: int) -> str:
    """The Markdown section."""
    lines = [
        "## Object storage: the local cache",
        "",
        f"`python -m benchmarks bucket_cache` (also run by `python -m benchmarks bucket`): ours "
        f'with `storage_profile="bucket"`, k=0, batches of {BATCH_SIZE}, {NUM_SPLITS} splits, on '
        f"tables of 0.5 KiB rows in 16 fragments on moto's S3 server behind a relay adding "
        f"{delay:g} ms to every request. Two epochs in one fresh process; rows/s over each "
        "whole pass (epoch 1 includes construction); requests counted by the relay per epoch "
        "(epoch 1's include the cache's downloads, one request per file). Each figure is the "
        f"median of {repeats} runs (each cached run starts with an empty cache).",
        "",
        "| rows | run | epoch 1 rows/s | epoch 2 rows/s | epoch 1 requests / 1k rows "
        "| epoch 2 requests / 1k rows | epoch 2 rows from the cache |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for rows, found in measured.items():
        for key, label in RUNS:
            epochs = found[key]
            first, second = epochs[0], epochs[-1] if len(epochs) > 1 else None
            cells = [f"{rows:,}", label, f"{_rate(first):,.0f}"]
            cells.append(f"{_rate(second):,.0f}" if second else "")
            bucket = not key.startswith("local")
            per = [epoch["requests"] * 1000 / epoch["rows"] if bucket else None for epoch in epochs]
            cells.append("" if per[0] is None else f"{per[0]:.2f}")
            cells.append("" if second is None or per[-1] is None else f"{per[-1]:.2f}")
            cells.append(
                f"{second['rows_cached'] - first['rows_cached']:,}" if second else f"{first['rows_cached']:,}"
            )
            lines.append("| " + " | ".join(cells) + " |")
    lines += ["", *_targets(measured)]
    return "\n".join(lines)


def _targets(measured: dict[int, dict[str, Any]]) -> list[str]:
    lines = ["Targets (issue 28):", ""]
    for rows, found in measured.items():
        cache, bucket, local = found["cache"], found["bucket"], found["local"]
        second = _rate(cache[1]) / _rate(local[1]) if _rate(local[1]) else float("nan")
        default = found["local_default"][1]
        versus = _rate(cache[1]) / _rate(default) if _rate(default) else float("nan")
        requests = cache[1]["requests"] / cache[0]["requests"] if cache[0]["requests"] else float("nan")
        first = _rate(cache[0]) / _rate(bucket[0]) if _rate(bucket[0]) else float("nan")
        lines.append(
            f"- {rows:,} rows: epoch 2 with the cache {second:.2f}x the local disk's epoch 2 "
            f"(target 0.9x); its requests {requests:.2%} of epoch 1's (target at most 1%); "
            f"epoch 1 with the cache {first:.2f}x epoch 1 without (target 0.9x)."
        )
        lines.append(
            f"- {rows:,} rows (issue 36): epoch 2 with the cache {versus:.2f}x the local copy's epoch 2 "
            f"read with default settings ({_rate(cache[1]):,.0f} against {_rate(default):,.0f} rows/s; "
            f">= 0.9x): {'PASS' if versus >= 0.9 else '**FAIL**'}."
        )
    return lines


def run(args: argparse.Namespace, folder: str, store: Store, tables: dict[int, tuple[Where, Where]]) -> str:
    """Measure every table of ``tables`` (rows: (local, bucket)) and render the section."""
    store.set_delay(args.delay)
    measured = {
        rows: measure(local, bucket, store, folder, rows, args.repeats)
        for rows, (local, bucket) in tables.items()
    }
    return render(measured, args.delay, args.repeats)


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark (or, with ``--probe``, one process of it)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--probe":
        where, cache_dir, relay, epochs, profile = argv[1:6]
        result = probe(Where(**json.loads(where)), cache_dir or None, relay or None, int(epochs), profile)
        print(json.dumps(result), flush=True)
        return
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks bucket_cache", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--rows", type=int, nargs="+", default=[200_000, 1_000_000], help="table sizes")
    parser.add_argument("--delay", type=float, default=25.0, help="ms per request (25)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each, median (3)")
    parser.add_argument(
        "--out", type=Path, default=None, help="Markdown file whose 'bucket-cache' section is replaced"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder, running_store(os.path.join(folder, "server.log")) as store:
        tables = {rows: write_tables(folder, store, rows) for rows in args.rows}
        text = run(args, folder, store, tables)
    sections.publish(text, name="bucket-cache", out=args.out)
