"""The cost of the always-on wait figures of `stats()`: recording one batch against the loop's time per batch.

    python -m benchmarks waits [--rows 100000] [--batch-size 64] [--workers 2] [--repeats 3]

A table of ``--rows`` rows (id, label, float32[128]) in 4 fragments on local disk,
4 splits. The loop: ``StreamingDataLoader(batch_size=...)`` with 0 and with
``--workers`` workers drains the epoch; its time per batch after the first (median
of ``--repeats`` runs) is what one batch of a training loop that never computes
costs, the least a batch can cost. The recording: what the loader's iterator does
for each batch to keep the figures (two clock readings and ``Waits.add``; with
workers, two more readings and ``Waits.add_worker`` per worker message), timed over
200,000 batches (best of 5 passes). Prints both and their ratio, which is the cost
of the figures as a share of the cheapest loop (the target: below 1%).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from typing import Any

from streaming import StreamingDataLoader, StreamingDataset
from streaming.core.stats import Waits

from ..harness.tables import wide_chunk, write_table

PASSES = 200_000
TARGET = 0.01


def record_micros(workers: int) -> float:
    """Microseconds the iterator spends keeping one batch's wait figures (best of 5)."""
    clock = time.perf_counter
    best = float("inf")
    for _ in range(5):
        waits = Waits()
        start = clock()
        for _ in range(PASSES):
            asked = clock()
            for worker in range(workers):  # one message of shares per worker and batch
                message = clock()
                waits.add_worker(worker, clock() - message)
            waits.add(clock() - asked)
        best = min(best, (clock() - start) / PASSES * 1e6)
    return best


def loop_micros(uri: str, *, batch_size: int, workers: int) -> tuple[float, dict[str, Any]]:
    """Microseconds per batch after the first, draining one epoch; and the figures."""
    dataset = StreamingDataset(uri, num_splits=4, shuffle_seed=1)
    loader = StreamingDataLoader(dataset, batch_size=batch_size, num_workers=workers)
    iterator = iter(loader)
    next(iterator)
    start, batches = time.perf_counter(), 0
    for _ in iterator:
        batches += 1
    elapsed = time.perf_counter() - start
    return elapsed / max(1, batches) * 1e6, dataset.stats()


def main(argv: list[str] | None = None) -> None:
    """Print the recording's cost per batch, the loop's time per batch, and their ratio."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks waits", description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        uri = write_table(folder, "waits", rows=args.rows, fragments=4, chunk=wide_chunk).uri
        for workers in (0, args.workers):
            runs = [
                loop_micros(uri, batch_size=args.batch_size, workers=workers) for _ in range(args.repeats)
            ]
            loop = statistics.median(micros for micros, _ in runs)
            figures = runs[-1][1]
            cost = record_micros(workers)
            verdict = "below" if cost / loop < TARGET else "ABOVE"
            p50, p95, p99 = (1e6 * figures[f"wait_{name}_seconds"] for name in ("p50", "p95", "p99"))
            print(
                f"num_workers={workers}, batch_size={args.batch_size}: the loop {loop:.1f} us a batch "
                f"({args.batch_size / loop * 1e6:,.0f} rows/s); keeping the wait figures {cost:.2f} us "
                f"a batch: {100 * cost / loop:.2f}% of the loop ({verdict} 1%); the run's figures: "
                f"p50 {p50:.1f} us, p95 {p95:.1f} us, p99 {p99:.1f} us "
                f"over {int(figures['wait_batches'])} batches"
            )
