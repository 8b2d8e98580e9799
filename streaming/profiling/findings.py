"""What ``streaming.profile`` found: the measurements (``LoaderProfile``), the report
``lance-streaming profile`` prints, and the settings to change, each with the measured
number behind it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

__all__ = ["LoaderProfile", "advise", "report"]

KEEPS_UP = 0.10
"""Below this share of the loop spent waiting for data, the loader keeps up."""
MANY_REQUESTS = 10.0
"""Requests per 1,000 rows above which a remote table's blocks are too small."""
SMALL_REMOTE_BLOCK = 1024
"""block_rows below which a remote table's reads are many small requests."""
SLOW_START_S = 5.0
"""A first batch slower than this is worth a smaller first read."""
LARGE_ROW = 256 * 1024
"""Bytes per row above which inline binary columns should be blob-encoded."""


@dataclass(frozen=True)
class LoaderProfile:
    """What ``profile`` measured (seconds, rows, bytes); ``None`` where it could not measure."""

    table_uri: str
    version: int
    num_splits: int
    block_rows: int
    shuffle_buffer_size: int
    batch_size: int
    num_workers: int
    step_seconds: float
    open_seconds: float
    """Building the dataset: opening the table, sizing and planning the epoch."""
    first_batch_seconds: float
    """From the start (``open_seconds`` included) to the first batch in the trainer."""
    batches: int
    rows: int
    loop_seconds: float
    """From the first batch to the last one measured."""
    wait_seconds: float
    """Time the trainer spent inside ``next()`` after the first batch: waiting for data."""
    stats: dict[str, float] = field(repr=False)
    """``dataset.stats()`` after the loop: read, transform and convert seconds, bytes, rows."""
    trainer_peak_bytes: int
    worker_peak_bytes: tuple[int, ...]
    """Peak resident memory of each worker process (empty without workers or without /proc)."""
    requests: int | None
    """Read requests to the table's storage; ``None``: not countable from this process."""
    requests_note: str
    kind: str
    """Where the table is: ``"local"`` (a local disk), ``"bucket"`` (object storage) or
    ``"remote"`` (a LanceDB server), as the package's reader tells them apart."""
    cache_dir: str | None
    plain_binary_columns: tuple[str, ...]
    """Binary columns stored inline (not blob-encoded)."""

    @property
    def remote(self) -> bool:
        """The table is on object storage or a LanceDB server (not on a local disk)."""
        return self.kind != "local"

    @property
    def rows_per_second(self) -> float:
        """Rows after the first batch, per second of the loop."""
        return self.rows / self.loop_seconds if self.loop_seconds > 0 else 0.0

    @property
    def batches_per_second(self) -> float:
        """Batches after the first one, per second of the loop."""
        return (self.batches - 1) / self.loop_seconds if self.loop_seconds > 0 else 0.0

    @property
    def wait_share(self) -> float:
        """The share of the loop the trainer waited for data (0 to 1)."""
        return self.wait_seconds / self.loop_seconds if self.loop_seconds > 0 else 0.0

    @property
    def requests_per_1k_rows(self) -> float | None:
        """Read requests per 1,000 rows read, where counted."""
        rows = self.stats.get("rows_read", 0)
        return None if self.requests is None or not rows else 1000.0 * self.requests / rows

    def report(self) -> list[str]:
        """The measured numbers as the lines ``lance-streaming profile`` prints."""
        return report(self)

    def advice(self) -> list[str]:
        """The settings to change, each with the measured number behind it (most useful
        first); a single line saying so when the loader keeps up with the training step."""
        return advise(self)


def _size(nbytes: float) -> str:
    return f"{nbytes / 2**20:,.1f} MiB" if nbytes >= 2**20 else f"{nbytes / 1024:,.1f} KiB"


def _per_1k(seconds: float, rows: float) -> float:
    return 1000.0 * seconds / rows if rows else 0.0


def report(result: LoaderProfile) -> list[str]:
    """The measured numbers, one fact per line."""
    workers = ", ".join(_size(peak) for peak in result.worker_peak_bytes) or "none measured"
    requests = result.requests_per_1k_rows
    counted = "not known" if requests is None else f"{requests:,.1f} per 1,000 rows"
    return [
        f"table: {result.table_uri} at version {result.version}: num_splits={result.num_splits}, "
        f"block_rows={result.block_rows}, shuffle_buffer_size={result.shuffle_buffer_size}",
        f"loader: batch_size={result.batch_size}, num_workers={result.num_workers}, "
        f"training step {1000 * result.step_seconds:.0f} ms per batch",
        f"first batch: {result.first_batch_seconds:.2f} s "
        f"({result.open_seconds:.2f} s of it opening and planning the table)",
        f"after it: {result.batches - 1} batches, {result.rows:,} rows in {result.loop_seconds:.3f} s: "
        f"{result.rows_per_second:,.0f} rows/s, {result.batches_per_second:,.1f} batches/s",
        *_costs(result),
        f"peak memory: trainer {_size(result.trainer_peak_bytes)}; workers {workers}",
        f"requests: {counted} ({result.requests_note})",
        *_short_run(result),
    ]


def _costs(result: LoaderProfile) -> list[str]:
    stats, rows_read, delivered = result.stats, result.stats.get("rows_read", 0), _delivered(result)
    per_row = "s per 1,000 rows delivered"
    return [
        "where the time goes (summed over threads and processes):",
        f"  reading            {_per_1k(stats['read_seconds'], rows_read):.3f} s per 1,000 rows read "
        f"({_size(stats['bytes_read'])} in {int(rows_read):,} rows, {int(stats['windows_read'])} windows)",
        f"  transforms         {_per_1k(stats['transform_seconds'], delivered):.3f} {per_row}",
        f"  Arrow to samples   {_per_1k(stats['convert_seconds'], delivered):.3f} {per_row}",
        f"  waiting in the trainer: {result.wait_seconds:.3f} s of {result.loop_seconds:.3f} s "
        f"({100 * result.wait_share:.0f}% of the loop; transfer from workers included)",
    ]


def _short_run(result: LoaderProfile) -> list[str]:
    if result.stats.get("windows_read", 0) > 2 * result.num_splits:
        return []
    return [
        f"note: the run read {int(result.stats.get('windows_read', 0))} shuffle windows for "
        f"{result.num_splits} splits (the first of each before the first batch, then read-ahead), so "
        "steady-state reading is barely in these numbers; draw more batches (--batches) to measure it"
    ]


def advise(result: LoaderProfile) -> list[str]:
    """The settings to change, most useful first; one line saying so when none is needed."""
    if result.step_seconds > 0 and result.wait_share < KEEPS_UP:
        return [
            f"the loader keeps up: the trainer waits for data {100 * result.wait_share:.0f}% of the "
            f"loop with a {1000 * result.step_seconds:.0f} ms step; no setting needs to change"
        ]
    found = _stage_advice(result) + _start_advice(result) + _blob_advice(result)
    if not found and result.num_workers > 0:
        found.append(
            "batch_size or num_workers=0: reading and transforms take little time per row, so the wait "
            "is in handing batches over from the workers; larger batches, or no workers, hand over less often"
        )
    if not found:
        found.append("no setting stands out: reading and turning rows into samples cost little per row")
    if result.step_seconds <= 0:
        found.insert(
            0,
            f"no training step was given (--step-ms): {result.rows_per_second:,.0f} rows/s is the "
            "loader's ceiling here; give your step's time to see whether the trainer would wait, and "
            "if it would, change what follows",
        )
    else:
        found.insert(
            0,
            f"the loader is the bottleneck: the trainer waits for data {100 * result.wait_share:.0f}% "
            f"of the loop with a {1000 * result.step_seconds:.0f} ms step",
        )
    return found


def _delivered(result: LoaderProfile) -> float:
    """Rows delivered in the run: a transform runs only on rows the loop reaches (and a few
    batches ahead), where reads fill whole windows ahead."""
    return result.stats.get("rows_delivered", 0)


def _stage_advice(result: LoaderProfile) -> list[str]:
    stats = result.stats
    reading = _per_1k(stats["read_seconds"], stats.get("rows_read", 0))
    transforming = _per_1k(stats["transform_seconds"] + stats["convert_seconds"], _delivered(result))
    more = max(2, 2 * result.num_workers)
    cpus = os.cpu_count() or 1
    if transforming > reading:
        return [
            f"num_workers: turning rows into samples takes {transforming:.3f} s per 1,000 rows "
            f"against {reading:.3f} s reading; each worker runs the transform in parallel: try "
            f"num_workers={min(more, cpus)} (or transform_parallelism for a transform that frees the GIL)"
        ]
    found = []
    requests = result.requests_per_1k_rows
    if result.remote and (
        (requests is not None and requests > MANY_REQUESTS) or result.block_rows < SMALL_REMOTE_BLOCK
    ):
        measured = f"{requests:.1f} requests per 1,000 rows" if requests is not None else "small blocks"
        found.append(
            f"block_rows: {measured} with block_rows={result.block_rows}; each block is one request "
            f"to the storage, so raise block_rows (say {4 * result.block_rows}) and "
            "shuffle_buffer_size with it"
        )
    if result.kind == "bucket" and result.cache_dir is None:
        found.append(
            "cache_dir: every epoch and every resume reads this table from object storage again; a "
            "cache_dir on a local disk keeps what the first epoch read (see docs/object-storage.md)"
        )
    if result.num_workers < cpus:
        found.append(
            f"num_workers: reading takes {reading:.3f} s per 1,000 rows; more worker processes read in "
            f"parallel: try num_workers={min(more, cpus)}"
        )
    return found


def _start_advice(result: LoaderProfile) -> list[str]:
    if result.first_batch_seconds < SLOW_START_S:
        return []
    remote = (
        " together with a smaller block_rows (on a remote table a window is at least one block per "
        "split, so a smaller shuffle_buffer_size alone changes nothing)"
        if result.remote
        else ""
    )
    return [
        f"shuffle_buffer_size: the first batch took {result.first_batch_seconds:.1f} s; the first read "
        f"fills a shuffle window (shuffle_buffer_size={result.shuffle_buffer_size}); a smaller one starts "
        f"sooner{remote}, at some cost in mixing (docs/object-storage.md)"
    ]


def _blob_advice(result: LoaderProfile) -> list[str]:
    rows = result.stats.get("rows_read", 0)
    per_row = result.stats["bytes_read"] / rows if rows else 0.0
    if per_row < LARGE_ROW or not result.plain_binary_columns:
        return []
    names = ", ".join(result.plain_binary_columns)
    return [
        f"blob encoding: rows average {_size(per_row)} and {names} stored inline; store large binaries "
        "with blob encoding (lance-encoding:blob, see docs/multimodal.md) so reads fetch them in "
        "batched reads and memory stays bounded"
    ]
