"""Turn the bench suite's measurements into Markdown tables and a bar chart (its targets:
``benchmarks.cases.targets``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.cases.contenders import CONTENDERS, SUSTAINED, Contender
from benchmarks.cases.scenarios import MixingRow
from benchmarks.harness.measure import Run


@dataclass
class Results:
    """Everything one benchmark run measured, plus the facts needed to read it."""

    command: str
    facts: dict[str, str]
    sizes: dict[str, Any]
    throughput: dict[str, list[Run]] = field(default_factory=dict)
    sustained: dict[str, list[Run]] = field(default_factory=dict)
    startup: dict[str, dict[str, Any]] = field(default_factory=dict)
    resume: dict[str, Any] = field(default_factory=dict)
    memory: dict[str, dict[str, Any]] = field(default_factory=dict)
    plan: dict[str, float] = field(default_factory=dict)
    mixing: list[MixingRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table (readable as plain text on stdout too)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _num(value: float | None, digits: int = 2) -> str:
    if value is None or math.isnan(value):
        return "n/a"
    return f"{value:,.{digits}f}"


def sig(value: float | None) -> str:
    """A ratio to three significant digits."""
    return "n/a" if value is None or math.isnan(value) else f"{value:.3g}"


def ratio_of(numerator: float | None, denominator: float | None) -> float | None:
    """``numerator / denominator``; None when either is missing (or the denominator is 0)."""
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def median_run(results: Results, key: str | None, *, sustained: bool = False) -> Run | None:
    """The round with the median steady rate (the lower middle for an even count)."""
    section = results.sustained if sustained else results.throughput
    runs = sorted(section.get(key, []) if key else [], key=lambda run: run.rate)
    return runs[(len(runs) - 1) // 2] if runs else None


def steady_rate(results: Results, key: str | None, *, sustained: bool = False) -> float | None:
    """The median round's steady rows/s of contender ``key``; None when it did not run."""
    run = median_run(results, key, sustained=sustained)
    return run.rate if run is not None and run.steady_rows else None


def _spread(results: Results, key: str, *, sustained: bool = False) -> str:
    section = results.sustained if sustained else results.throughput
    rates = [run.rate for run in section.get(key, [])]
    return f"{min(rates):,.0f} to {max(rates):,.0f}" if len(rates) > 1 else "—"


def _cpu(run: Run) -> list[str]:
    """CPU per row (µs) and cores busy of a run's steady state."""
    return [_num(run.cpu_per_row_us, 2), _num(run.cores, 2)]


def _contender_row(results: Results, contender: Contender) -> list[str]:
    run = median_run(results, contender.key)
    if run is None:
        return [contender.label, "not run", "", "", "", "", "", "", "", ""]
    raw = ratio_of(run.rate, steady_rate(results, "raw_scan"))
    peer = ratio_of(run.rate, steady_rate(results, contender.peer))
    return [
        contender.label,
        f"{run.rows:,}",
        run.stopped_by,
        _num(run.first_s),
        _num(run.rate, 0),
        _spread(results, contender.key),
        *_cpu(run),
        sig(raw),
        "—" if contender.peer is None else f"{sig(peer)} (vs {contender.peer})",
    ]


def throughput_section(results: Results) -> str:
    """Rows/s after the first batch, time to first batch, CPU, and the two ratios."""
    headers = ["contender", "rows timed", "stopped by", "first batch (s)", "steady rows/s (median)"]
    headers += ["range over rounds", "CPU µs/row", "cores busy", "vs raw scan", "vs peer"]
    return table(headers, [_contender_row(results, contender) for contender in CONTENDERS])


def sustained_section(results: Results) -> str:
    """Rows/s over several passes back to back, and the ratio to the raw scan's."""
    rows = []
    raw = steady_rate(results, "raw_scan", sustained=True)
    for sustained in SUSTAINED:
        run = median_run(results, sustained.key, sustained=True)
        if run is None:
            rows.append([sustained.label, "not run", "", "", "", "", "", ""])
            continue
        rows.append(
            [
                sustained.label,
                f"{run.rows:,}",
                run.stopped_by,
                _num(run.rate, 0),
                _spread(results, sustained.key, sustained=True),
                *_cpu(run),
                sig(ratio_of(run.rate, raw)),
            ]
        )
    headers = ["contender", "rows timed", "stopped by", "rows/s (median)", "range over rounds"]
    return table([*headers, "CPU µs/row", "cores busy", "vs raw scan"], rows)


def plot(results: Results, path: Path) -> bool:
    """Save a log-scale bar chart of steady rows/s per contender; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rates = [(c.label, steady_rate(results, c.key)) for c in CONTENDERS]
    measured = [(label, rate) for label, rate in rates if rate]
    figure, axes = plt.subplots(figsize=(10, 0.5 * len(measured) + 1.5))
    colours = ["tab:green" if label.startswith("ours") else "tab:grey" for label, _ in measured]
    colours = [
        "tab:red" if label.startswith("peer") else c for (label, _), c in zip(measured, colours, strict=True)
    ]
    axes.barh([label for label, _ in measured], [rate for _, rate in measured], color=colours)
    axes.set_xscale("log")
    axes.set_xlim(right=max(rate for _, rate in measured) * 8)  # room for the value labels
    axes.invert_yaxis()
    axes.set_xlabel("steady-state rows/s (after the first batch, log scale)")
    axes.set_title(f"Throughput, {results.sizes['rows']:,} rows x {results.sizes['fragments']} fragments")
    for index, (_, rate) in enumerate(measured):
        axes.text(rate, index, f" {rate:,.0f}", va="center", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


def _startup_row(key: str, probe: dict[str, Any]) -> list[str]:
    label = probe.get("label", key)
    if "error" in probe:
        return [label, probe["error"], "", "", ""]
    growth, peak = probe["rss_growth_mib"], probe["peak_growth_mib"]
    low, high = probe.get("range_s", (None, None))
    spread = "—" if low is None else f"{low:.3f} to {high:.3f}"
    return [label, _num(probe["seconds"], 3), spread, _num(growth, 1), _num(peak, 1)]


def startup_section(results: Results) -> str:
    """Time to the first sample and RSS growth, each case in a fresh process."""
    rows = [_startup_row(key, probe) for key, probe in results.startup.items()]
    headers = ["case (16 splits, shuffled, fresh process)", "to first sample (s, median)", "range (s)"]
    return table([*headers, "RSS growth (MiB)", "peak RSS growth (MiB)"], rows)


def resume_section(results: Results) -> str:
    """Time from ``load_state_dict`` to the first batch, by where the state was taken."""
    rows = [
        [name, _num(entry["seconds"], 4), f"{entry['remaining']:,}"] for name, entry in results.resume.items()
    ]
    return table(["state taken at", "load_state_dict -> first batch (s, median)", "rows left"], rows)


def memory_section(results: Results) -> str:
    """Peak RSS of a fresh process streaming a whole table through our loader."""
    rows = []
    for key, probe in results.memory.items():
        if "error" in probe:
            rows.append([key, probe["error"], "", "", "", ""])
            continue
        rate = probe["rows"] / probe["seconds"] if probe["seconds"] else float("nan")
        rows.append(
            [
                f"{key} ({probe['rows']:,} rows)",
                _num(probe["baseline_mib"], 1),
                _num(probe["peak_mib"], 1),
                _num(probe["peak_growth_mib"], 1),
                _num(probe["seconds"], 2),
                _num(rate, 0),
            ]
        )
    headers = ["table", "RSS before (MiB)", "peak RSS (MiB)", "peak growth (MiB)", "seconds", "rows/s"]
    return table(headers, rows)


def plan_section(results: Results) -> str:
    """The pure plan at scale."""
    plan = results.plan
    headers = ["plan", "build (s, median)", "window_read([(0, 0)]) (s, median)"]
    return table(headers, [[plan_label(results), _num(plan.get("build_s"), 4), _num(plan.get("read_s"), 4)]])


def plan_label(results: Results) -> str:
    """What the plan line covers."""
    sizes = results.sizes
    total = sizes["plan_fragments"] * sizes["plan_rows_per_fragment"]
    return f"{total:,} rows in {sizes['plan_fragments']:,} fragments, S=64, block 64, buffer 32768"


def mixing_section(results: Results) -> str:
    """Block size x rows/s x mixing ratio at the default shuffle buffer."""
    rows = [
        [
            f"{row.block_rows}" + (" (default)" if row.block_rows == 64 else ""),
            _num(row.sorted_rate, 0),
            _num(row.wide_rate, 0),
            _num(row.loader_rate, 0),
            f"{row.rows_measured:,}",
            _num(row.ratio, 3),
        ]
        for row in results.mixing
    ]
    headers = ["block_rows", "rows/s, sorted table, S=1", "rows/s, wide table, S=16"]
    headers += ["loader k=0 rows/s, wide table, S=16"]
    return table([*headers, "rows mixed", "mixing ratio"], rows)
