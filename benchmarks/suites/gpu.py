"""GPU-fed training: a real training step fed by the loader, for k = 0, 1, 2, 4, 8 workers.

    python -m benchmarks gpu [--rows 50000] [--seconds 10] [--workers 0,1,2,4,8]
                             [--device auto] [--out docs/benchmarks.md] [--smoke]

Two tables of (id int64, label int32, png binary) rows, a (``--rows``) and b (half
as many), 16 fragments each; each PNG is a 64x64 RGB image (seeded blocks plus
noise, ``IMAGES`` distinct ones cycled by id). For each worker count k, on table a
alone (``StreamingDataset(a, num_splits=16)``) and on a 70/30 ``StreamingMixture``
of a and b (``stop="first_exhausted"``), ``StreamingDataLoader(batch_size=128,
num_workers=k, pin_memory=True)`` (``pin_memory`` only where CUDA is) feeds a
training step: a small conv net, cross-entropy, forward, backward and an SGD step,
on CUDA when ``torch.cuda.is_available()`` (``--device`` picks), else on CPU. The
dataset's transform decodes every row's PNG with Pillow to a 64x64x3 uint8 array
and keeps its label, on the CPU of whichever process iterates (trainer or worker).

Per configuration, in this process: the first batch (from building the dataset to
the end of the first step), then the steady state until ``--seconds`` pass or
``ROW_CAP`` of table a's rows are delivered (so no worker exits inside it): rows/s,
the device-busy fraction (on CUDA the steps' GPU time from CUDA events, on CPU the
steps' wall time, over the steady state's wall time) and CPU microseconds per row of
the whole process tree (trainer, fork server, workers). A warm-up step on made-up
data and one batch through a loader with workers come first, so neither CUDA's
initialisation nor the fork server's start lands in a configuration's first batch.
``--smoke``: tiny tables, k = 0 and 2, one second each. The section between the
``gpu`` markers of ``--out`` is replaced.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from benchmarks.cases.gpu_step import IMAGES, IN_FLIGHT, Trainer, decode, png_chunk
from benchmarks.harness import sections
from benchmarks.harness.machine import load_average, machine_facts
from benchmarks.harness.measure import Caps, Run, close_iterator, time_items, tree_cpu_seconds, unreaped
from benchmarks.harness.tables import write_table

BATCH = 128
SMOKE_ROWS, SMOKE_SECONDS, SMOKE_WORKERS, SMOKE_BATCH = 1024, 1.0, [0, 2], 64
"""``--smoke``: rows of table a, steady seconds, worker counts and batch size."""
SPLITS = 16  # every k of 1, 2, 4, 8 divides the rank's splits
FRAGMENTS = 16
WEIGHTS = {"a": 0.7, "b": 0.3}
MIXTURE = "mixture 70/30"
SOURCES = ("one table", MIXTURE)
ROW_CAP = 0.9
"""The steady state stops after this share of table a's rows (fewer than either epoch)."""
SETTLE_S = 10.0
"""Most seconds to wait, before a configuration, for the last one's workers to be reaped."""
PERSISTENT = True
"""``persistent_workers`` with k > 0, as training loops that use workers set it."""


@dataclass(frozen=True)
class Setup:
    """What every configuration shares: the tables, the batch size and the device."""

    uris: tuple[str, str]
    batch: int
    pin: bool


def _dataset(uri: str) -> Any:
    from streaming import StreamingDataset

    return StreamingDataset(uri, num_splits=SPLITS, transform=decode)


def make_loader(setup: Setup, *, source: str, workers: int) -> Any:
    """The loader of ``source`` (one of ``SOURCES``) with ``workers`` workers."""
    from streaming import StreamingDataLoader, StreamingMixture

    data: Any = _dataset(setup.uris[0])
    if source == MIXTURE:
        data = StreamingMixture(
            {"a": data, "b": _dataset(setup.uris[1])},
            weights=WEIGHTS,
            global_batch_size=setup.batch,
            stop="first_exhausted",
        )
    return StreamingDataLoader(
        data,
        batch_size=setup.batch,
        num_workers=workers,
        pin_memory=setup.pin,
        persistent_workers=PERSISTENT and workers > 0,
    )


def _steps(make: Callable[[], Any], *, trainer: Trainer, notes: list[str]) -> Generator[int, None, None]:
    """A training step per batch of ``make()``'s loader; yields the batch's rows.

    The first step is not counted (it is the first item ``time_items`` times).
    Closing this generator shuts the loader's workers down.
    """
    batches = iter(make())
    try:
        for index, batch in enumerate(batches):
            trainer.step(batch, counted=index > 0)
            yield len(batch["label"])
    finally:
        notes.append(close_iterator(batches))


@dataclass(frozen=True)
class Result:
    """One configuration: the timed run and the steps' share of its steady state."""

    run: Run
    busy: float
    note: str


def settle() -> list[int]:
    """Wait (at most ``SETTLE_S``) until no process of this tree is exited and unreaped;
    returns those still unreaped (empty when settled)."""
    deadline = time.perf_counter() + SETTLE_S
    while (waiting := unreaped(tree_cpu_seconds()[1])) and time.perf_counter() < deadline:
        time.sleep(0.01)
    return waiting


def measure_one(setup: Setup, *, trainer: Trainer, source: str, workers: int, caps: Caps) -> Result:
    """Time one configuration: first batch, steady rows/s, busy fraction, CPU per row."""
    trainer.reset()
    notes = [f"pids {waiting} unreaped at the start" if (waiting := settle()) else ""]
    run = time_items(
        lambda: _steps(
            lambda: make_loader(setup, source=source, workers=workers), trainer=trainer, notes=notes
        ),
        size=int,
        caps=caps,
    )
    busy = trainer.busy_seconds() / run.steady_s if run.steady_s > 0 else math.nan
    if math.isnan(run.cpu_s):
        notes.append("CPU not counted: a process of the tree exited during the steady state")
    return Result(run, busy, "; ".join(note for note in [run.note, *notes] if note))


def measure(
    setup: Setup, *, trainer: Trainer, workers: list[int], caps: Caps
) -> dict[tuple[str, int], Result]:
    """Every (source, k), after the warm-ups; progress on stderr."""
    trainer.warm_up(setup.batch)
    if any(workers):  # the fork server starts here, not in the first configuration with workers
        warm = _steps(
            lambda: make_loader(setup, source=SOURCES[0], workers=max(workers)), trainer=trainer, notes=[]
        )
        next(warm)
        warm.close()
    results = {}
    for source in SOURCES:
        for k in workers:
            results[(source, k)] = result = measure_one(
                setup, trainer=trainer, source=source, workers=k, caps=caps
            )
            print(f"{source}, k={k}: {result.run.rate:,.0f} rows/s, busy {result.busy:.2f}", file=sys.stderr)
    return results


def _device_words(device: torch.device) -> str:
    if device.type == "cuda":
        return f"CUDA ({torch.cuda.get_device_name(device)}), `pin_memory=True`"
    cuda = "CUDA available but not chosen" if torch.cuda.is_available() else "no CUDA"
    return f"CPU ({cuda}, so `pin_memory=False`)"


def _busy_words(device: torch.device) -> str:
    if device.type == "cuda":
        return (
            "the GPU time from each step's start to its end (CUDA events: gaps between a step's kernels "
            f"count, waits between steps do not; at most {IN_FLIGHT} steps queued ahead)"
        )
    return "the wall time of the steps (on the same cores as the transform threads and workers)"


def _row(source: str, k: int, result: Result) -> str:
    run = result.run
    stopped = run.stopped_by + (f" ({result.note})" if result.note else "")
    return (
        f"| {source} | {k} | {run.first_s:.2f} | {run.rate:,.0f} | {result.busy:.2f} "
        f"| {run.cpu_per_row_us:.1f} | {run.cores:.2f} | {stopped} |"
    )


def report(
    results: dict[tuple[str, int], Result], *, command: str, setup: Setup, device: torch.device
) -> str:
    """The section's markdown."""
    facts = machine_facts()
    busy = "GPU busy" if device.type == "cuda" else "step busy (CPU)"
    lines = [
        "## GPU-fed training",
        "",
        f"`{command}`: device {_device_words(device)}; tables of 64x64 RGB PNGs (id, label, png; "
        f"{IMAGES} distinct images), {FRAGMENTS} fragments, {SPLITS} splits, batches of {setup.batch}; "
        "the transform decodes each PNG with Pillow; the step: a small conv net, cross-entropy, "
        f"SGD; torch {torch.__version__}; {facts['cores']} cores ({facts['cpu']}), "
        f"commit {facts.get('commit', 'unknown')}, {facts['date']}; load average {load_average()}.",
        "",
        f"| source | k | first batch (s) | rows/s | {busy} | CPU us/row | cores busy | stopped by |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    lines += [_row(source, k, result) for (source, k), result in results.items()]
    lines += [
        "",
        "- rows/s, busy and CPU count the steady state after the first batch; the first batch runs "
        "from building the dataset to the end of the first training step (workers' start included).",
        f"- {busy}: {_busy_words(device)} over the steady state's wall time; the rest of the time "
        "the trainer waits for the loader's next batch.",
        "- CPU us/row: user + system time of the whole process tree (trainer, fork server, workers).",
    ]
    if device.type != "cuda":
        lines.append(
            "- Measured without a GPU: the step competes with the decoding for the same cores, so this "
            "table says little about how well the loader feeds a GPU. The GPU table is still to be "
            "filled: `python -m benchmarks gpu --out docs/benchmarks.md` on a machine with CUDA "
            "replaces this section."
        )
    return "\n".join(lines)


def _workers(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _command(args: argparse.Namespace) -> str:
    if args.smoke:
        return "python -m benchmarks gpu --smoke"
    workers = ",".join(map(str, args.workers))
    return f"python -m benchmarks gpu --rows {args.rows} --seconds {args.seconds:g} --workers {workers}"


def main(argv: list[str] | None = None) -> None:
    """Build the tables, measure every configuration, print (and with ``--out`` publish) the section."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks gpu", description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000, help="rows of table a (b has half as many)")
    parser.add_argument("--seconds", type=float, default=10.0, help="steady state per configuration")
    parser.add_argument("--workers", type=_workers, default=[0, 1, 2, 4, 8], help="worker counts, e.g. 0,2")
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    parser.add_argument("--out", type=Path, default=None, help="Markdown file whose gpu section is replaced")
    parser.add_argument("--smoke", action="store_true", help="tiny tables, k = 0 and 2, one second each")
    args = parser.parse_args(argv)
    if args.smoke:
        args.rows, args.seconds, args.workers = SMOKE_ROWS, SMOKE_SECONDS, SMOKE_WORKERS
    device = _device(args.device)
    caps = Caps(rows=int(args.rows * ROW_CAP), seconds=args.seconds)
    with tempfile.TemporaryDirectory(prefix="lance-bench-gpu-") as folder:
        tables = [
            write_table(folder, name, rows=rows, fragments=FRAGMENTS, chunk=png_chunk)
            for name, rows in (("a", args.rows), ("b", args.rows // 2))
        ]
        batch = SMOKE_BATCH if args.smoke else BATCH
        setup = Setup(uris=(tables[0].uri, tables[1].uri), batch=batch, pin=device.type == "cuda")
        results = measure(setup, trainer=Trainer(device), workers=args.workers, caps=caps)
    text = report(results, command=_command(args), setup=setup, device=device)
    sections.publish(text, name="gpu", out=args.out)
