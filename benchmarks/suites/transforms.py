"""Transforms: time to the first batch and peak memory against the peer, and parallel transforms.

    python -m benchmarks transforms [--rows 4000] [--image-rows 3000] [--workers 0,2]
                                    [--out docs/benchmarks.md]

Two transforms, given to ours and to the peer (``lancedb.streaming``) with the same
table and settings (2 splits, ``StreamingDataLoader(batch_size=64)``, every other
setting at each loader's default), with k=0 and k=2 workers:

- ``slow``: about 1 ms per row that releases the GIL (``time.sleep(0.001 * rows)`` per batch);
- ``image``: decodes a stored 224x224 JPEG per row to a 224x224x3 uint8 array (PIL).

Each case runs in a fresh interpreter (the peer's workers with ``spawn``, ours with
its default start method). Then ours runs the slow transform with k=0 in this
process, with ``transform_parallelism=1`` and ``4``: rows/s over the epoch, first batch included.
The section between the ``transforms`` markers of ``--out`` is replaced.
"""

from __future__ import annotations

import argparse
import functools
import io
import itertools
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from benchmarks.cases.contenders import import_ours, preload
from benchmarks.harness import sections
from benchmarks.harness.machine import load_average, machine_facts
from benchmarks.harness.measure import Caps, Run, close_iterator, time_items, tree_rss_kib
from benchmarks.harness.process import run_json
from benchmarks.harness.tables import TableRef, narrow_chunk, write_table

BATCH = 64
SIDE = 224
PEAK_BATCHES = 16  # a second peak is taken until this many batches were delivered
SAMPLE_S = 0.01
FRAGMENTS = 8
SPLITS = 2  # the default num_splits of a two-rank job; each worker of k=2 owns one split


def slow(batch: pa.RecordBatch) -> list[dict[str, Any]]:
    """About 1 ms per row with the GIL released, as a C decoder or a remote call would."""
    time.sleep(0.001 * batch.num_rows)
    ids, labels = batch.column("id").to_numpy(), batch.column("label").to_numpy()
    return [{"id": i, "label": label} for i, label in zip(ids, labels, strict=True)]


def image(batch: pa.RecordBatch) -> list[dict[str, Any]]:
    """Every row's JPEG bytes decoded to a 224x224x3 uint8 array."""
    from PIL import Image

    ids, blobs = batch.column("id").to_numpy(), batch.column("jpeg").to_pylist()
    return [
        {"id": i, "image": np.asarray(Image.open(io.BytesIO(blob)).convert("RGB"))}
        for i, blob in zip(ids, blobs, strict=True)
    ]


TRANSFORMS = {"slow": slow, "image": image}
LABELS = {"slow": "slow, ~1 ms/row, GIL released", "image": "JPEG -> 224x224x3 uint8"}


@functools.cache
def _jpegs(count: int = 16) -> list[bytes]:
    """``count`` distinct 224x224 JPEGs: seeded smooth colours plus noise, quality 90."""
    from PIL import Image

    rng = np.random.default_rng(0)
    ramp = np.linspace(0, 1, SIDE, dtype=np.float32)
    encoded = []
    for _ in range(count):
        colour = rng.random((1, 1, 3), dtype=np.float32)
        base = 200 * colour * (ramp[:, None, None] + ramp[None, :, None]) / 2
        pixels = np.clip(base + rng.normal(0, 12, (SIDE, SIDE, 3)), 0, 255).astype(np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format="JPEG", quality=90)
        encoded.append(buffer.getvalue())
    return encoded


def jpeg_chunk(start: int, count: int) -> pa.Table:
    """Rows of (id int64, label int32, jpeg binary), the JPEGs cycled by id."""
    ids = np.arange(start, start + count, dtype=np.int64)
    images = _jpegs()
    blobs = pa.array([images[i % len(images)] for i in ids.tolist()], pa.binary())
    return pa.table({"id": ids, "label": (ids % 1000).astype(np.int32), "jpeg": blobs})


def build_loader(
    who: str, handle: Any, transform: str, *, workers: int, parallelism: int | None = None
) -> Any:
    """``StreamingDataLoader(StreamingDataset(handle, ...), batch_size=64)`` of ours or the peer's."""
    if who == "peer":
        from lancedb.streaming import StreamingDataLoader, StreamingDataset
    else:
        from streaming import StreamingDataLoader, StreamingDataset  # type: ignore[assignment]
    settings: dict[str, Any] = {"num_splits": SPLITS, "transform": TRANSFORMS[transform]}
    if parallelism is not None:
        settings["transform_parallelism"] = parallelism
    extra = {"multiprocessing_context": "spawn"} if who == "peer" and workers else {}
    return StreamingDataLoader(
        StreamingDataset(handle, **settings), batch_size=BATCH, num_workers=workers, **extra
    )


class PeakSampler:
    """The largest ``tree_rss_kib()`` seen, sampled every ``SAMPLE_S`` on a thread."""

    def __init__(self) -> None:
        self.peak_kib = tree_rss_kib()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_kib = max(self.peak_kib, tree_rss_kib())
            self._stop.wait(SAMPLE_S)

    def now(self) -> int:
        """The peak so far in KiB, a sample taken now included."""
        self.peak_kib = max(self.peak_kib, tree_rss_kib())
        return self.peak_kib

    def stop(self) -> int:
        """Stop sampling; the peak in KiB, a last sample included."""
        self._stop.set()
        self._thread.join()
        return self.now()


def probe(spec: dict[str, Any]) -> dict[str, Any]:
    """In a fresh interpreter: time to the first batch, peak tree RSS then and over ``PEAK_BATCHES``."""
    for name in ("torch", "lance", "lancedb", "lancedb.streaming", "PIL.Image"):
        __import__(name)
    import_ours()
    handle = TableRef(**spec["table"]).open()  # both loaders get the LanceDB table
    baseline = tree_rss_kib()
    sampler = PeakSampler()
    start = time.perf_counter()
    batches = iter(build_loader(spec["who"], handle, spec["transform"], workers=spec["workers"]))
    first = next(batches)
    first_s = time.perf_counter() - start
    first_peak = sampler.now()
    _check(first, spec["transform"])
    del first
    delivered = 1 + sum(1 for _ in itertools.islice(batches, PEAK_BATCHES - 1))
    peak = sampler.stop()
    close_iterator(batches)
    return {
        "first_s": first_s,
        "batches": delivered,
        "baseline_mib": baseline / 1024,
        "peak_mib": first_peak / 1024,
        "growth_mib": (first_peak - baseline) / 1024,
        "later_growth_mib": (peak - baseline) / 1024,
    }


def _check(batch: dict[str, Any], transform: str) -> None:
    """The loader delivered what the transform makes (so the benchmark times the right work)."""
    if transform == "image" and (tuple(batch["image"].shape[1:]), str(batch["image"].dtype)) != (
        (SIDE, SIDE, 3),
        "torch.uint8",
    ):
        raise RuntimeError(f"expected uint8 images of {SIDE}x{SIDE}x3, got {batch['image'].shape}")
    if len(batch["id"]) != BATCH:
        raise RuntimeError(f"expected a batch of {BATCH} rows, got {len(batch['id'])}")


def run_probe(spec: dict[str, Any], *, timeout: float) -> dict[str, Any]:
    """``probe(spec)`` in a fresh interpreter; a failure comes back as ``{"error": ...}``."""
    return run_json("benchmarks", "transforms", "--probe", json.dumps(spec), timeout=timeout)


def parallel_run(table: TableRef, parallelism: int, *, cap_s: float) -> Run:
    """Ours, k=0, the slow transform on ``parallelism`` threads: the whole epoch or ``cap_s``."""
    preload()  # imports are not timed (the first run would pay them)
    handle = table.open()
    return time_items(
        lambda: iter(build_loader("ours", handle, "slow", workers=0, parallelism=parallelism)),
        size=lambda batch: len(batch["id"]),
        caps=Caps(rows=table.rows, seconds=cap_s),
    )


def _ratio(ours: dict[str, Any], peer: dict[str, Any], field: str) -> float | None:
    if "error" in ours or "error" in peer or not peer[field]:
        return None
    return float(ours[field]) / float(peer[field])


def _verdict(value: float | None, bound: float, *, at_most: bool) -> str:
    if value is None:
        return "n/a"
    return "PASS" if (value <= bound if at_most else value >= bound) else "FAIL"


def _probe_row(transform: str, who: str, workers: int, result: dict[str, Any]) -> str:
    loader = f"{who}, k={workers}"
    if "error" in result:
        return f"| {LABELS[transform]} | {loader} | failed: {result['error']} | | | | |"
    return (
        f"| {LABELS[transform]} | {loader} | {result['first_s']:.2f} | {result['baseline_mib']:,.0f} | "
        f"{result['peak_mib']:,.0f} | {result['growth_mib']:,.0f} | {result['later_growth_mib']:,.0f} |"
    )


def _ratio_row(transform: str, workers: int, probes: dict[tuple[str, str, int], dict[str, Any]]) -> str:
    ours, peer = probes[(transform, "ours", workers)], probes[(transform, "peer", workers)]
    first, growth = _ratio(ours, peer, "first_s"), _ratio(ours, peer, "growth_mib")
    shown = ["n/a" if value is None else f"{value:.3g}x" for value in (first, growth)]
    return (
        f"| {LABELS[transform]} | {workers} | {shown[0]} | <= 1x | {_verdict(first, 1, at_most=True)} | "
        f"{shown[1]} | <= 1.5x | {_verdict(growth, 1.5, at_most=True)} |"
    )


def section(
    probes: dict[tuple[str, str, int], dict[str, Any]], rates: dict[int, Run], facts: dict[str, Any]
) -> str:
    """The Markdown section: every probe, the ours/peer ratios and the parallelism ratio."""
    workers = sorted({key[2] for key in probes})
    lines = [
        "## Transforms",
        "",
        f"`{facts['command']}` ({facts['date']}, commit {facts['commit']}, load average "
        f"{facts['load']} at the start, {facts['load_end']} at the end): tables of {facts['rows']:,} "
        f"rows (id, label) for the slow transform and {facts['image_rows']:,} rows (id, label, a 224x224 "
        f"JPEG) for the image one, {FRAGMENTS} fragments, {SPLITS} splits (the default of a two-rank "
        "job; with few splits the peer reads ahead only `io_queue_depth` x `read_batch_size` rows per "
        "split, so a loader that transforms far ahead of the consumer shows), "
        f"`StreamingDataLoader(batch_size={BATCH})`, other settings at each loader's default. Each case "
        "runs in a fresh interpreter that imports torch, Lance, LanceDB, both loaders and PIL and opens "
        "the LanceDB table first. First batch: from building the dataset to the loader's first batch "
        "(worker start-up included; the peer's workers use `spawn`, ours its default). Peak RSS: the "
        "largest sum of the resident memory of the process and every descendant (workers, forkserver), "
        f"sampled every {SAMPLE_S * 1000:.0f} ms from right before the dataset is built (the baseline) "
        f"to the first batch, and on to batch {PEAK_BATCHES}; growth is that peak minus the baseline (the "
        "targets use the growth to the first batch). Shared pages count once per process, alike for "
        "both loaders; worker processes count whole, interpreter and torch included.",
        "",
        "| transform | loader | first batch (s) | baseline RSS (MiB) | peak tree RSS to first batch (MiB) "
        f"| growth to first batch (MiB) | growth to batch {PEAK_BATCHES} (MiB) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines += [
        _probe_row(t, who, k, probes[(t, who, k)])
        for t in TRANSFORMS
        for k in workers
        for who in ("peer", "ours")
    ]
    lines += [
        "",
        "| transform | k | first batch, ours / peer | target | verdict "
        "| RSS growth to first batch, ours / peer | target | verdict |",
        "| --- | ---: | ---: | --- | --- | ---: | --- | --- |",
    ]
    lines += [_ratio_row(t, k, probes) for t in TRANSFORMS for k in workers]
    lines += _parallel_lines(rates)
    return "\n".join(lines)


def _whole_rate(run: Run) -> float:
    """Rows/s from building the loader to the last row counted, the first batch included."""
    seconds = run.first_s + run.steady_s
    return run.rows / seconds if seconds > 0 else 0.0


def _parallel_lines(rates: dict[int, Run]) -> list[str]:
    one, four = rates[1], rates[4]
    ratio = _whole_rate(four) / _whole_rate(one) if _whole_rate(one) and four.rows else None
    lines = [
        "",
        "Ours, k=0, the slow transform, in the benchmark process, through the whole epoch (or the time "
        "cap). Throughput counts from building the loader, the first batch included: a loader that "
        "transforms ahead of the consumer does that work before its first batch, and a rate taken "
        "after it would leave the work out (shown for reference).",
        "",
        "| transform_parallelism | first batch (s) | rows | stopped by | rows/s, whole run "
        "| rows/s after the first batch |",
        "| ---: | ---: | ---: | --- | ---: | ---: |",
    ]
    for parallelism, run in rates.items():
        lines.append(
            f"| {parallelism} | {run.first_s:.2f} | {run.rows:,} | {run.stopped_by} "
            f"| {_whole_rate(run):,.0f} | {run.rate:,.0f} |"
        )
    shown = "n/a" if ratio is None else f"{ratio:.3g}x"
    verdict = _verdict(ratio, 2, at_most=False)
    lines += ["", f"transform_parallelism 4 / 1, whole run: {shown} (target >= 2x: {verdict})"]
    return lines


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def measure(args: argparse.Namespace, work: str) -> tuple[dict[tuple[str, str, int], Any], dict[int, Run]]:
    """Every probe (peer then ours, per transform and worker count), then the parallelism runs."""
    tables = {
        "slow": write_table(work, "slow", rows=args.rows, fragments=FRAGMENTS, chunk=narrow_chunk),
        "image": write_table(work, "images", rows=args.image_rows, fragments=FRAGMENTS, chunk=jpeg_chunk),
    }
    probes: dict[tuple[str, str, int], Any] = {}
    for transform, workers, who in itertools.product(TRANSFORMS, args.workers, ("peer", "ours")):
        spec = {"table": tables[transform].to_json(), "who": who, "transform": transform, "workers": workers}
        probes[(transform, who, workers)] = result = run_probe(spec, timeout=args.timeout)
        _log(f"{transform}, {who}, k={workers}: {result}")
    rates = {}
    for parallelism in (1, 4):
        rates[parallelism] = run = parallel_run(tables["slow"], parallelism, cap_s=args.seconds)
        _log(f"transform_parallelism={parallelism}: {_whole_rate(run):,.0f} rows/s ({run.stopped_by})")
    return probes, rates


def _workers(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def main(argv: list[str] | None = None) -> int:
    """Measure, print the section, and replace it in ``--out`` when given."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m benchmarks transforms", description=__doc__)
    parser.add_argument("--rows", type=int, default=4_000, help="rows of the slow transform's table")
    parser.add_argument("--image-rows", type=int, default=3_000, help="rows of the image table")
    parser.add_argument("--workers", type=_workers, default=[0, 2], help="worker counts, e.g. 0,2")
    parser.add_argument("--seconds", type=float, default=15.0, help="time cap of a parallelism run")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per fresh-process case")
    parser.add_argument("--out", type=Path, default=None, help="Markdown file whose section is replaced")
    parser.add_argument("--probe", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe is not None:
        print(json.dumps(probe(json.loads(args.probe))))
        return 0
    facts: dict[str, Any] = {**machine_facts(), "rows": args.rows, "image_rows": args.image_rows}
    facts["command"] = " ".join(["python -m benchmarks transforms", *argv])
    with tempfile.TemporaryDirectory(prefix="lance-bench-transforms-") as work:
        probes, rates = measure(args, work)
    facts["load_end"] = load_average()
    sections.publish(section(probes, rates, facts), name="transforms", out=args.out)
    return 0
