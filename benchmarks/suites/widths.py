"""Peers by row width: ours, lance.torch, litdata, mosaic on the same narrow, 100 KiB and 1 MiB rows.

    python -m benchmarks widths [--narrow-rows 200000] [--text-rows 200000] [--rows-100k 20000]
                                [--rows-1m 400] [--workers 0,2] [--repeats 1] [--grow 1]
                                [--cases narrow,text,100k,1m]
                                [--contenders ours,lance_torch,litdata,mosaic] [--install]
                                [--results run.json] [--out docs/benchmarks.md]
    python -m benchmarks widths --from-results run.json [--grown-results grow.json] [--out ...]

The same rows, written once as numpy files, then as every contender's format:

- narrow: (id int64, label int32, vec float32[128]), a Lance table of 16 fragments;
- narrow text (``--cases text``, not run by default): (id int64, label int32, text string),
  each text 20 to 200 characters (about 110 bytes: the row's id, a colon, lower-case
  letters, spaces and one in 16 an ``é``), a Lance table of 16 fragments;
- 100 KiB and 1 MiB: (id, label, img) whose ``img`` holds that many bytes (random, the
  row's id in the first 8), a Lance table with a plain ``binary`` column (how most
  people store images) and the same bytes in a blob column (``lance-encoding:blob``),
  fragments of about 256 MiB;
- litdata's chunks (``litdata.optimize``, 64 MB) and mosaicml-streaming's MDS shards
  (64 MiB, no compression) of the same rows.

Contenders, each in a fresh interpreter, at every ``--workers`` count k: ours
(``StreamingDataLoader(StreamingDataset(uri), batch_size, num_workers=k)``, default
settings, shuffled), lance.torch (``LanceDataset(uri, batch_size)``, unshuffled; its
fragments shared among k workers), litdata (``StreamingDataset(dir, shuffle=True)`` in
its ``StreamingDataLoader``) and mosaicml-streaming (``StreamingDataset(local=dir,
shuffle=True)`` in a torch ``DataLoader``); on each plain Lance table also the raw Lance
takes of shuffled 64-row blocks (Lance's fastest shuffled read, one thread, Arrow only).
litdata runs with its decode window aligned with its shuffle window
(``batch_decode=256``), and at k=0 for wide rows also with its own window (the row
``litdata k=0, its auto decode window``): see ``width_contenders.LITDATA_WINDOW``.
litdata and mosaic run in virtual environments of their own (mosaic's package is also
named ``streaming``), made by ``--install`` under the cache folder (without torchvision:
PyPI's build needs the CUDA build of torch, and the environments have the CPU build
pinned here); one that is missing is reported, not run. The peers' rows are the same
bytes for the binary and the blob table, so the blob rows are compared with the peers'
runs of the same width.

Each run reads one whole epoch (every id checked to come exactly once, every wide
row's bytes checked alike for every contender), then starts a second epoch to its first
batch; ``--repeats N`` runs every contender N times in rounds and keeps its median
run. Reported: rows/s after the first batch and end to end (from building the loader to the epoch's end),
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
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.cases.width_probe import PROBE_PRELOAD_SPEC
from benchmarks.cases.width_report import grown_section, section
from benchmarks.cases.width_tables import (
    AUTO_WINDOW,
    CONTENDERS,
    NAMES,
    PEERS,
    Results,
    Width,
    case_key,
    first_batch_lines,
    reread_key,
)
from benchmarks.harness import envs, sections
from benchmarks.harness.machine import load_average, machine_facts

__all__ = ["PROBE", "first_batch_lines", "main"]

PROBE = "benchmarks.cases.width_probe"


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- the rows, in every format -------------------------------------------------------------


def write_source(folder: Path, width: Width) -> None:
    """The rows as numpy files (ids, and vectors, texts or payloads), written in chunks."""
    folder.mkdir(parents=True)
    ids = np.arange(width.rows, dtype=np.int64)
    np.save(folder / "ids.npy", ids)
    rng = np.random.default_rng(0)
    if width.text:
        write_texts(folder, width.rows, rng)
        return
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


def write_texts(folder: Path, rows: int, rng: np.random.Generator) -> None:
    """Each row's text, ``"{id}:"`` then 20 to 200 letters, spaces and some ``é``, as UTF-8
    bytes one after another (``text_bytes.npy``) and their offsets (``text_offsets.npy``)."""
    letters = list("abcdefghijklmnopqrstuvwxyz abcdefghijklmnopqrstuvwxyz é")
    texts = []
    for row in range(rows):
        picked = rng.integers(0, len(letters), int(rng.integers(20, 200)))
        texts.append(f"{row}:" + "".join(letters[i] for i in picked.tolist()))
    encoded = [text.encode() for text in texts]
    offsets = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum([len(value) for value in encoded], out=offsets[1:])
    np.save(folder / "text_offsets.npy", offsets)
    np.save(folder / "text_bytes.npy", np.frombuffer(b"".join(encoded), dtype=np.uint8))


def write_lance(source: Path, uri: str, width: Width, *, blob: bool) -> None:
    """A Lance table of the source rows in ``width.fragments`` fragments."""
    import lance
    import pyarrow as pa

    from benchmarks.cases.width_probe import source_rows

    if width.text:
        field = pa.field("text", pa.string())
    elif not width.payload:
        field = pa.field("vec", pa.list_(pa.float32(), 128))
    elif blob:
        field = pa.field("img", pa.large_binary(), metadata={"lance-encoding:blob": "true"})
    else:
        field = pa.field("img", pa.binary())
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("label", pa.int32()), field])
    edges = np.linspace(0, width.rows, width.fragments + 1).astype(np.int64)
    for index, (start, stop) in enumerate(zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True)):
        rows = source_rows(str(source), start, stop - start)
        if width.text:
            data = pa.array(rows["text"], pa.string())
        elif width.payload:
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


def measure_width(
    width: Width, args: argparse.Namespace, available: dict[str, bool], results: Results
) -> None:
    """Write the width's rows in every format, run every contender ``--repeats`` times (in
    rounds, one run of each contender a round), keep each one's median run, delete the rows."""
    folder = Path(args.work) / width.key
    shutil.rmtree(folder, ignore_errors=True)
    started = time.perf_counter()
    write_source(folder / "source", width)
    uris = {}
    for store in width.stores:
        uris[store] = str(folder / f"{store}.lance")
        write_lance(folder / "source", uris[store], width, blob=store == "blob")
    _log(f"{width.label}: {width.rows:,} rows written in {time.perf_counter() - started:.0f} s")
    jobs = lance_jobs(width, uris, args) + peer_jobs(width, folder, args, available)
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {key: [] for key, _ in jobs}
    for _ in range(args.repeats):
        for key, spec in jobs:
            runs[key].append(spec if "error" in spec else probe(spec, args))
    for key, found in runs.items():
        results[key] = median_run(found)
    if not args.keep:
        shutil.rmtree(folder, ignore_errors=True)


Job = tuple[tuple[str, str], dict[str, Any]]
"""(case, contender label) and the probe's spec (or ``{"error": ...}``: not run)."""


def _base(width: Width) -> dict[str, Any]:
    return {
        "rows": width.rows,
        "payload": width.payload,
        "batch": width.batch,
        "narrow": not width.payload,
        "text": width.text,
        "fragments": width.fragments,
    }


def lance_jobs(width: Width, uris: dict[str, str], args: argparse.Namespace) -> list[Job]:
    """Ours and lance.torch on each Lance table, the raw takes on the plain one."""
    jobs: list[Job] = []
    for store, uri in uris.items():
        case, base = case_key(width, store), {**_base(width), "uri": uri}
        for contender in ("ours", "lance_torch"):
            if contender in args.contenders:
                for k in args.workers:
                    spec = {**base, "contender": contender, "workers": k, "blob": store == "blob"}
                    jobs.append(((case, f"{NAMES[contender]} k={k}"), spec))
        if store == "binary" and not width.grown and "ours" in args.contenders:
            jobs.append(((case, "raw takes"), {**base, "contender": "lance_takes", "workers": 0}))
        if width.key == "100k" and store == "binary" and args.grow > 1 and "ours" in args.contenders:
            for k in args.workers:
                spec = {**base, "contender": "ours", "workers": k, "epochs": args.grow}
                jobs.append(((reread_key(case, args.grow), f"ours k={k}"), spec))
    return jobs


def peer_jobs(width: Width, folder: Path, args: argparse.Namespace, available: dict[str, bool]) -> list[Job]:
    """Each peer on its own format of the rows (converted here, not timed); for wide rows also
    litdata with its own decode window (``"decode": "auto"``) at k=0."""
    jobs: list[Job] = []
    case, base = case_key(width, "binary"), _base(width)
    for peer in (peer for peer in PEERS if peer in args.contenders):
        if not available[peer]:
            jobs += [((case, f"{peer} k={k}"), {"error": install_hint(peer)}) for k in args.workers]
            continue
        converted = convert(peer, folder / "source", folder / peer, args)
        for k in args.workers:
            spec = {**base, "contender": peer, "workers": k, "uri": str(folder / peer)}
            if "error" in converted:
                spec = {"error": f"conversion failed: {converted['error']}"}
            jobs.append(((case, f"{peer} k={k}"), spec))
            if width.key == "100k" and args.grow > 1:
                jobs.append(((reread_key(case, args.grow), f"{peer} k={k}"), {**spec, "epochs": args.grow}))
        if peer == "litdata" and width.payload and not width.grown and "error" not in converted:
            spec = {**base, "contender": peer, "workers": 0, "uri": str(folder / peer), "decode": "auto"}
            jobs.append(((case, AUTO_WINDOW), spec))
    return jobs


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median end-to-end rate (the lower middle of an even count), with the
    range of that rate over the runs; the first error if any run failed."""
    failed = [found for found in runs if "error" in found]
    if failed:
        return failed[0]
    ranked = sorted(runs, key=lambda found: found["whole_rate"])
    chosen = dict(ranked[(len(ranked) - 1) // 2])
    chosen["repeats"] = len(runs)
    chosen["whole_range"] = [ranked[0]["whole_rate"], ranked[-1]["whole_rate"]]
    return chosen


def _list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def main(argv: list[str] | None = None) -> int:
    """Write the rows, run every contender, print (and with ``--out`` publish) the section."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m benchmarks widths", description=__doc__.splitlines()[0])
    parser.add_argument("--narrow-rows", type=int, default=200_000)
    parser.add_argument("--text-rows", type=int, default=200_000, help="rows of narrow text")
    parser.add_argument("--rows-100k", type=int, default=20_000, help="rows of 100 KiB")
    parser.add_argument("--rows-1m", type=int, default=400, help="rows of 1 MiB")
    parser.add_argument("--batch-size", type=int, default=256, help="batch size of narrow rows and text")
    parser.add_argument("--wide-batch-size", type=int, default=32, help="batch size of wide rows")
    parser.add_argument("--workers", type=lambda text: [int(k) for k in _list(text)], default=[0, 2])
    parser.add_argument("--repeats", type=int, default=1, help="runs of each contender, in rounds")
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
        set(args.cases) - {"narrow", "text", "100k", "1m"}
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
            Width("text", "narrow text", args.text_rows, 0, args.batch_size, text=True),
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
