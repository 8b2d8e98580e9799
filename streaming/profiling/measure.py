"""One measured run: build the dataset and loader a user would, draw batches as a trainer
does, and record what happened (``Measured``).

The run draws at least the batches asked for; with ``past_first_window`` it goes on
until the loop has consumed more rows than the first shuffle windows of the rank's
splits hold (those are read before the first batch, so a rate measured inside them
is a rate from memory), unless the rank's rows fit in one window, the epoch ends, or
the loop has run ``max_seconds``; ``Measured.window`` says which.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..dataset.host import dataset_engine
from .memory import PeakWatch

__all__ = ["Measured", "measure"]

PAST = "past"
"""The loop consumed rows beyond the first windows: reading is in the rate."""
FITS = "fits"
"""Every row of the rank fits in the first windows: the rate is from memory."""
SHORT = "short"
"""The run stopped (epoch end or time) inside the first windows."""


@dataclass(frozen=True)
class Measured:
    """What one run of a loader measured (seconds, rows, bytes)."""

    batch_size: int
    num_workers: int
    num_splits: int
    block_rows: int
    shuffle_buffer_size: int
    open_seconds: float
    """Building the dataset: opening the table, sizing and planning the epoch."""
    first_batch_seconds: float
    """From the start (``open_seconds`` included) to the first batch in the trainer."""
    batches: int
    rows: int
    """Rows delivered after the first batch."""
    loop_seconds: float
    """From the first batch to the last one measured (training steps included)."""
    wait_seconds: float
    """Time the trainer spent inside ``next()`` after the first batch: waiting for data."""
    window: str
    """``"past"``, ``"fits"`` or ``"short"`` (see the module's constants)."""
    first_window_rows: int
    """Rows of the rank in the first window of each of its splits."""
    stats: dict[str, float] = field(repr=False)
    trainer_peak_bytes: int = 0
    trainer_peak_reset: bool = False
    """The trainer's mark was reset at the start (its peak is this run's)."""
    worker_peak_bytes: tuple[int, ...] = ()

    @property
    def rows_per_second(self) -> float:
        """Rows after the first batch, per second of the loop."""
        return self.rows / self.loop_seconds if self.loop_seconds > 0 else 0.0


@dataclass
class _Clock:
    start: float
    opened: float = 0.0
    first: float = 0.0
    first_rows: int = 0
    end: float = 0.0
    batches: int = 0
    waits: float = 0.0


def build(table: Any, *, batch_size: int, num_workers: int, settings: dict[str, Any]) -> tuple[Any, Any]:
    """The ``StreamingDataset`` and ``StreamingDataLoader`` of these settings (the
    package's own checks refuse what they cannot serve, as they would for the user)."""
    from ..dataset.dataset import StreamingDataset
    from ..loader.loader import StreamingDataLoader

    dataset = StreamingDataset(table, **settings)
    return dataset, StreamingDataLoader(dataset, batch_size=batch_size, num_workers=num_workers)


def measure(
    table: Any,
    *,
    batch_size: int,
    num_workers: int,
    batches: int,
    step_seconds: float,
    settings: dict[str, Any],
    past_first_window: bool = False,
    min_seconds: float = 0.0,
    max_seconds: float = 60.0,
    bar: Any = None,
    on_built: Callable[[Any], None] | None = None,
) -> tuple[Measured, Any]:
    """Run the loader of these settings for at least ``batches`` batches and
    ``min_seconds`` of loop (unless the epoch ends first); the measurement and the
    dataset (whose ``stats()`` and handle the caller may read). ``on_built`` is called
    with the dataset before the first batch is drawn.

    Raises:
        ValueError: a setting the package refuses; no batch came (an epoch already
            delivered).
    """
    watch = PeakWatch()
    clock = _Clock(time.perf_counter())
    dataset, loader = build(table, batch_size=batch_size, num_workers=num_workers, settings=settings)
    clock.opened = time.perf_counter()
    if on_built is not None:
        on_built(dataset)
    per_split, window_rows = max(1, dataset.split_length), dataset.plan.settings.window_rows
    first_window = dataset.num_splits // dataset.world_size * min(per_split, window_rows)
    wanted = first_window if past_first_window and per_split > window_rows else 0
    _draw(loader, dataset, clock, batches=batches, batch_size=batch_size, wanted_rows=wanted,
          step_seconds=step_seconds, seconds=(min_seconds, max_seconds), watch=watch, bar=bar)  # fmt: skip
    stats = dataset.stats()
    delivered = int(stats["rows_delivered"])
    window = FITS if per_split <= window_rows else PAST if delivered > first_window else SHORT
    return (
        Measured(
            batch_size=batch_size,
            num_workers=num_workers,
            num_splits=dataset.num_splits,
            block_rows=dataset.plan.settings.block_rows,
            shuffle_buffer_size=window_rows * dataset.num_splits,
            open_seconds=clock.opened - clock.start,
            first_batch_seconds=clock.first - clock.start,
            batches=clock.batches,
            rows=delivered - clock.first_rows,
            loop_seconds=clock.end - clock.first,
            wait_seconds=clock.waits,
            window=window,
            first_window_rows=first_window,
            stats=stats,
            trainer_peak_bytes=watch.trainer,
            trainer_peak_reset=watch.reset,
            worker_peak_bytes=watch.worker_peaks(),
        ),
        dataset,
    )


def _draw(
    loader: Any,
    dataset: Any,
    clock: _Clock,
    *,
    batches: int,
    batch_size: int,
    wanted_rows: int,
    step_seconds: float,
    seconds: tuple[float, float],
    watch: PeakWatch,
    bar: Any,
) -> None:
    """Draw ``batches`` batches and the least of ``seconds`` (least, most) of loop, then
    on until more than ``wanted_rows`` rows were delivered (or the most seconds of loop);
    time the waits in ``next()``."""
    engine = dataset_engine(dataset)
    least, most = seconds
    iterator = iter(loader)
    try:
        while True:
            asked = time.perf_counter()
            try:
                next(iterator)
            except StopIteration:
                break
            got = time.perf_counter()
            if clock.batches == 0:
                clock.first = got
                clock.first_rows = int(dataset.stats()["rows_delivered"])
                watch.read(engine.worker_counters)
            else:
                clock.waits += got - asked
                watch.read(engine.worker_counters, now=got)
            clock.batches += 1
            if bar is not None:
                bar.update(1)
            if step_seconds > 0:
                time.sleep(step_seconds)  # stands in for the training step
            # rows so far: every batch but an epoch's last is full, and the last ends the loop
            looped = got - clock.first
            if (
                clock.batches >= batches
                and looped >= least
                and (looped >= most or clock.batches * batch_size > wanted_rows)
            ):
                break
        clock.end = time.perf_counter()
        watch.read(engine.worker_counters)
    finally:
        iterator.close()
    if clock.batches == 0:
        raise ValueError("the loader delivered no batch: this epoch is already fully delivered")
