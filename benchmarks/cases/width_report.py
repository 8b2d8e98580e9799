"""The ``widths`` suite's section of docs/benchmarks.md: the run's facts, its tables and
what they say (``benchmarks.cases.width_tables``), and a second run's peak RSS table.
"""

from __future__ import annotations

import argparse
from typing import Any

from benchmarks.cases.width_tables import (
    AUTO_WINDOW,
    PEERS,
    Results,
    Width,
    case_key,
    grow_lines,
    plain_words,
    ratio_table,
    raw_table,
    takes_lines,
    targets,
)
from benchmarks.harness import envs
from benchmarks.harness.machine import load_average


def versions(available: dict[str, bool]) -> str:
    found = [f"pylance {envs.installed_here('pylance')}", f"torch {envs.installed_here('torch')}"]
    for name, (distribution, _) in PEERS.items():
        got = envs.installed_in(name, distribution) if available[name] else None
        found.append(f"{distribution} {got}" if got else f"{distribution} not installed")
    return ", ".join(found)


def section(
    results: Results,
    widths: list[Width],
    args: argparse.Namespace,
    facts: dict[str, str],
    available: dict[str, bool],
    seconds: float,
) -> str:
    cases = [case_key(width, store) for width in widths for store in width.stores]
    loads = sorted(float(found["load"]) for found in results.values() if "load" in found)
    spread = f"{loads[0]:.2f} to {loads[-1]:.2f}" if loads else "unknown"
    sizes = ", ".join(
        f"{width.label}: {width.rows:,} rows, batches of {width.batch}, {width.fragments} fragments"
        for width in widths
    )
    lines = [
        "## Peers by row width",
        "",
        f"`{args.command}` ({facts['date']}, commit {facts['commit']}, {facts['cores']} cores "
        f"({facts['cpu']}), {facts['memory']}; load average {facts['load']} at the start, "
        f"{load_average()} at the end, 1-minute load {spread} at the runs' starts; {seconds / 60:.1f} "
        f"minutes in all). {sizes}. Versions: {versions(available)}.",
        "",
        "The default sizes (20,000 rows of 100 KiB, a 2 GiB table, the size the sizing targets were "
        "set on; 400 rows of 1 MiB) keep one run of every contender within 15 minutes on 2 shared "
        "cores; `--grow 4` adds the 100 KiB rows at 4 times the rows to see whether peak RSS stays "
        "flat (run it with `--rows-100k 4000`), and also reads the 1x table 4 times, so that the "
        "peaks compare after as many rows read: an allocator keeps freed pages for reuse, so a "
        "process's peak climbs with the rows it has read, towards a plateau, whatever the table. "
        "litdata and mosaic run in virtual environments of "
        "their own under the cache folder (`--install` makes them: the peer and this repository's "
        "torch pin, without torchvision, whose PyPI build needs CUDA's torch; mosaic's package is "
        "also named `streaming`). "
        "Each run is a fresh interpreter: one whole epoch (every id checked to come once, every "
        "wide row's size and leading id checked and one byte of each of its 4 KiB pages read, "
        "every narrow text checked to be a `str` that starts with its row's id, the same check "
        "for every contender, so that memory-mapped rows are brought in as a trainer using them "
        "would), then the second epoch's first batch. "
        f"Each contender runs {args.repeats} time(s), in rounds (one run of each a round, on the "
        "same rows); the table shows each one's run with the median end-to-end rate (its range "
        "in brackets when it ran more than once). Ours uses default settings, shuffled; "
        "lance.torch is unshuffled; litdata and mosaic shuffle. litdata runs with its decode "
        "window set to its 256-row shuffle window (`batch_decode=256`, the pairing its "
        "documentation gives); its own window for rows of 100 KiB, 16 MiB of rows (163), does not "
        f"divide its shuffle window, so a shuffled read decodes about 65 rows for each it delivers: "
        f"the row `{AUTO_WINDOW}` measures that default, on the same rows. litdata hands each row's "
        "bytes over as a `memoryview` into its chunk file, kept as it is (no copy). *raw takes* is "
        "Lance's fastest shuffled read of the same table: sorted `fragment.take`s of shuffled "
        "64-row blocks, 32 blocks a take, on one thread, Arrow only (whole blocks: a fragment's "
        "last rows short of a block are not read). The peers store the same bytes for the "
        "binary and the blob table, so blob rows are compared with the peers' runs of the "
        "binary rows.",
        "",
        *raw_table(results, cases),
        "",
        "How to read it: *rows/s after the first batch* counts the epoch's rows after its first "
        "batch over the time since that batch; *end to end* counts every row from building the "
        "dataset and loader (imports done before) to the epoch's last batch, so a slow first batch "
        "weighs in; *first batch* is from building the loader to its first batch, *epoch restart* "
        "from asking for the second epoch to its first batch; *CPU us/row* is the CPU time of the "
        "whole process tree (trainer, workers, a fork server) over the first epoch, construction "
        "included, per row (a worker's time is sampled every 50 ms, so up to 50 ms of each exiting "
        "worker's last work is missed); *peak RSS* is the largest sum of the tree's resident memory "
        "over both epochs, sampled every 50 ms (pages shared between processes count once per "
        "process; an interpreter with torch imported is about 300 MiB of it, 250 without "
        "torchvision in the peers' environments). A loader that reads ahead before its first "
        "batch (ours reads its whole shuffle buffer first, which holds these whole wide tables) "
        "shows a high rate after it: for wide rows read the end-to-end column. The peers' formats "
        "are written before the runs (not timed here). Rows/s move with the load of the 2 shared "
        "cores; the ratios below pair runs of the same minutes.",
        "",
        "Ours / contender, same k, same run (above 1 is better for ours in the two rows/s "
        "columns; below 1 is better for ours in the others):",
        "",
        *ratio_table(results, cases, args.workers),
    ]
    judged = targets(results, widths, args.workers, args.grow)
    if judged:
        lines += ["", "Targets (same-run ratios; litdata must have run):", "", *judged]
    words = plain_words(results, cases, args.workers)
    if words:
        lines += ["", "In plain words (ours against each contender that ran, same k):", "", *words]
    extra = takes_lines(results, cases, args.workers)
    if extra:
        lines += ["", *extra]
    grown = [width for width in widths if width.grown]
    if grown:
        base = next(width for width in widths if width.key == "100k")
        lines += grow_lines(
            results, case_key(base, "binary"), case_key(grown[0], "binary"), args.grow, args.workers
        )
    return "\n".join(lines)


def grown_section(saved: dict[str, Any], parser: argparse.ArgumentParser) -> str:
    """The peak RSS table of another run, made with ``--grow`` (its own command, date and load)."""
    args = parser.parse_args(saved["command"].split()[4:])
    results = {(run["case"], run["contender"]): run["result"] for run in saved["runs"]}
    base = case_key(Width("100k", "100 KiB", args.rows_100k, 100 << 10, args.wide_batch_size), "binary")
    grown = f"100 KiB x{args.grow}, binary"
    facts = saved["facts"]
    lines = [
        "",
        f"From a second run, `{saved['command']}` ({facts['date']}, commit {facts['commit']}, load "
        f"average {facts['load']} at the start, {saved['seconds'] / 60:.1f} minutes; the project's "
        "test suite ran beside it):",
        *grow_lines(results, base, grown, args.grow, args.workers),
    ]
    small, big = results.get((base, "ours k=0")), results.get((grown, "ours k=0"))
    if small and big and "error" not in small and "error" not in big:
        lines += [
            "",
            f"Ours k=0 in that run: first batch {small['first_s']:.1f} s at 1x, {big['first_s']:.1f} s "
            f"at {args.grow}x; end to end {small['whole_rate']:,.0f} and {big['whole_rate']:,.0f} rows/s.",
        ]
    return "\n".join(lines)
