"""The plain path (k=0): loader rows/s against the raw Lance scan, in one run, and its profile.

    python -m benchmarks plainpath [--rows 200000] [--repeats 3] [--out docs/benchmarks.md]

A table of ``--rows`` rows of (id int64, label int32, float32[128]) in 16 fragments.
The raw scan is ``lance.dataset(uri).to_batches(columns=[id, label, vec])`` (Arrow
batches, no per-row work); ours is ``StreamingDataLoader(StreamingDataset(table,
num_splits=16), batch_size=256, num_workers=0)`` (shuffled, default settings,
collated batches of tensors). The two alternate ``--repeats`` times; rows/s count
the steady state after the first item (medians). The target is ours at least
``TARGET`` times the scan.

Then one more epoch of ours runs under ``cProfile`` (the trainer's thread; the
profiler slows Python code, so these microseconds are larger than without it),
grouped into the stages of a batch by the functions they are spent in, with the
read threads' own seconds from ``dataset.stats()``. The section between the
``plainpath`` markers of ``--out`` is replaced.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.harness import sections
from benchmarks.harness.machine import load_average, machine_facts
from benchmarks.harness.measure import Caps, Run, time_items
from benchmarks.harness.tables import TableRef, wide_chunk, write_table

BATCH = 256
SPLITS = 16
FRAGMENTS = 16
COLUMNS = ["id", "label", "vec"]
TARGET = 0.5
"""Least rows/s of ours, as a multiple of the raw scan's."""

STAGES: tuple[tuple[str, tuple[tuple[str, str], ...], str], ...] = (
    ("permute: gather each batch's rows into yield order (one copy)", (("samples/rows.py", "gather"),), ""),
    (
        "collate: the rest of making the batch's tensors",
        (("samples/assemble.py", "finish"),),
        "samples/rows.py:gather",
    ),
    (
        "cut and commit: which rows make the batch, the position moved",
        (("samples/assemble.py", "_cut"), ("samples/assemble.py", "_commit")),
        "",
    ),
    (
        "chunk: the splits' next rows interleaved (waits for reads excluded)",
        (("samples/assemble.py", "_chunk"),),
        "wait",
    ),
)
"""(stage, the functions whose cumulative time it is, what is subtracted: a function's
time, or ``wait`` for the time spent waiting on a lock). Matched by file and name, so
this reads only the profile, never the package's internals."""


def _scan(table: TableRef) -> Iterator[Any]:
    import lance

    return iter(lance.dataset(table.uri).to_batches(columns=COLUMNS))


def _ours(table: TableRef) -> Iterator[Any]:
    from streaming import StreamingDataLoader, StreamingDataset

    dataset = StreamingDataset(table.open(), num_splits=SPLITS)
    return iter(StreamingDataLoader(dataset, batch_size=BATCH, num_workers=0))


def _rows(item: Any) -> int:
    return item.num_rows if hasattr(item, "num_rows") else len(item["id"])


def measure(table: TableRef, repeats: int) -> dict[str, list[Run]]:
    """Each contender's runs; the scan and ours alternate."""
    caps = Caps(rows=table.rows, seconds=60.0)
    runs: dict[str, list[Run]] = {"scan": [], "ours": []}
    for _ in range(repeats):
        runs["scan"].append(time_items(lambda: _scan(table), size=_rows, caps=caps))
        runs["ours"].append(time_items(lambda: _ours(table), size=_rows, caps=caps))
    return runs


def _cumulative(stats: pstats.Stats, file: str, name: str) -> float:
    found = stats.stats  # type: ignore[attr-defined]
    return sum(entry[3] for (path, _, func), entry in found.items() if path.endswith(file) and func == name)


def _waiting(stats: pstats.Stats) -> float:
    found = stats.stats  # type: ignore[attr-defined]
    return sum(entry[2] for (_, _, func), entry in found.items() if "acquire" in func and "lock" in func)


def profile(table: TableRef) -> dict[str, float]:
    """Microseconds per row of each stage of one profiled epoch of ours."""
    from streaming import StreamingDataLoader, StreamingDataset

    dataset = StreamingDataset(table.open(), num_splits=SPLITS)
    loader = StreamingDataLoader(dataset, batch_size=BATCH, num_workers=0)
    profiler = cProfile.Profile()
    start = time.perf_counter()
    profiler.enable()
    rows = sum(len(batch["id"]) for batch in loader)
    profiler.disable()
    total = time.perf_counter() - start
    stats = pstats.Stats(profiler)
    wait = _waiting(stats)
    stages: dict[str, float] = {}
    for stage, functions, minus in STAGES:
        spent = sum(_cumulative(stats, file, name) for file, name in functions)
        if minus == "wait":
            spent -= wait
        elif minus:
            spent -= _cumulative(stats, *minus.split(":"))
        stages[stage] = max(0.0, spent)
    stages["waiting for the read threads"] = wait
    stages["the loader's iteration (the rest)"] = max(0.0, total - sum(stages.values()))
    per_row = {stage: seconds / rows * 1e6 for stage, seconds in stages.items()}
    per_row["trainer thread, in all (wall)"] = total / rows * 1e6
    read = dataset.stats()
    per_row["read threads: Lance takes (wall, summed over reads)"] = read["read_seconds"] / rows * 1e6
    per_row["Arrow to numpy (wall, summed over reads; where it runs: see docs)"] = (
        read["convert_seconds"] / rows * 1e6
    )
    return per_row


def verdict(runs: dict[str, list[Run]]) -> tuple[float, float, float, str]:
    """(scan rows/s, ours rows/s, ratio, PASS or FAIL) of the medians."""
    scan = statistics.median(run.rate for run in runs["scan"])
    ours = statistics.median(run.rate for run in runs["ours"])
    ratio = ours / scan if scan else 0.0
    return scan, ours, ratio, "PASS" if ratio >= TARGET else "FAIL"


def report(runs: dict[str, list[Run]], stages: dict[str, float], rows: int, repeats: int) -> str:
    """The section's markdown."""
    facts = machine_facts()
    _, _, ratio, passed = verdict(runs)
    lines = [
        "## The plain path (k=0)",
        "",
        f"`python -m benchmarks plainpath --rows {rows} --repeats {repeats}`: {rows:,} rows "
        f"(id, label, float32[128]), {FRAGMENTS} fragments; ours: {SPLITS} splits, shuffled, "
        f"default settings, batches of {BATCH}, `num_workers=0`; medians of {repeats} alternating "
        f"runs, steady state after the first item; {facts['cores']} cores ({facts['cpu']}), commit "
        f"{facts.get('commit', 'unknown')}, {facts['date']}; load average {load_average()}.",
        "",
        "| contender | rows/s (median) | range | CPU us/row | cores busy |",
        "| --- | ---: | --- | ---: | ---: |",
    ]
    for name, label in (("scan", "raw Lance scan, to_batches(columns)"), ("ours", "ours, k=0")):
        found = runs[name]
        rates = sorted(run.rate for run in found)
        cpu = statistics.median(run.cpu_per_row_us for run in found)
        cores = statistics.median(run.cores for run in found)
        lines.append(
            f"| {label} | {statistics.median(rates):,.0f} | {rates[0]:,.0f} to {rates[-1]:,.0f} "
            f"| {cpu:.2f} | {cores:.2f} |"
        )
    lines += [
        "",
        f"- k=0 against the raw scan: {ratio:.2f}x ({passed}: target at least {TARGET}x).",
        "",
        "One profiled epoch of ours (cProfile on the trainer's thread, which inflates Python time):",
        "",
        "| stage | us per row |",
        "| --- | ---: |",
        *(f"| {stage} | {value:.3f} |" for stage, value in stages.items()),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Build the table, measure, profile, print (and with ``--out`` publish) the section."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks plainpath", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        table = write_table(folder, "wide", rows=args.rows, fragments=FRAGMENTS, chunk=wide_chunk)
        runs = measure(table, args.repeats)
        stages = profile(table)
    sections.publish(report(runs, stages, args.rows, args.repeats), name="plainpath", out=args.out)
