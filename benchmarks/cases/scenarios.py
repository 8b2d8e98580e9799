"""In-process scenarios of ours only: plan at scale, resume, and the mixing trade-off."""

from __future__ import annotations

import itertools
import statistics
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.cases.contenders import BATCH_SIZE, NUM_SPLITS
from benchmarks.harness.measure import Caps, close_iterator, time_items
from benchmarks.harness.tables import TableRef


def plan_timing(*, fragments: int, rows_per_fragment: int, repeats: int) -> dict[str, float]:
    """Median seconds to build the pure plan (S=64, shuffled) and to compute one window read."""
    from streaming.core.plan import EpochPlan, PlanSettings, window_rows_for

    settings = PlanSettings(
        num_splits=64,
        shuffle=True,
        seed=0,
        epoch=0,
        block_rows=64,
        window_rows=window_rows_for(shuffle_buffer_size=32768, num_splits=64, block_rows=64),
        clump_rows=1,
    )
    builds, reads = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        plan = EpochPlan(list(range(fragments)), [rows_per_fragment] * fragments, settings)
        built = time.perf_counter()
        plan.window_read([(0, 0)])
        builds.append(built - start)
        reads.append(time.perf_counter() - built)
    return {"build_s": statistics.median(builds), "read_s": statistics.median(reads)}


def _state_at(table: TableRef, fraction: float) -> dict[str, Any]:
    """Our state after ``fraction`` of an epoch went through the loader (k=0, batch 256)."""
    from streaming import StreamingDataLoader, StreamingDataset

    dataset = StreamingDataset(table.open(), num_splits=NUM_SPLITS)
    loader = StreamingDataLoader(dataset, batch_size=BATCH_SIZE)
    batches = iter(loader)
    for _ in itertools.islice(batches, int(fraction * len(loader))):
        pass
    state = dataset.state_dict()
    close_iterator(batches)
    return state


def _first_batch_after_load(table: TableRef, state: dict[str, Any]) -> tuple[float, int]:
    """Seconds from ``load_state_dict`` to the first batch, and the rows left to deliver."""
    from streaming import StreamingDataLoader, StreamingDataset

    dataset = StreamingDataset(table.open(), num_splits=NUM_SPLITS)
    start = time.perf_counter()
    dataset.load_state_dict(state)
    remaining = len(dataset)
    batches = iter(StreamingDataLoader(dataset, batch_size=BATCH_SIZE))
    next(batches)
    seconds = time.perf_counter() - start
    close_iterator(batches)
    return seconds, remaining


def resume_timing(table: TableRef, *, repeats: int) -> dict[str, Any]:
    """Median time to the first batch after loading a 0% and a 90% state (interleaved)."""
    states = {"0%": _state_at(table, 0.0), "90%": _state_at(table, 0.9)}
    seconds: dict[str, list[float]] = {name: [] for name in states}
    remaining: dict[str, int] = {}
    for _ in range(repeats):
        for name, state in states.items():
            took, remaining[name] = _first_batch_after_load(table, state)
            seconds[name].append(took)
    return {
        name: {"seconds": statistics.median(seconds[name]), "remaining": remaining[name]} for name in states
    }


def mean_distinct(labels: np.ndarray, batch_size: int) -> float:
    """Mean number of distinct labels per full batch of consecutive labels."""
    full = labels[: len(labels) // batch_size * batch_size].reshape(-1, batch_size)
    if full.size == 0:
        return float("nan")
    ordered = np.sort(full, axis=1)
    return float(np.mean((np.diff(ordered, axis=1) != 0).sum(axis=1) + 1))


def _stream_labels(table: TableRef, block_rows: int, caps: Caps) -> tuple[np.ndarray, float]:
    """Labels of ours direct iteration (S=1) in order, and steady rows/s after the first."""
    from streaming import StreamingDataset

    dataset = StreamingDataset(table.open(), num_splits=1, block_rows=block_rows)
    iterator = iter(dataset)
    labels = [next(iterator)["label"]]
    start = time.perf_counter()
    deadline = start + caps.seconds
    for sample in iterator:
        labels.append(sample["label"])
        if len(labels) % 256 == 0 and (len(labels) >= caps.rows or time.perf_counter() >= deadline):
            break
    rate = (len(labels) - 1) / (time.perf_counter() - start)
    close_iterator(iterator)
    return np.asarray(labels), rate


@dataclass(frozen=True)
class MixingRow:
    """One block size of the trade-off table."""

    block_rows: int
    sorted_rate: float
    wide_rate: float
    rows_measured: int
    ratio: float
    loader_rate: float = float("nan")


def mixing_row(
    sorted_table: TableRef, wide_table: TableRef, *, labels: int, block_rows: int, caps: Caps
) -> MixingRow:
    """Rows/s (direct and loader) and mixing ratio of ours for one ``block_rows``.

    The shuffle buffer is the default one. The ratio compares the measured batches
    with as many rows of a uniform random permutation of the same labels (seed 0).
    """
    from streaming import StreamingDataLoader, StreamingDataset

    seen, sorted_rate = _stream_labels(sorted_table, block_rows, caps)
    every = np.arange(sorted_table.rows, dtype=np.int64) * labels // sorted_table.rows
    uniform = np.random.default_rng(0).permutation(every)[: len(seen)]
    ratio = mean_distinct(seen, BATCH_SIZE) / mean_distinct(uniform, BATCH_SIZE)
    wide = time_items(
        lambda: iter(StreamingDataset(wide_table.open(), num_splits=NUM_SPLITS, block_rows=block_rows)),
        size=None,
        caps=caps,
    )
    loader = time_items(
        lambda: iter(
            StreamingDataLoader(
                StreamingDataset(wide_table.open(), num_splits=NUM_SPLITS, block_rows=block_rows),
                batch_size=BATCH_SIZE,
            )
        ),
        size=lambda batch: len(batch["id"]),
        caps=caps,
    )
    return MixingRow(block_rows, sorted_rate, wide.rate, len(seen), ratio, loader.rate)
