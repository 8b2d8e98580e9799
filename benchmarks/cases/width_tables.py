"""The ``widths`` suite's figures as tables and lines: every run's own figures, ours / each
contender's ratios, the targets, the plain words, and the cases' shared names.

Pure functions of a run's results (``(case, contender label) -> figures``), so a saved
run (``--results``) rebuilds the same text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

NARROW_FRAGMENTS = 16
FRAGMENT_BYTES = 256 << 20
PEERS = {
    "litdata": ("litdata", "litdata==0.2.76"),
    "mosaic": ("mosaicml-streaming", "mosaicml-streaming==0.13.0"),
}
"""Each peer's environment name: (its distribution, what ``--install`` installs)."""
AUTO_WINDOW = "litdata k=0, its auto decode window"
"""The label of litdata's run with its own decode window (the suite's litdata runs align it
with its shuffle window: ``benchmarks.cases.width_contenders.LITDATA_WINDOW``)."""
TAKES = "raw takes"
CONTENDERS = ("ours", "lance_torch", "litdata", "mosaic")
NAMES = {"ours": "ours", "lance_torch": "lance.torch", "litdata": "litdata", "mosaic": "mosaic"}
METRICS = (
    ("steady_rate", "rows/s after the first batch", "{:,.0f}"),
    ("whole_rate", "rows/s end to end", "{:,.0f}"),
    ("first_s", "first batch (s)", "{:.2f}"),
    ("restart_s", "epoch restart (s)", "{:.2f}"),
    ("cpu_us_per_row", "CPU us/row", "{:,.1f}"),
    ("peak_mib", "peak RSS (MiB)", "{:,.0f}"),
)


@dataclass(frozen=True)
class Width:
    """A group of cases sharing rows: narrow (vectors, or ``text``), or wide rows of ``payload`` bytes."""

    key: str
    label: str
    rows: int
    payload: int
    batch: int
    grown: bool = False
    text: bool = False
    """Narrow rows of text (a string column) instead of vectors."""

    @property
    def fragments(self) -> int:
        if not self.payload:
            return NARROW_FRAGMENTS
        return max(2, math.ceil(self.rows * self.payload / FRAGMENT_BYTES))

    @property
    def stores(self) -> tuple[str, ...]:
        """The Lance tables of this width: plain only for narrow and grown rows."""
        return ("binary",) if not self.payload or self.grown else ("binary", "blob")


Results = dict[tuple[str, str], dict[str, Any]]
"""(case, contender label) -> a probe's result (or ``{"error": ...}``)."""


def case_key(width: Width, store: str) -> str:
    return width.label if not width.payload else f"{width.label}, {store}"


def reread_key(case: str, factor: int) -> str:
    """The runs that read the 1x table ``factor`` times: as many rows as the grown table's epoch."""
    return f"{case}, read {factor}x"


def _cell(found: dict[str, Any] | None, key: str, style: str) -> str:
    if found is None or "error" in found:
        return ""
    return style.format(found[key])


def raw_table(results: Results, cases: list[str]) -> list[str]:
    """Every run's own figures."""
    header = " | ".join(label for _, label, _ in METRICS)
    lines = [
        f"| case | contender | {header} | each row once | load |",
        "| --- | --- |" + " ---: |" * len(METRICS) + " --- | ---: |",
    ]
    for case in cases:
        for (where, label), found in results.items():
            if where != case:
                continue
            if "error" in found:
                lines.append(f"| {case} | {label} | {found['error']} |" + " |" * (len(METRICS) + 1))
                continue
            cells = " | ".join(_cell(found, key, style) for key, _, style in METRICS)
            if found.get("repeats", 1) > 1:  # the median run of several: its end-to-end range
                low, high = found["whole_range"]
                whole = _cell(found, "whole_rate", "{:,.0f}")
                cells = cells.replace(f" | {whole} | ", f" | {whole} ({low:,.0f} to {high:,.0f}) | ", 1)
            once = "yes" if found["exactly_once"] else f"NO ({found['rows']:,} rows)"
            if label == TAKES:
                once = f"no row twice ({found['rows']:,} rows: whole 64-row blocks)"
            lines.append(f"| {case} | {label} | {cells} | {once} | {found['load']} |")
    return lines


def _ratio(ours: dict[str, Any], other: dict[str, Any], key: str) -> str:
    if "error" in ours or "error" in other or not other.get(key):
        return ""
    return f"{ours[key] / other[key]:.2f}x"


def peers_of(case: str) -> str:
    """The case whose peer runs a case is compared with (a blob case: the binary one)."""
    return case.replace(", blob", ", binary")


def ratio_table(results: Results, cases: list[str], workers: list[int]) -> list[str]:
    """Ours / each contender, same k, same run."""
    header = " | ".join(label for _, label, _ in METRICS)
    lines = [
        f"| case | ours / contender | {header} |",
        "| --- | --- |" + " ---: |" * len(METRICS),
    ]
    for case in cases:
        for k in workers:
            ours = results.get((case, f"ours k={k}"))
            if ours is None:
                continue
            others = [(case, f"lance.torch k={k}")] + [(peers_of(case), f"{peer} k={k}") for peer in PEERS]
            others += [(case, TAKES)]
            for where, label in others:
                other = results.get((where, label))
                if other is None:
                    continue
                if "error" in ours or "error" in other:
                    why = ours.get("error") or other.get("error")
                    lines.append(f"| {case} | ours k={k} / {label} | {why} |" + " |" * (len(METRICS) - 1))
                    continue
                cells = " | ".join(_ratio(ours, other, key) for key, _, _ in METRICS)
                lines.append(f"| {case} | ours k={k} / {label} | {cells} |")
    return lines


def takes_lines(results: Results, cases: list[str], workers: list[int]) -> list[str]:
    """Ours at each k against Lance's fastest read of the same rows (the raw takes), and
    against litdata where it ran (its aligned and, at k=0, its own decode window)."""
    lines = []
    for case in cases:
        takes = results.get((case, TAKES))
        if takes is None or "error" in takes or not takes["steady_rate"]:
            continue
        for k in workers:
            ours = results.get((case, f"ours k={k}"))
            if ours is None or "error" in ours:
                continue
            steady = ours["steady_rate"] / takes["steady_rate"]
            line = (
                f"- {case}, ours k={k} against the raw Lance takes of the same 64-row blocks (k=0, one "
                f"thread, Arrow only, each row's bytes checked): {steady:.2f}x "
                f"the rows/s after the first batch ({ours['steady_rate']:,.0f} against "
                f"{takes['steady_rate']:,.0f}), {ours['whole_rate'] / takes['whole_rate']:.2f}x end to end; "
                f"CPU per row {ours['cpu_us_per_row']:.2f} us against {takes['cpu_us_per_row']:.2f} us"
            )
            litdata = [(f"litdata k={k}", results.get((peers_of(case), f"litdata k={k}")))]
            if k == 0:
                litdata.append((AUTO_WINDOW, results.get((peers_of(case), AUTO_WINDOW))))
            for label, other in litdata:
                if other is not None and "error" not in other and other["whole_rate"]:
                    line += f"; {ours['whole_rate'] / other['whole_rate']:.2f}x {label} end to end"
            lines.append(line + ".")
    return lines


def grow_lines(results: Results, base: str, grown: str, factor: int, workers: list[int]) -> list[str]:
    lines = [
        "",
        f"Peak RSS with {factor}x the rows ({grown} against {base}):",
        "",
        f"| contender | peak RSS at 1x (MiB) | 1x read {factor} times | at {factor}x (MiB) | "
        f"{factor}x / 1x | {factor}x / 1x read {factor} times |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    labels = [f"{NAMES[name]} k={k}" for name in CONTENDERS for k in workers]
    for label in labels:
        small, big = results.get((base, label)), results.get((grown, label))
        reread = results.get((reread_key(base, factor), label)) or {"error": "not run"}
        if small is None or big is None:
            continue
        if "error" in small or "error" in big:
            lines.append(f"| {label} | {small.get('error', '')} | | {big.get('error', '')} | | |")
            continue
        again = "" if "error" in reread else f"{reread['peak_mib']:,.0f}"
        against = "" if "error" in reread else f"{big['peak_mib'] / reread['peak_mib']:.2f}x"
        ratio = big["peak_mib"] / small["peak_mib"]
        lines.append(
            f"| {label} | {small['peak_mib']:,.0f} | {again} | {big['peak_mib']:,.0f} | {ratio:.2f}x | "
            f"{against} |"
        )
    return lines


def plain_words(results: Results, cases: list[str], workers: list[int]) -> list[str]:
    """One line per case and k: where ours stands against each contender that ran."""
    lines = []
    for case in cases:
        for k in workers:
            ours = results.get((case, f"ours k={k}"))
            if ours is None or "error" in ours:
                continue
            others = [((case, f"lance.torch k={k}"), "lance.torch")]
            others += [((peers_of(case), f"{peer} k={k}"), peer) for peer in PEERS]
            ran = [
                (name, results[key]) for key, name in others if "error" not in results.get(key, {"error": 1})
            ]
            if not ran:
                continue
            whole = ", ".join(
                f"{ours['whole_rate'] / other['whole_rate']:.2f}x {name}" for name, other in ran
            )
            first = ", ".join(f"{name} {other['first_s']:.2f} s" for name, other in ran)
            peak = ", ".join(f"{name} {other['peak_mib']:,.0f}" for name, other in ran)
            lines.append(
                f"- {case}, k={k}: ours end to end {ours['whole_rate']:,.0f} rows/s ({whole}); first "
                f"batch {ours['first_s']:.2f} s ({first}); peak RSS {ours['peak_mib']:,.0f} MiB ({peak})."
            )
    return lines


def _verdict(passed: bool) -> str:
    return "PASS" if passed else "FAIL"


def targets(results: Results, widths: list[Width], workers: list[int], grow: int) -> list[str]:
    """The targets for sizing by bytes, judged on this run's ratios (a line each; missing
    runs are said, not judged)."""

    def run(case: str, label: str) -> dict[str, Any] | None:
        found = results.get((case, label))
        return None if found is None or "error" in found else found

    lines = []
    keys = {width.key: width for width in widths}
    if "100k" in keys:
        case = case_key(keys["100k"], "binary")
        for k in workers:
            ours, litdata = run(case, f"ours k={k}"), run(case, f"litdata k={k}")
            if ours is None or litdata is None:
                lines.append(f"- 100 KiB rows, k={k}: not judged (ours or litdata did not run)")
                continue
            whole = ours["whole_rate"] / litdata["whole_rate"]
            peak = ours["peak_mib"] / litdata["peak_mib"]
            lines.append(
                f"- 100 KiB rows, k={k}: end-to-end rows/s {whole:.2f}x litdata's (target at least 1x: "
                f"{_verdict(whole >= 1)}); peak RSS {peak:.2f}x litdata's "
                f"(at most 1.5x: {_verdict(peak <= 1.5)})"
            )
        ours = run(case, "ours k=0")
        if ours is not None and 0 in workers:
            first = ours["first_s"]
            lines.append(f"- 100 KiB rows, k=0: first batch {first:.2f} s (under 1 s: {_verdict(first < 1)})")
        lines += first_batch_lines(ours, [(k, run(case, f"ours k={k}")) for k in workers if k], results)
        grown = [width for width in widths if width.grown]
        for k in workers if grown else []:
            small, big = run(case, f"ours k={k}"), run(case_key(grown[0], "binary"), f"ours k={k}")
            if small is None or big is None:
                continue
            ratio = big["peak_mib"] / small["peak_mib"]
            reread = run(reread_key(case, grow), f"ours k={k}")
            again = None if reread is None else big["peak_mib"] / reread["peak_mib"]
            same = "not run" if again is None else f"{again:.2f}x"
            verdict = "not judged" if again is None else _verdict(again <= 1.2)
            lines.append(
                f"- 100 KiB rows, k={k}: peak RSS with {grow}x the rows {ratio:.2f}x the 1x run's "
                f"(flat: at most 1.2x: {_verdict(ratio <= 1.2)}); {same} the 1x table's read {grow} "
                f"times, as many rows read (at most 1.2x: {verdict})"
            )
    if "narrow" in keys:
        for k in workers:
            ours = run("narrow", f"ours k={k}")
            others = [("lance.torch", run("narrow", f"lance.torch k={k}"))]
            others += [(peer, run("narrow", f"{peer} k={k}")) for peer in PEERS]
            ran = [(name, other) for name, other in others if other is not None]
            if ours is None or not ran:
                continue
            least = min(ours["steady_rate"] / other["steady_rate"] for _, other in ran)
            names = ", ".join(name for name, _ in ran)
            lines.append(
                f"- Narrow rows, k={k}: rows/s after the first batch at least {least:.2f}x each of {names} "
                f"(ahead of every one: {_verdict(least > 1)})"
            )
        ours, takes = run("narrow", "ours k=0"), run("narrow", "raw takes")
        if ours is not None and takes is not None and takes["steady_rate"]:
            ratio = ours["steady_rate"] / takes["steady_rate"]
            lines.append(
                f"- Narrow rows, k=0: {ratio:.2f}x the raw takes of the same blocks (at least 0.7x: "
                f"{_verdict(ratio >= 0.7)})"
            )
    return lines


def first_batch_lines(
    ours: dict[str, Any] | None, with_workers: list[tuple[int, dict[str, Any] | None]], results: Results
) -> list[str]:
    """The k>0 first batch against k=0's, and where it goes: a fresh interpreter importing
    what the fork server preloads (measured in this run), which a fork-safe start cannot skip."""
    preload = results.get(("start-up", "preload"), {}).get("seconds")
    lines = []
    for k, found in with_workers:
        if ours is None or found is None or not ours["first_s"]:
            continue
        ratio = found["first_s"] / ours["first_s"]
        line = (
            f"- 100 KiB rows, k={k}: first batch {found['first_s']:.2f} s, {ratio:.1f}x k=0's "
            f"(at most 3x: {_verdict(ratio <= 3)})"
        )
        if preload is not None and found["first_s"] > preload:  # else the start is off the path
            rest = found["first_s"] - preload
            line += (
                f"; {preload:.2f} s of it is a fresh interpreter importing what the fork server "
                f"preloads (torch most of it), which no fork-safe start avoids; the other "
                f"{rest:.2f} s is {rest / ours['first_s']:.1f}x k=0's first batch"
            )
        lines.append(line)
    return lines
