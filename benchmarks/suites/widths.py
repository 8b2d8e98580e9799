"""Peers by row width: ours, lance.torch, litdata, mosaic on the same narrow, 100 KiB and 1 MiB rows.

    python -m benchmarks widths [--narrow-rows 200000] [--rows-100k 20000] [--rows-1m 400]
                                [--workers 0,2] [--grow 1] [--cases narrow,100k,1m]
                                [--contenders ours,lance_torch,litdata,mosaic] [--install]
                                [--results run.json] [--out docs/benchmarks.md]
    python -m benchmarks widths --from-results run.json [--grown-results grow.json] [--out ...]

The same rows, written once as numpy files, then as every contender's format:

- narrow: (id int64, label int32, vec float32[128]), a Lance table of 16 fragments;
- 100 KiB and 1 MiB: (id, label, img) whose ``img`` holds that many bytes (random, the
  row's id in the first 8), a Lance table with a plain ``binary`` column (how most
  people store images) and the same bytes in a blob column (``lance-encoding:blob``),
  fragments of about 256 MiB;
- litdata's chunks (``litdata.optimize``, 64 MB) and mosaicml-streaming's MDS shards
  (64 MiB, no compression) of the same rows.

Contenders, each in a fresh interpreter, at every ``--workers`` count k: ours
(``StreamingDataLoader(StreamingDataset(uri), batch_size, num_workers=k)``, default
settings, shuffled), lance.torch (``LanceDataset(uri, batch_size)``, unshuffled; its
fragments shared among k workers), litdata (``StreamingDataset(dir, shuffle=True)``
in its ``StreamingDataLoader``) and mosaicml-streaming (``StreamingDataset(local=dir,
shuffle=True)`` in a torch ``DataLoader``); for narrow rows also the raw Lance takes
of shuffled 64-row blocks. litdata and mosaic run in virtual environments of their
own (mosaic's package is also named ``streaming``), made by ``--install`` under the
cache folder (without torchvision: PyPI's build needs the CUDA build of torch, and
the environments have the CPU build pinned here); one that is missing is reported,
not run. The peers' rows are the same
bytes for the binary and the blob table, so the blob rows are compared with the
peers' runs of the same width.

Each run reads one whole epoch (every id checked to come exactly once, every wide
row's bytes checked), then starts a second epoch to its first batch. Reported: rows/s
after the first batch and end to end (from building the loader to the epoch's end),
the first batch, the second epoch's first batch, CPU microseconds per row of the
process tree over the first epoch (workers sampled every 50 ms), and the tree's
peak RSS (trainer and workers summed, sampled every 50 ms); then each as a ratio
ours / contender. ``--grow G`` adds the 100 KiB binary rows at G times the rows, to
show whether each contender's peak RSS stays flat. The section between the
``widths`` markers of ``--out`` is replaced. ``--results`` keeps every run's figures;
``--from-results`` rebuilds the section from them (``--grown-results``: with the
peak RSS table of a second run made with ``--grow``).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.cases.width_probe import PROBE_PRELOAD_SPEC
from benchmarks.harness import envs, sections
from benchmarks.harness.machine import load_average, machine_facts

PROBE = "benchmarks.cases.width_probe"
NARROW_FRAGMENTS = 16
FRAGMENT_BYTES = 256 << 20
PEERS = {
    "litdata": ("litdata", "litdata==0.2.76"),
    "mosaic": ("mosaicml-streaming", "mosaicml-streaming==0.13.0"),
}
"""Each peer's environment name: (its distribution, what ``--install`` installs)."""
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
    """A group of cases sharing rows: narrow, or wide rows of ``payload`` bytes."""

    key: str
    label: str
    rows: int
    payload: int
    batch: int
    grown: bool = False

    @property
    def fragments(self) -> int:
        if not self.payload:
            return NARROW_FRAGMENTS
        return max(2, math.ceil(self.rows * self.payload / FRAGMENT_BYTES))

    @property
    def stores(self) -> tuple[str, ...]:
        """The Lance tables of this width: plain only for narrow and grown rows."""
        return ("binary",) if not self.payload or self.grown else ("binary", "blob")


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- the rows, in every format -------------------------------------------------------------


def write_source(folder: Path, width: Width) -> None:
    """The rows as numpy files (ids, and vectors or payloads), written in chunks."""
    folder.mkdir(parents=True)
    ids = np.arange(width.rows, dtype=np.int64)
    np.save(folder / "ids.npy", ids)
    rng = np.random.default_rng(0)
    shape = (width.rows, 128) if not width.payload else (width.rows, width.payload)
    name, dtype = ("vec.npy", np.float32) if not width.payload else ("payload.npy", np.uint8)
    out = np.lib.format.open_memmap(folder / name, mode="w+", dtype=dtype, shape=shape)
    step = max(1, (64 << 20) // (shape[1] * np.dtype(dtype).itemsize))
    for start in range(0, width.rows, step):
        stop = min(width.rows, start + step)
        if width.payload:
            block = np.frombuffer(rng.bytes((stop - start) * width.payload), np.uint8)
            block = block.reshape(stop - start, width.payload).copy()
            block[:, :8] = ids[start:stop, None].view(np.uint8).reshape(-1, 8)
            out[start:stop] = block
        else:
            out[start:stop] = rng.random((stop - start, 128), dtype=np.float32)
    out.flush()
    del out


def write_lance(source: Path, uri: str, width: Width, *, blob: bool) -> None:
    """A Lance table of the source rows in ``width.fragments`` fragments."""
    import lance
    import pyarrow as pa

    from benchmarks.cases.width_probe import source_rows

    if not width.payload:
        field = pa.field("vec", pa.list_(pa.float32(), 128))
    elif blob:
        field = pa.field("img", pa.large_binary(), metadata={"lance-encoding:blob": "true"})
    else:
        field = pa.field("img", pa.binary())
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("label", pa.int32()), field])
    edges = np.linspace(0, width.rows, width.fragments + 1).astype(np.int64)
    for index, (start, stop) in enumerate(zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True)):
        rows = source_rows(str(source), start, stop - start)
        if width.payload:
            values = rows["img"]
            offsets = np.arange(0, (len(values) + 1) * width.payload, width.payload)
            kind = pa.large_binary() if blob else pa.binary()
            offsets = offsets.astype(np.int64 if blob else np.int32)
            data = pa.Array.from_buffers(
                kind, len(values), [None, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(values))]
            )
        else:
            data = pa.FixedSizeListArray.from_arrays(pa.array(rows["vec"].reshape(-1)), 128)
        table = pa.table([pa.array(rows["id"]), pa.array(rows["label"]), data], schema=schema)
        lance.write_dataset(table, uri, mode="create" if index == 0 else "append")
        del table, data, rows


# -- the peers' environments -------------------------------------------------------------------


def torch_pin() -> str:
    """The repository's torch pin (``scripts/constraints.txt``), for the peers' environments."""
    for line in envs.CONSTRAINTS.read_text(encoding="utf-8").splitlines():
        if line.startswith("torch=="):
            return line.strip()
    return "torch"


def install() -> int:
    """Make each peer's environment: torch as pinned here, the peer, and no torchvision (PyPI's
    is a CUDA build that does not load next to the CPU torch; see ``width_probe``)."""
    failed = 0
    for name, (_, requirement) in PEERS.items():
        _log(f"installing {requirement} into {envs.env_python(name).parents[1]} ...")
        error = envs.make_env(name, torch_pin(), requirement)
        if not error:
            error = envs.pip_uninstall(envs.env_python(name), "torchvision")
        _log(f"{name}: {error or 'installed'}")
        failed += bool(error)
    return 1 if failed else 0


def install_hint(name: str) -> str:
    """What a missing peer's cells say."""
    command = "`python -m benchmarks widths --install`"
    return f"not installed (install with {command}: {PEERS[name][1]} in its own environment)"


# -- running -------------------------------------------------------------------------------


def python_of(contender: str) -> str:
    return str(envs.env_python(contender)) if contender in PEERS else envs.this_python()


def probe(spec: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """One contender's run in a fresh interpreter (its own environment for a peer)."""
    spec = {**spec, "action": "read", "limit_gib": args.max_rss_gib}
    load = load_average().split(" / ")[0]
    found = envs.run_module(python_of(spec["contender"]), PROBE, json.dumps(spec), timeout=args.timeout)
    found["load"] = load
    shown = {key: round(value, 3) if isinstance(value, float) else value for key, value in found.items()}
    _log(f"  {spec['contender']} k={spec['workers']} on {Path(spec['uri']).name}: {shown}")
    return found


def convert(peer: str, source: Path, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    spec = {"action": f"convert-{peer}", "source": str(source), "out": str(out)}
    found = envs.run_module(envs.env_python(peer), PROBE, json.dumps(spec), timeout=args.timeout * 2)
    _log(f"  converted to {peer}: {found}")
    return found


Results = dict[tuple[str, str], dict[str, Any]]
"""(case, contender label) -> a probe's result (or ``{"error": ...}``)."""


def measure_width(
    width: Width, args: argparse.Namespace, available: dict[str, bool], results: Results
) -> None:
    """Write the width's rows in every format, run every contender, delete the rows."""
    folder = Path(args.work) / width.key
    shutil.rmtree(folder, ignore_errors=True)
    started = time.perf_counter()
    write_source(folder / "source", width)
    uris = {}
    for store in width.stores:
        uris[store] = str(folder / f"{store}.lance")
        write_lance(folder / "source", uris[store], width, blob=store == "blob")
    _log(f"{width.label}: {width.rows:,} rows written in {time.perf_counter() - started:.0f} s")
    base = {"rows": width.rows, "payload": width.payload, "batch": width.batch, "narrow": not width.payload}
    base["fragments"] = width.fragments
    for store, uri in uris.items():
        case = case_key(width, store)
        for contender in ("ours", "lance_torch"):
            if contender not in args.contenders:
                continue
            for k in args.workers:
                spec = {**base, "contender": contender, "workers": k, "uri": uri, "blob": store == "blob"}
                results[(case, f"{NAMES[contender]} k={k}")] = probe(spec, args)
        if not width.payload and "ours" in args.contenders:
            spec = {**base, "contender": "lance_takes", "workers": 0, "uri": uri}
            results[(case, "raw takes")] = probe(spec, args)
        if width.key == "100k" and store == "binary" and args.grow > 1 and "ours" in args.contenders:
            for k in args.workers:
                spec = {**base, "contender": "ours", "workers": k, "uri": uri, "epochs": args.grow}
                results[(reread_key(case, args.grow), f"ours k={k}")] = probe(spec, args)
    for peer in PEERS:
        if peer not in args.contenders:
            continue
        case = case_key(width, "binary")
        if not available[peer]:
            for k in args.workers:
                results[(case, f"{peer} k={k}")] = {"error": install_hint(peer)}
            continue
        out = folder / peer
        converted = convert(peer, folder / "source", out, args)
        for k in args.workers:
            if "error" in converted:
                results[(case, f"{peer} k={k}")] = {"error": f"conversion failed: {converted['error']}"}
                continue
            spec = {**base, "contender": peer, "workers": k, "uri": str(out)}
            results[(case, f"{peer} k={k}")] = probe(spec, args)
            if width.key == "100k" and args.grow > 1:
                spec["epochs"] = args.grow
                results[(reread_key(case, args.grow), f"{peer} k={k}")] = probe(spec, args)
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)


def case_key(width: Width, store: str) -> str:
    return width.label if not width.payload else f"{width.label}, {store}"


def reread_key(case: str, factor: int) -> str:
    """The runs that read the 1x table ``factor`` times: as many rows as the grown table's epoch."""
    return f"{case}, read {factor}x"


# -- the report ----------------------------------------------------------------------------


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
            once = "yes" if found["exactly_once"] else f"NO ({found['rows']:,} rows)"
            if label == "raw takes":
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


def takes_line(results: Results, case: str) -> list[str]:
    ours, takes = results.get((case, "ours k=0")), results.get((case, "raw takes"))
    if ours is None or takes is None or "error" in ours or "error" in takes:
        return []
    rate = ours["steady_rate"] / takes["steady_rate"] if takes["steady_rate"] else 0.0
    return [
        f"- Narrow rows, ours k=0 against the raw Lance takes of the same 64-row blocks: "
        f"{rate:.2f}x the rows/s after the first batch ({ours['steady_rate']:,.0f} against "
        f"{takes['steady_rate']:,.0f}); CPU per row {ours['cpu_us_per_row']:.2f} us against "
        f"{takes['cpu_us_per_row']:.2f} us."
    ]


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
        if preload is not None:
            rest = found["first_s"] - preload
            line += (
                f"; {preload:.2f} s of it is a fresh interpreter importing what the fork server "
                f"preloads (torch most of it), which no fork-safe start avoids; the other "
                f"{rest:.2f} s is {rest / ours['first_s']:.1f}x k=0's first batch"
            )
        lines.append(line)
    return lines


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
        "Each run is a fresh interpreter: one whole epoch (every id checked to come once), then "
        "the second epoch's first batch. Ours uses default settings, shuffled; lance.torch is "
        "unshuffled; litdata and mosaic shuffle. The peers store the same bytes for the binary "
        "and the blob table, so blob rows are compared with the peers' runs of the binary rows.",
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
    extra = takes_line(results, "narrow")
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


def _list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def main(argv: list[str] | None = None) -> int:
    """Write the rows, run every contender, print (and with ``--out`` publish) the section."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m benchmarks widths", description=__doc__.splitlines()[0])
    parser.add_argument("--narrow-rows", type=int, default=200_000)
    parser.add_argument("--rows-100k", type=int, default=20_000, help="rows of 100 KiB")
    parser.add_argument("--rows-1m", type=int, default=400, help="rows of 1 MiB")
    parser.add_argument("--batch-size", type=int, default=256, help="batch size of narrow rows")
    parser.add_argument("--wide-batch-size", type=int, default=32, help="batch size of wide rows")
    parser.add_argument("--workers", type=lambda text: [int(k) for k in _list(text)], default=[0, 2])
    parser.add_argument("--grow", type=int, default=1, help="also 100 KiB rows at this many times the rows")
    parser.add_argument("--cases", type=_list, default=["narrow", "100k", "1m"])
    parser.add_argument("--contenders", type=_list, default=list(CONTENDERS))
    parser.add_argument("--install", action="store_true", help="make the peers' environments first")
    parser.add_argument("--max-rss-gib", type=float, default=10.0, help="stop a run whose tree passes this")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    parser.add_argument("--work", default="/tmp/bench-widths", help="where the rows are written")
    parser.add_argument("--keep", action="store_true", help="keep the rows written (default: deleted)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--results", type=Path, default=None, help="also write every run's figures as JSON")
    parser.add_argument(
        "--from-results",
        type=Path,
        default=None,
        help="rebuild the section from a --results file (its run's options)",
    )
    parser.add_argument(
        "--grown-results",
        type=Path,
        default=None,
        help="with --from-results: add the peak RSS table of another run's --results made with --grow",
    )
    args = parser.parse_args(argv)
    unknown = sorted(set(args.contenders) - set(CONTENDERS)) + sorted(
        set(args.cases) - {"narrow", "100k", "1m"}
    )
    if unknown:
        parser.error(f"unknown contenders or cases: {unknown}")
    saved: dict[str, Any] | None = None
    if args.from_results is not None:  # the saved run's options, this call's --out
        saved = json.loads(args.from_results.read_text(encoding="utf-8"))
        out, grown = args.out, args.grown_results
        args = parser.parse_args(saved["command"].split()[4:])
        args.out, args.grown_results = out, grown
    if args.install and install():
        return 1
    args.command = saved["command"] if saved else " ".join(["python -m benchmarks widths", *argv])
    available = {name: envs.env_python(name).exists() for name in PEERS}
    widths = [
        width
        for width in (
            Width("narrow", "narrow", args.narrow_rows, 0, args.batch_size),
            Width("100k", "100 KiB", args.rows_100k, 100 << 10, args.wide_batch_size),
            Width("1m", "1 MiB", args.rows_1m, 1 << 20, args.wide_batch_size),
        )
        if width.key in args.cases
    ]
    if args.grow > 1 and "100k" in args.cases:
        label = f"100 KiB x{args.grow}"
        widths.append(
            Width("100k-grown", label, args.rows_100k * args.grow, 100 << 10, args.wide_batch_size, True)
        )
    if saved is not None:
        results = {(run["case"], run["contender"]): run["result"] for run in saved["runs"]}
        text = section(results, widths, args, saved["facts"], available, saved["seconds"])
        if args.grown_results is not None:
            text += "\n" + grown_section(json.loads(args.grown_results.read_text(encoding="utf-8")), parser)
        sections.publish(text, name="widths", out=args.out)
        return 0
    facts = machine_facts()
    started = time.perf_counter()
    results: Results = {}
    if "ours" in args.contenders and any(k > 0 for k in args.workers):
        found = envs.run_module(envs.this_python(), PROBE, PROBE_PRELOAD_SPEC, timeout=args.timeout)
        results[("start-up", "preload")] = found
    Path(args.work).mkdir(parents=True, exist_ok=True)
    try:
        for width in widths:
            measure_width(width, args, available, results)
    finally:
        if not args.keep:
            shutil.rmtree(args.work, ignore_errors=True)
    seconds = time.perf_counter() - started
    if args.results is not None:
        runs = [
            {"case": case, "contender": label, "result": found} for (case, label), found in results.items()
        ]
        saved = {"command": args.command, "facts": facts, "seconds": seconds, "runs": runs}
        args.results.write_text(json.dumps(saved, indent=1), encoding="utf-8")
    text = section(results, widths, args, facts, available, seconds)
    sections.publish(text, name="widths", out=args.out)
    return 0
