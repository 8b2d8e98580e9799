"""The default num_splits: what a run that moves between world sizes costs against one split per rank.

    python -m benchmarks defaultsplits [--narrow-rows 400000] [--wide-rows 17000] [--repeats 3]
                                       [--out docs/benchmarks.md]

Left out, ``num_splits`` is chosen so that the world sizes jobs move between divide it
(``streaming/core/splits.py``): 192 for the narrow table here, 16 for the 100 KiB one
(1,024 rows a split at least). Each case runs in a fresh interpreter
(``cases/start_probe.py``): ``StreamingDataset(table)`` with the default against
``num_splits=1`` (the old default), at k=0 and k=2 (the default head start), batches of
256; the first batch, the rate after it (every planned id checked once) and the
trainer's peak RSS (its own process; the workers are the fork server's children).
Medians of ``--repeats`` alternating runs. The question: does the default cost speed
or memory against one split?
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.harness import sections
from benchmarks.harness.machine import load_average, machine_facts
from benchmarks.harness.process import run_json
from benchmarks.harness.tables import wide_chunk, write_table
from benchmarks.suites.workerstart import binary_chunk

BATCH = 256
CASES = (("default", None, 0), ("num_splits=1", 1, 0), ("default", None, 2), ("num_splits=1", 1, 2))
KEYS = ("first", "rate", "trainer_mb", "num_splits")


def measure(table: dict[str, Any], rows: int, repeats: int) -> dict[tuple[str, int], dict[str, float]]:
    """Median of each key for each (splits, workers) case, the cases alternating."""
    runs: dict[tuple[str, int], list[dict[str, float]]] = {(name, k): [] for name, _, k in CASES}
    for _ in range(repeats):
        for name, splits, workers in CASES:
            spec = {"table": table, "workers": workers, "head_start": True, "batch": BATCH, "rows": rows}
            if splits is not None:
                spec["num_splits"] = splits
            result = run_json("benchmarks.cases.start_probe", json.dumps(spec), timeout=900)
            if "error" in result:
                raise RuntimeError(f"{name}, k={workers}: {result['error']}")
            runs[(name, workers)].append(result)
    return {
        case: {key: statistics.median(run[key] for run in found) for key in KEYS}
        for case, found in runs.items()
    }


def report(found: dict[str, dict[tuple[str, int], dict[str, float]]], args: Any) -> str:
    facts = machine_facts()
    lines = [
        f"`python -m benchmarks defaultsplits --repeats {args.repeats}` ({facts['date']}, commit "
        f"{facts['commit']}, {facts['cores']} cores, torch {facts['torch']}, pylance {facts['pylance']}; "
        f"load average {load_average()}): batches of {BATCH}, medians.",
        "",
        "| table | k | S (default) | first batch (s): default / S=1 | rows/s after it: default / S=1 (ratio) "
        "| trainer's peak RSS (MiB): default / S=1 |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for table, cases in found.items():
        for workers in (0, 2):
            ours, one = cases[("default", workers)], cases[("num_splits=1", workers)]
            lines.append(
                f"| {table} | {workers} | {ours['num_splits']:.0f} | "
                f"{ours['first']:.2f} / {one['first']:.2f} | "
                f"{ours['rate']:,.0f} / {one['rate']:,.0f} ({ours['rate'] / one['rate']:.2f}x) | "
                f"{ours['trainer_mb']:.0f} / {one['trainer_mb']:.0f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Write the tables, measure every case, print (and with ``--out`` publish) the section."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks defaultsplits", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--narrow-rows", type=int, default=400_000)
    parser.add_argument("--wide-rows", type=int, default=17_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        narrow = write_table(folder, "narrow", rows=args.narrow_rows, fragments=16, chunk=wide_chunk)
        name = f"{args.narrow_rows:,} narrow rows"
        found = {name: measure(narrow.to_json(), args.narrow_rows, args.repeats)}
        wide = write_table(folder, "wide", rows=args.wide_rows, fragments=8, chunk=binary_chunk)
        found[f"{args.wide_rows:,} rows of 100 KiB"] = measure(wide.to_json(), args.wide_rows, args.repeats)
    sections.publish(report(found, args), name="defaultsplits", out=args.out)
