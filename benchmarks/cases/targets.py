"""The bench suite's targets: each compares two measurements of one run with a bound, says
PASS or FAIL and by how much, and gives the reason for a known miss in words."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from benchmarks.cases.report import Results, median_run, ratio_of, sig, steady_rate, table


@dataclass(frozen=True)
class Target:
    """One performance target: the measured value against its bound."""

    name: str
    measured: float | None
    bound: float
    at_most: bool
    unit: str = "x"

    @property
    def verdict(self) -> str:
        """PASS, FAIL, or n/a when the measurement is missing."""
        if self.measured is None or math.isnan(self.measured):
            return "n/a"
        ok = self.measured <= self.bound if self.at_most else self.measured >= self.bound
        return "PASS" if ok else "FAIL"

    @property
    def margin(self) -> str:
        """How far inside (PASS) or outside (FAIL) the bound, as a factor."""
        if self.verdict == "n/a" or not self.measured or not self.bound:
            return ""
        factor = self.bound / self.measured if self.at_most else self.measured / self.bound
        side = "inside" if factor >= 1 else "short"
        return f"{max(factor, 1 / factor):.3g}x {side}"


def _field(section: dict[str, dict[str, Any]], key: str, name: str) -> float | None:
    value = section.get(key, {}).get(name)
    return None if value is None else float(value)


def _rates(results: Results, ours: str, other: str) -> float | None:
    return ratio_of(steady_rate(results, ours), steady_rate(results, other))


def _fields(section: dict[str, dict[str, Any]], top: str, bottom: str, name: str) -> float | None:
    return ratio_of(_field(section, top, name), _field(section, bottom, name))


def targets(results: Results) -> list[Target]:
    """The performance targets, computed from this run's measurements."""
    startup, resume, memory = results.startup, results.resume, results.memory
    default_mix = [row.ratio for row in results.mixing if row.block_rows == 64]
    return [
        Target("loader k=0 vs peer loader k=0", _rates(results, "ours_k0", "peer_k0"), 10, False),
        Target("loader k=0 vs raw Arrow scan", _rates(results, "ours_k0", "raw_scan"), 0.5, False),
        Target(
            "loader k=0 vs raw Arrow scan, sustained (several passes)",
            ratio_of(
                steady_rate(results, "ours_k0", sustained=True),
                steady_rate(results, "raw_scan", sustained=True),
            ),
            0.5,
            False,
        ),
        Target("direct per-row vs row dicts", _rates(results, "ours_direct", "row_dicts"), 0.5, False),
        Target("loader k=2 vs k=0", _rates(results, "ours_k2", "ours_k0"), 1.0, False),
        Target(
            "start-up time, large vs small table",
            _fields(startup, "ours_large", "ours_small", "seconds"),
            1.3,
            True,
        ),
        Target(
            "start-up peak RSS growth, large table",
            _field(startup, "ours_large", "peak_growth_mib"),
            100,
            True,
            " MiB",
        ),
        Target("resume first batch, 90% vs 0%", _fields(resume, "90%", "0%", "seconds"), 1.5, True),
        Target("peak RSS streaming, 4x vs 1x table", _fields(memory, "4x", "1x", "peak_mib"), 1.2, True),
        Target(
            "peak RSS growth, 4x vs 1x (stricter)", _fields(memory, "4x", "1x", "peak_growth_mib"), 1.2, True
        ),
        Target("mixing ratio, default block_rows=64", default_mix[0] if default_mix else None, 0.6, False),
    ]


def _why_raw_scan(results: Results) -> str:
    """Why ours trails the raw scan, from this run's numbers."""
    raw, ours = median_run(results, "raw_scan"), median_run(results, "ours_k0")
    if raw is None or ours is None:
        return ""
    kept = median_run(results, "raw_scan", sustained=True)
    if kept is None or not kept.steady_rows:
        check = ""
    elif kept.rate >= 0.8 * raw.rate:
        check = (
            f"Over several passes back to back the raw scan keeps {kept.rate:,.0f} rows/s, so its "
            "single-pass rate is not an artefact of its read-ahead. "
        )
    else:
        check = (
            f"Over several passes back to back the raw scan keeps only {kept.rate:,.0f} rows/s, so part "
            "of its single-pass rate is batches decoded ahead while the first was awaited. "
        )
    takes = median_run(results, "lance_takes")
    limit = ""
    if takes is not None and takes.rate > 0:
        limit = (
            f"Lance's takes of the same shuffled 64-row blocks, alone on one thread with nothing done to "
            f"the Arrow they return, cost {takes.cpu_per_row_us:.2f} µs of CPU per row and deliver "
            f"{takes.rate:,.0f} rows/s ({takes.rate / raw.rate:.3f}x the scan); ours delivers "
            f"{ours.rate / takes.rate:.2f}x that rate. A shuffled reader that reads through Lance takes "
            "pays that cost before any work of its own, so on this machine the scan's rate is out of "
            "reach for it. "
        )
    return (
        f"{check}The raw scan is a sequential read of whole Arrow batches at {raw.cpu_per_row_us:.2f} µs "
        f"of CPU per row. {limit}Ours does what a shuffled loader needs and a scan does not: it reads "
        "64-row blocks in a seeded order with sorted Lance takes per fragment per window, several in "
        "parallel (many small ranges instead of one sequential read), computes each window's "
        "permutation, and cuts batches of 256 "
        f"rows, each gathered and turned into tensors: {ours.cpu_per_row_us:.2f} µs of CPU per row in "
        "all. Larger blocks read a little faster but mix worse (see the mixing trade-off)."
    )


def _why_workers(results: Results) -> str:
    """Why k=2 trails k=0 on this machine, from this run's numbers."""
    k0, k2 = median_run(results, "ours_k0"), median_run(results, "ours_k2")
    if k0 is None or k2 is None:
        return ""
    cores = results.facts.get("cores", "?")
    return (
        "With workers every batch is built in a worker process, its numeric columns copied into a "
        "shared-memory slot and out again by the trainer, and each worker runs its own Lance runtime "
        f"and read threads: {k2.cpu_per_row_us:.2f} µs of CPU per row "
        f"for k=2 against {k0.cpu_per_row_us:.2f} µs for k=0, which already kept {k0.cores:.2f} cores "
        f"busy on its own (its reads run in background threads). With {cores} cores shared by the "
        "trainer, its read threads and both workers, the extra work cannot be spread onto idle cores, "
        "so k=2 cannot reach the k=0 rate here. Workers pay off where cores are idle: more cores than "
        "k=0 keeps busy, or a training step that needs the trainer's process (not measured here)."
    )


def _why_startup(results: Results) -> str:
    """What the start-up ratio is made of: two first samples tens of milliseconds long."""
    small, large = results.startup.get("ours_small", {}), results.startup.get("ours_large", {})
    if "seconds" not in small or "seconds" not in large:
        return ""
    low, high = (1e3 * value for value in large.get("range_s", (large["seconds"],) * 2))
    return (
        f"Both first samples take tens of milliseconds ({1e3 * small['seconds']:.0f} ms and "
        f"{1e3 * large['seconds']:.0f} ms; the large table's runs span {low:.0f} to {high:.0f} ms), "
        "so a few milliseconds move the ratio across the line. The plan costs O(fragments) "
        "either way (see the pure plan at scale). What the large table adds is in its first "
        "window read: the same number of rows, but as 64-row blocks scattered over 1M-row "
        "fragments instead of 62,500-row ones, so Lance reads from more pages."
    )


_WHY = {
    "loader k=0 vs raw Arrow scan": _why_raw_scan,
    "loader k=2 vs k=0": _why_workers,
    "start-up time, large vs small table": _why_startup,
}


def plain_targets(results: Results) -> list[str]:
    """One line per target in words (met or not, by how much), with the reason for misses."""
    lines = []
    for target in targets(results):
        bound = f"{'at most' if target.at_most else 'at least'} {target.bound:g}{target.unit}"
        measured = f"{sig(target.measured)}{target.unit}"
        if target.verdict == "n/a":
            lines.append(f"- {target.name}: not measured in this run (needs {bound}).")
            continue
        met = "met" if target.verdict == "PASS" else "**not met**"
        line = f"- {target.name}: {measured}, needs {bound}: {met} ({target.margin})."
        why = _WHY.get(target.name)
        if target.verdict == "FAIL" and why is not None and (reason := why(results)):
            line += f" {reason}"
        lines.append(line)
    return lines


def targets_section(results: Results) -> str:
    """The targets as a table with PASS/FAIL."""
    rows = [
        [
            t.name,
            f"{sig(t.measured)}{t.unit}",
            f"{'<=' if t.at_most else '>='} {t.bound:g}{t.unit}",
            t.verdict,
            t.margin,
        ]
        for t in targets(results)
    ]
    return table(["target", "measured", "required", "verdict", "margin"], rows)
