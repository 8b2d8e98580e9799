"""The trainer's cost of committing one worker batch's report (``Ledger.commit``).

    python -m benchmarks commit [--splits 16] [--workers 2] [--batches 20000]

A rank owns ``--splits`` splits, shared by ``--workers`` DataLoader workers that
deliver batches of 256 in turn; each report moves the worker's splits on by its
share of the batch. Prints the CPU microseconds per commit (best of 5 passes),
what the trainer's main thread spends on each batch's progress.
"""

from __future__ import annotations

import argparse
import time

from streaming.core.ledger import Ledger
from streaming.core.progress import SplitProgress, fresh

BATCH = 256


def _reports(splits: int, workers: int, batches: int) -> list[dict[int, SplitProgress]]:
    """Each batch's report: the worker's splits, each moved on by its share of the batch."""
    groups = [[split for split in range(splits) if split % workers == group] for group in range(workers)]
    counts, reports = [0] * splits, []
    for index in range(batches):
        group = index % workers
        for split in groups[group]:
            counts[split] += BATCH // len(groups[group])
        reports.append({split: SplitProgress(counts[split], counts[split]) for split in groups[group]})
    return reports


def commit_micros(splits: int, workers: int, batches: int) -> float:
    """CPU microseconds per ``Ledger.commit`` over ``batches`` reports (one pass)."""
    ledger = Ledger(range(splits))
    ledger.restart(fresh(splits), total=1 << 40, by_samples=False)
    reports = _reports(splits, workers, batches)
    start = time.process_time()
    for progress in reports:
        ledger.commit(progress)
    return (time.process_time() - start) / batches * 1e6


def main(argv: list[str] | None = None) -> None:
    """Print the CPU cost of one commit (best of 5 passes)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks commit", description=__doc__.split("\n")[0])
    parser.add_argument("--splits", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batches", type=int, default=20000)
    args = parser.parse_args(argv)
    best = min(commit_micros(args.splits, args.workers, args.batches) for _ in range(5))
    print(f"Ledger.commit, {args.splits} splits, {args.workers} workers: {best:.1f} us CPU per batch")
