"""Blob columns: images decoded in workers, against a plain column and files on disk; memory.

    python -m benchmarks blobs [--images 600] [--workers 0,2,4] [--seconds 20] [--repeats 3]
                               [--memory-blobs 2000] [--blob-mib 8] [--out docs/benchmarks.md]

Speed: the same PNG and JPEG images (a few hundred KiB each, seeded noise over
colour ramps) stored three ways and decoded with Pillow to RGB in the loader's
workers (k = 0, 2, 4), each case in a fresh interpreter:

- ``blob``: a Lance table whose ``img`` column is a blob column (read as bytes);
- ``plain``: the same bytes in a plain ``large_binary`` column, read with the same
  plan (the blob table's default, given explicitly to both);
- ``files``: one file per image on local disk, read by a map-style torch
  ``Dataset`` through a plain ``DataLoader(shuffle=True)`` (what users do today).

Rows/s count the whole run, first batch included (the rate after it and the start-up
are shown apart). The target: the blob column within 0.8x of the plain column's
rows/s at every k.

Memory: a table of ``--memory-blobs`` blobs of ``--blob-mib`` MiB streamed once with
default plan settings (sized by the blobs) through ``StreamingDataLoader(k=2)``,
each sample's bytes touched; the peak resident memory of the trainer and of its
workers (their sum sampled every 20 ms, and each process's own high-water mark)
against the formula of docs/multimodal.md. The section between the ``blobs``
markers of ``--out`` is replaced.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.cases.blob_probe import (
    BATCH,
    FRAGMENTS,
    KINDS,
    PLAN,
    SPLITS,
    THUMB,
    images,
    memory_probe,
    speed_probe,
    write_big_table,
    write_tables,
)
from benchmarks.harness import sections
from benchmarks.harness.machine import load_average, machine_facts
from benchmarks.harness.process import run_json


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def measure_speed(args: argparse.Namespace, work: str) -> dict[tuple[str, int], dict[str, Any]]:
    """Every contender at every worker count, each run in a fresh interpreter, ``--repeats``
    times in a rotating order (a load spike of the machine hits a different one each
    time); each case keeps its medians."""
    locations = write_tables(work, args.images)
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for workers in args.workers:
        for repeat in range(args.repeats):
            for kind in KINDS[repeat % len(KINDS) :] + KINDS[: repeat % len(KINDS)]:
                spec = {
                    "kind": kind,
                    "workers": workers,
                    "location": locations[kind],
                    "images": args.images,
                    "seconds": args.seconds,
                }
                found = run_json("benchmarks", "blobs", "--probe", json.dumps(spec), timeout=args.timeout)
                runs.setdefault((kind, workers), []).append(found)
                _log(f"{kind}, k={workers}, repeat {repeat + 1}: {found}")
    return {key: _medians(found) for key, found in runs.items()}


def _medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One case's median rates and first batch over its repeats (its first error, if any)."""
    failed = [run for run in runs if "error" in run]
    if failed:
        return failed[0]
    return {
        "whole": float(np.median([whole_rate(run) for run in runs])),
        "rate": float(np.median([run["rate"] for run in runs])),
        "first_s": float(np.median([run["first_s"] for run in runs])),
    }


def measure_memory(args: argparse.Namespace, work: str) -> dict[str, Any]:
    """The big table streamed once with k=2 in a fresh interpreter."""
    blob_bytes = args.blob_mib << 20
    started = time.perf_counter()
    uri = write_big_table(work, args.memory_blobs, blob_bytes)
    _log(f"wrote {args.memory_blobs} blobs of {args.blob_mib} MiB in {time.perf_counter() - started:.0f} s")
    spec = {"uri": uri, "blob_bytes": blob_bytes, "batch": 8}
    found = run_json("benchmarks", "blobs", "--memory-probe", json.dumps(spec), timeout=args.timeout * 4)
    found.update(blobs=args.memory_blobs, blob_mib=args.blob_mib, batch=8)
    _log(f"memory: {found}")
    return found


def whole_rate(run: dict[str, Any]) -> float:
    """Rows/s from building the loader to the last row, the first batch included (a loader
    that transforms ahead does that work before its first batch)."""
    steady_s = (run["rows"] - BATCH) / run["rate"] if run["rate"] else 0.0
    seconds = run["first_s"] + steady_s
    return run["rows"] / seconds if seconds > 0 else 0.0


def _speed_lines(results: dict[tuple[str, int], dict[str, Any]], workers: list[int]) -> list[str]:
    lines = [
        "| k | blob column rows/s | plain column rows/s | files + torch Dataset rows/s "
        "| after the first batch: blob / plain / files | first batch (s): blob / plain / files "
        "| blob / plain | target | verdict |",
        "| ---: | ---: | ---: | ---: | --- | --- | ---: | --- | --- |",
    ]
    for k in workers:
        runs = [results[(kind, k)] for kind in KINDS]
        if any("error" in run for run in runs):
            errors = "; ".join(str(run.get("error")) for run in runs if "error" in run)
            lines.append(f"| {k} | failed: {errors} | | | | | | | |")
            continue
        blob, plain, files = (run["whole"] for run in runs)
        ratio = blob / plain if plain else 0.0
        steady = " / ".join(f"{run['rate']:,.0f}" for run in runs)
        first = " / ".join(f"{run['first_s']:.2f}" for run in runs)
        verdict = "PASS" if ratio >= 0.8 else "FAIL"
        rates = f"{blob:,.0f} | {plain:,.0f} | {files:,.0f}"
        lines.append(f"| {k} | {rates} | {steady} | {first} | {ratio:.2f}x | >= 0.8x | {verdict} |")
    return lines


def _memory_lines(found: dict[str, Any]) -> list[str]:
    if "error" in found:
        return [f"Memory run failed: {found['error']}"]
    blob_mib = found["blob_mib"]
    windows_mib = 2 * found["window_rows"] * 2 * blob_mib  # two windows of both splits (S = 2, W = 1)
    table_gib = found["blobs"] * blob_mib / 1024
    children = ", ".join(f"{mib:,.0f}" for mib in found["child_peaks_mib"])
    return [
        f"A table of {found['blobs']:,} blobs of {blob_mib} MiB ({table_gib:,.1f} GiB), default plan "
        f"settings (sized by the blobs: blocks of {found['block_rows']} row(s), windows of "
        f"{found['window_rows']} rows per split), 2 splits, `StreamingDataLoader(batch_size="
        f"{found['batch']}, num_workers=2)`, streamed once ({found['rows']:,} rows in "
        f"{found['seconds']:.0f} s), every blob checked in the trainer.",
        "",
        "| baseline RSS (MiB) | peak RSS, trainer + workers summed (MiB) | trainer's own peak (MiB) "
        "| each child's own peak (MiB) | the formula's blob bytes: 2 windows of every split (MiB) |",
        "| ---: | ---: | ---: | --- | ---: |",
        f"| {found['baseline_mib']:,.0f} | {found['tree_peak_mib']:,.0f} | {found['trainer_peak_mib']:,.0f} "
        f"| {children} | {windows_mib:,.0f} |",
    ]


def section(
    speed: dict[tuple[str, int], dict[str, Any]],
    memory: dict[str, Any] | None,
    args: argparse.Namespace,
    facts: dict[str, Any],
) -> str:
    """The Markdown section: speed per worker count, then memory (``facts``: taken at the start)."""
    sizes = [len(image) >> 10 for image in images()]
    lines = [
        "## Blob columns",
        "",
        f"`{args.command}` ({facts['date']}, commit {facts['commit']}, {facts['cores']} cores, load "
        f"average {facts['load']} at the start, {load_average()} at the end). {args.images} images "
        f"({min(sizes)}-{max(sizes)} KiB, PNG 384x384 and JPEG 768x768, {len(sizes)} distinct ones "
        f"cycled), {FRAGMENTS} fragments, {SPLITS} splits, batches of {BATCH}, both tables read with the "
        f"blob table's default plan (`block_rows={PLAN[0]}, shuffle_buffer_size={PLAN[1]}`, given to both); "
        "each image decoded to RGB "
        f"with Pillow and shrunk to {THUMB}x{THUMB} in the loader's workers (the `transform` of ours, "
        "`__getitem__` of the files' torch `Dataset`, read with `DataLoader(shuffle=True)`). Each case "
        f"runs in a fresh interpreter through every image (or the time cap), {args.repeats} times in a "
        "rotating order, medians shown; rows/s count from building the "
        "loader to the last row, the first batch included (ours transforms ahead of the loop, so a rate "
        "after the first batch leaves out work done before it; shown for reference).",
        "",
        *_speed_lines(speed, args.workers),
    ]
    if memory is not None:
        lines += ["", *_memory_lines(memory)]
    return "\n".join(lines)


def _workers(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def main(argv: list[str] | None = None) -> int:
    """Measure, print the section, and replace it in ``--out`` when given."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m benchmarks blobs", description=__doc__)
    parser.add_argument("--images", type=int, default=600, help="images in each of the three stores")
    parser.add_argument("--workers", type=_workers, default=[0, 2, 4], help="worker counts, e.g. 0,2,4")
    parser.add_argument("--seconds", type=float, default=20.0, help="steady-state time cap per case")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each case (medians are shown)")
    parser.add_argument("--memory-blobs", type=int, default=2_000, help="blobs of the memory table (0: skip)")
    parser.add_argument("--blob-mib", type=int, default=8, help="MiB per blob of the memory table")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per fresh-process case")
    parser.add_argument("--out", type=Path, default=None, help="Markdown file whose section is replaced")
    parser.add_argument("--probe", help=argparse.SUPPRESS)
    parser.add_argument("--memory-probe", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe is not None:
        print(json.dumps(speed_probe(json.loads(args.probe))))
        return 0
    if args.memory_probe is not None:
        print(json.dumps(memory_probe(json.loads(args.memory_probe))))
        return 0
    args.command = " ".join(["python -m benchmarks blobs", *argv])
    facts = machine_facts()
    with tempfile.TemporaryDirectory(prefix="lance-bench-blobs-") as work:
        speed = measure_speed(args, work)
    memory = None
    if args.memory_blobs:
        with tempfile.TemporaryDirectory(prefix="lance-bench-blobs-memory-") as work:
            memory = measure_memory(args, work)
    sections.publish(section(speed, memory, args, facts), name="blobs", out=args.out)
    return 0
