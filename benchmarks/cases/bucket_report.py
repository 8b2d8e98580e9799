"""The Markdown of the ``bucket`` suite: contenders per setting, the frontier, the targets."""

from __future__ import annotations

import argparse
import math
from typing import Any

from benchmarks.cases.bucket_contenders import FIXED
from benchmarks.harness.machine import load_average, machine_facts

SHUFFLED = ("peer", "lance_fragments", "lance_batches")
"""The other shuffled contenders ours must dominate on the frontier."""
SAME_MIXING = 0.02
"""Mixing ratios this close count as equal (a uniform permutation itself varies so much)."""


def _num(value: float, digits: int = 0) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:,.{digits}f}"


def _figures(result: Any, mixing: dict[str, float] | None) -> dict[str, float]:
    probe, relay = result.probe, result.relay
    rows = probe.get("rows", 0) or math.nan
    requests = relay.get("requests", math.nan)
    seconds, first_s = probe.get("seconds", 0.0), probe.get("first_s", math.nan)
    after = (
        (probe.get("rows", 0) - probe.get("first_rows", 0)) / (seconds - first_s) if seconds > first_s else 0
    )
    return {
        "rate": result.rate,
        "after_first": after,
        "first_s": probe.get("first_s", math.nan),
        "requests": requests * 1000 / rows if relay else math.nan,
        "kib": relay.get("response_bytes", math.nan) / 1024 * 1000 / rows if relay else math.nan,
        "mean_in_flight": relay.get("mean_in_flight", math.nan),
        "max_in_flight": relay.get("max_in_flight", math.nan),
        "rss": probe.get("peak_rss_mib", math.nan),
        "cpu": probe.get("cpu_s", math.nan) / rows * 1e6,
        "mix_large": (mixing or {}).get("2M", math.nan),
        "mix_small": (mixing or {}).get("40k", math.nan),
    }


def _contender_table(results: list[Any], mixes: dict[str, dict[str, float]]) -> list[str]:
    lines = [
        "| table rows | setting | contender | rows/s | vs raw scan | first batch (s) | rows/s after it "
        "| requests / 1k rows "
        "| KiB / 1k rows | in flight (mean / max) | peak RSS (MiB) | CPU µs/row | mixing 2M | mixing 40k |",
        "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    scans = {(r.rows, r.setting): r.rate for r in results if r.key == "raw_scan"}
    for result in results:
        f = _figures(result, mixes.get(result.key))
        note = " (stopped by the time cap)" if result.probe.get("stopped_by") == "cap" else ""
        note += " (failed)" if "failed" in result.probe else ""
        versus = f["rate"] / scans[(result.rows, result.setting)]
        cells = [
            f"{result.rows:,}",
            result.setting,
            FIXED[result.key][0] + note,
            _num(f["rate"]),
            f"{versus:.2f}x",
            _num(f["first_s"], 2),
            _num(f["after_first"]),
            _num(f["requests"], 2),
            _num(f["kib"]),
            f"{_num(f['mean_in_flight'], 1)} / {_num(f['max_in_flight'])}",
            _num(f["rss"]),
            _num(f["cpu"], 2),
            _num(f["mix_large"], 2),
            _num(f["mix_small"], 2),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _frontier_table(frontier: list[Any], mixes: dict[str, dict[str, float]], scan: Any) -> list[str]:
    scan_requests = _figures(scan, None)["requests"]
    lines = [
        "| block_rows | shuffle_buffer_size | rows/s | vs raw scan | rows/s after the first batch "
        "| requests / 1k rows | vs scan's requests | mixing 2M | mixing 40k | peak RSS (MiB) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for result in frontier:
        _, block, buffer = result.key.split(":")
        f = _figures(result, mixes.get(result.key))
        lines.append(
            f"| {int(block):,} | {int(buffer):,} | {_num(f['rate'])} | {f['rate'] / scan.rate:.2f}x "
            f"| {_num(f['after_first'])} | {_num(f['requests'], 2)} | {f['requests'] / scan_requests:.1f}x "
            f"| {_num(f['mix_large'], 2)} "
            f"| {_num(f['mix_small'], 2)} | {_num(f['rss'])} |"
        )
    return lines


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "**FAIL**"


def _median(values: list[float]) -> float:
    values = sorted(value for value in values if not math.isnan(value))
    return values[len(values) // 2] if values else math.nan


def _first_s(result: Any) -> float:
    """The median first-batch seconds over the runs."""
    return _median([run.get("first_s", math.nan) for run in result.runs])


def _requests_per_1k(result: Any) -> float:
    """The median of each run's relayed requests per 1,000 rows delivered."""
    return _median([run["requests"] * 1000 / run["rows"] for run in result.runs if run.get("rows")])


def _size_targets(found: dict[str, Any], delay: str, rows: int) -> list[str]:
    by = {(r.setting, r.key): r for r in found["results"] if r.rows == rows}
    mixes = found["mixing"]
    lines = []
    if (delay, "ours_bucket") in by and (delay, "raw_scan") in by:
        ours = _figures(by[(delay, "ours_bucket")], mixes.get("ours_bucket"))
        scan = _figures(by[(delay, "raw_scan")], None)
        rate, requests = ours["rate"] / scan["rate"], ours["requests"] / scan["requests"]
        mixing_ok = ours["mix_large"] >= 0.6 and ours["mix_small"] >= 0.8
        mixed = (
            f"; mixes {ours['mix_large']:.2f} (2M, >= 0.6) and {ours['mix_small']:.2f} (40k, >= 0.8): "
            f"{_verdict(mixing_ok)}"
            if mixes
            else ""
        )
        lines.append(
            f"- {rows:,} rows at {delay}: the bucket profile reads {rate:.2f}x the raw scan's rows/s "
            f"(>= 0.5x): {_verdict(rate >= 0.5)}; makes {requests:.1f}x its requests per 1,000 rows "
            f"(<= 5x): {_verdict(requests <= 5)}{mixed}; peak RSS {ours['rss']:,.0f} MiB (< 1,024): "
            f"{_verdict(ours['rss'] < 1024)}."
        )
    keys = ("raw_scan", "ours_local", "ours_bucket", "peer")
    if all(("local", key) in by for key in keys):
        local = {key: by[("local", key)].rate for key in keys}
        lines.append(
            f"- {rows:,} rows locally: the local defaults read "
            f"{local['ours_local'] / local['raw_scan']:.2f}x the raw scan (>= 0.24x): "
            f"{_verdict(local['ours_local'] >= 0.24 * local['raw_scan'])} and "
            f"{local['ours_local'] / max(local['peer'], 1e-9):.1f}x the peer (>= 10x): "
            f"{_verdict(local['ours_local'] >= 10 * local['peer'])}; the bucket profile reads "
            f"{local['ours_bucket'] / local['ours_local']:.2f}x the local defaults (>= 0.8x): "
            f"{_verdict(local['ours_bucket'] >= 0.8 * local['ours_local'])}."
        )
    return lines


def bucket_targets(found: dict[str, Any], delay: str, rows: int) -> list[str]:
    """Issue 36's object-storage lines at ``delay`` on the table of ``rows`` rows: k=0 rows/s
    and first batch against the raw scan, k=2 requests against k=0 (medians over the runs)."""
    by = {r.key: r for r in found["results"] if (r.setting, r.rows) == (delay, rows)}
    scan, ours, k2 = by.get("raw_scan"), by.get("ours_bucket"), by.get("ours_bucket_k2")
    lines = []
    if scan is not None and ours is not None:
        rate = ours.rate / scan.rate if scan.rate else math.nan
        first, scan_first = _first_s(ours), _first_s(scan)
        lines.append(
            f"- {rows:,} rows at {delay}, k=0: {rate:.2f}x the raw scan's rows/s "
            f"({ours.rate:,.0f} against {scan.rate:,.0f}; >= 0.5x): {_verdict(rate >= 0.5)}."
        )
        lines.append(
            f"- {rows:,} rows at {delay}, k=0: first batch after {first:.2f} s, {first / scan_first:.2f}x "
            f"the raw scan's {scan_first:.2f} s (<= 2x): {_verdict(first <= 2 * scan_first)}."
        )
    if ours is not None and k2 is not None:
        zero, two = _requests_per_1k(ours), _requests_per_1k(k2)
        lines.append(
            f"- {rows:,} rows at {delay}: k=2 makes {two:.2f} requests per 1,000 rows, {two / zero:.2f}x "
            f"k=0's {zero:.2f} (<= 1.2x): {_verdict(two <= 1.2 * zero)}; k=2 reads "
            f"{k2.rate / ours.rate:.2f}x k=0's rows/s."
        )
    return lines


def _targets(found: dict[str, Any], delay: str, sizes: list[int]) -> list[str]:
    lines = [line for rows in sizes for line in _size_targets(found, delay, rows)]
    lines += [line for rows in sizes for line in bucket_targets(found, delay, rows)]
    by = {(r.setting, r.key): r for r in found["results"] if r.rows == sizes[-1]}
    mixes = found["mixing"]
    if not found["frontier"] or not mixes:
        return lines
    ours = [_figures(r, mixes.get(r.key)) for r in found["frontier"]]
    ours += [_figures(by[(delay, key)], mixes[key]) for key in ("ours_local", "ours_bucket")]
    for key in SHUFFLED:
        if (delay, key) not in by:
            continue
        other = _figures(by[(delay, key)], mixes[key])
        better = [
            f
            for f in ours
            if f["mix_large"] >= other["mix_large"] - SAME_MIXING and f["rate"] > other["rate"]
        ]
        best = max(better, key=lambda f: f["rate"], default=None)
        detail = (
            f"ours reaches {best['rate']:,.0f} rows/s at mixing {best['mix_large']:.2f}"
            if best
            else "no point"
        )
        lines.append(
            f"- Frontier ({sizes[-1]:,} rows, {delay}) against {FIXED[key][0]} ({other['rate']:,.0f} "
            f"rows/s, mixing {other['mix_large']:.2f}): {detail}: {_verdict(best is not None)}."
        )
    return lines


def render(found: dict[str, Any], args: argparse.Namespace) -> str:
    """The section's Markdown."""
    facts, delay, largest = machine_facts(), f"{args.delays[-1]:g} ms", args.rows[-1]
    scan = next(
        r for r in found["results"] if r.key == "raw_scan" and (r.setting, r.rows) == (delay, largest)
    )
    sizes = " and ".join(f"{rows:,}" for rows in args.rows)
    return "\n".join(
        [
            "## Object storage",
            "",
            f"`python -m benchmarks bucket --rows {' '.join(map(str, args.rows))}`: tables of {sizes} rows x "
            "(id int64, label int32, float32[128]), 16 fragments, 16 splits, batches of 256, k=0; moto's S3 "
            "server and the delaying relay each in a process of their own; every contender in a fresh "
            "process over one whole pass (construction and first read included; cap "
            f"{args.cap:g} s, the peer {args.peer_cap:g} s), the main ones the median of {args.repeats}. "
            f"{facts['cores']} cores "
            f"({facts['cpu']}), commit {facts.get('commit', 'unknown')}, {facts['date']}; load average "
            f"{load_average()}. Mixing: the distinct labels per batch over a uniform permutation's, on "
            "label-sorted local tables (guarantee 12's tests).",
            "",
            *_contender_table(found["results"], found["mixing"]),
            "",
            f"### The frontier ({largest:,} rows, {delay}): ours at each block and buffer size",
            "",
            *_frontier_table(found["frontier"], found["mixing"], scan),
            "",
            "### Targets",
            "",
            *_targets(found, delay, args.rows),
        ]
    )
