"""Worker-to-trainer transfer of numeric batches: the result pipe against shared-memory slots.

``python -m benchmarks transfer [--batches 4000] [--rows 256 ...] [--out docs/benchmarks.md]``

A child process (forkserver) sends batches of (id int64, label int32, vec
float32[width]) the way a DataLoader worker would: pickled through a
``multiprocessing`` queue, or through ``streaming.workers.transfer``'s ring with only
the parcel in the queue. The trainer's side receives each batch as fresh
arrays. Prints batches/s, rows/s and the trainer's CPU per batch for both, for
each batch size; with ``--out`` the table replaces the file's transfer section.
"""

from __future__ import annotations

import argparse
import multiprocessing
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import sections
from streaming.workers import transfer


def _batch(rows: int, width: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "id": np.arange(rows, dtype=np.int64),
        "label": np.arange(rows, dtype=np.int32),
        "vec": rng.random((rows, width), dtype=np.float32),
    }


def _send(queue: Any, count: int, rows: int, width: int, channel: transfer.Channel | None) -> None:
    batch = _batch(rows, width)
    for _ in range(count):
        parcel = None if channel is None else transfer.send(channel, 0, batch)
        queue.put(parcel if parcel is not None else {key: value.copy() for key, value in batch.items()})
    queue.put(None)


def measure(*, count: int, rows: int, width: int, slots: bool) -> tuple[float, float]:
    """(batches per second, trainer CPU µs per batch) for one way of sending."""
    context = multiprocessing.get_context("forkserver")
    queue = context.Queue(maxsize=4)  # the DataLoader keeps a few batches in flight
    channel = transfer.Channel.new(slots=6) if slots else None
    child = context.Process(target=_send, args=(queue, count, rows, width, channel))
    child.start()
    received = 0
    item = queue.get()
    started, cpu = time.perf_counter(), time.process_time()
    while item is not None:
        if isinstance(item, transfer.Parcel):
            transfer.receive(item)
        received += 1
        item = queue.get()
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    child.join()
    if channel is not None:
        transfer.release(channel, num_workers=1)
    return received / elapsed, cpu / received * 1e6


def main(argv: list[str] | None = None) -> int:
    """Run both ways for every batch size; print (and write) a table."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks transfer",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--batches", type=int, default=4000)
    parser.add_argument("--rows", type=int, nargs="+", default=[256, 2048])
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--out", type=Path, help="Markdown file whose transfer section is replaced")
    args = parser.parse_args(argv)
    lines = [
        "## Worker to trainer transfer",
        "",
        f"`python -m benchmarks transfer`: {args.batches:,} batches of (id int64, label int32, "
        f"vec float32[{args.width}]) from a forkserver child, received as fresh arrays.",
        "",
        "| rows a batch | KiB a batch | way | batches/s | rows/s | trainer CPU µs a batch |",
        "| ---: | ---: | --- | ---: | ---: | ---: |",
    ]
    for rows in args.rows:
        size = sum(value.nbytes for value in _batch(rows, args.width).values()) / 1024
        for label, slots in (("result pipe (pickled)", False), ("shared-memory slots", True)):
            rate, cpu = measure(count=args.batches, rows=rows, width=args.width, slots=slots)
            lines.append(f"| {rows} | {size:,.0f} | {label} | {rate:,.0f} | {rate * rows:,.0f} | {cpu:.1f} |")
    text = "\n".join(lines)
    sections.publish(text, name="transfer", out=args.out)
    return 0
