"""What ``streaming.profile`` found: the measurements (``LoaderProfile``), the report
``lance-streaming profile`` prints, and the advice: only changes that were tried on
the same table and beat the user's own settings by more than their run-to-run noise,
each printed with its measured before and after."""

from __future__ import annotations

from dataclasses import dataclass, field

from .encoding import LARGE_ROW
from .measure import FITS, PAST
from .trials import Noise, Tried

__all__ = ["LoaderProfile", "advise", "report"]

KEEPS_UP = 0.10
"""Below this share of the loop spent waiting for data, the loader keeps up."""


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
    window: str
    """``"past"``: the run read past the first shuffle windows, so reading is in the rate;
    ``"fits"``: the rank's rows fit in one window, read before the first batch, so the rate
    is from memory; ``"short"``: the run ended (epoch or time) inside the first windows."""
    first_window_rows: int
    stats: dict[str, float] = field(repr=False)
    """``dataset.stats()`` after the run: reads, transforms, conversion, and the loop's waits."""
    trainer_peak_bytes: int
    """The trainer's own high-water mark (``VmHWM``) during the run."""
    trainer_peak_reset: bool
    """False where the mark could not be reset at the start: then it is the process's peak."""
    worker_peak_bytes: tuple[int, ...]
    """Each worker process's own high-water mark (empty without workers or without /proc)."""
    requests: int | None
    """Read requests to the table's storage; ``None``: not countable from this process."""
    requests_note: str
    kind: str
    """Where the table is: ``"local"`` (a local disk), ``"bucket"`` (object storage) or
    ``"remote"`` (a LanceDB server), as the package's reader tells them apart."""
    cache_dir: str | None
    plain_binary_columns: tuple[str, ...]
    """Binary columns stored inline (not blob-encoded)."""
    noise: Noise | None = None
    """The run-to-run spread of the user's settings, measured beside the tries."""
    tried: tuple[Tried, ...] = ()
    """Each change tried, with its run and verdict."""
    tries_note: str = ""
    """Why nothing was tried, where nothing was."""

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

    @property
    def advised(self) -> tuple[Tried, ...]:
        """The changes that helped, most useful first: faster ones by their gain in rows/s,
        then those that only start sooner."""
        faster = sorted((t for t in self.tried if t.verdict == "faster"), key=lambda t: -t.rate_gain)
        sooner = sorted((t for t in self.tried if t.verdict == "starts sooner"), key=lambda t: -t.first_gain)
        return (*faster, *sooner)

    def report(self) -> list[str]:
        """The measured numbers as the lines ``lance-streaming profile`` prints."""
        return report(self)

    def advice(self) -> list[str]:
        """The changes to make, each tried and measured (most useful first), or one line
        saying that none helped or none is needed."""
        return advise(self)


def _size(nbytes: float) -> str:
    return f"{nbytes / 2**20:,.1f} MiB" if nbytes >= 2**20 else f"{nbytes / 1024:,.1f} KiB"


def _per_1k(seconds: float, rows: float) -> float:
    return 1000.0 * seconds / rows if rows else 0.0


def _ms(seconds: float) -> str:
    return f"{1000 * seconds:,.2f} ms"


def report(result: LoaderProfile) -> list[str]:
    """The measured numbers, one fact per line."""
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
        _window(result),
        *_costs(result),
        _waits(result),
        _memory(result),
        f"requests: {counted} ({result.requests_note})",
        *_tries(result),
    ]


def _window(result: LoaderProfile) -> str:
    first = f"{result.first_window_rows:,} rows"
    if result.window == PAST:
        return f"rate: past the first shuffle windows ({first}, read before the first batch): reads are in it"
    if result.window == FITS:
        return (
            f"rate: from memory: the table fits in one shuffle window ({first} for this rank, all read "
            "before the first batch), so no read is left for the loop; a larger table reads while it runs"
        )
    return (
        f"rate: mostly from memory: the run ended inside the first shuffle windows ({first}, read before "
        "the first batch)"
    )


def _costs(result: LoaderProfile) -> list[str]:
    stats, rows_read, delivered = (
        result.stats,
        result.stats.get("rows_read", 0),
        result.stats["rows_delivered"],
    )
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


def _waits(result: LoaderProfile) -> str:
    stats = result.stats
    quantiles = ", ".join(f"{name} {_ms(stats[f'wait_{name}_seconds'])}" for name in ("p50", "p95", "p99"))
    workers = sorted(name for name in stats if name.startswith("wait_worker_"))
    shares = ", ".join(f"worker {name.split('_')[2]} {stats[name]:.3f} s" for name in workers)
    return (
        f"waits for a batch (stats()): {quantiles}, longest {_ms(stats['wait_longest_seconds'])}; "
        f"{stats['wait_seconds']:.3f} s in all over {int(stats['wait_batches'])} batches "
        f"({stats['wait_first_seconds']:.3f} s of it the first)"
        + (f"; waiting on {shares}" if shares else "")
    )


def _memory(result: LoaderProfile) -> str:
    since = "during the run" if result.trainer_peak_reset else "since the trainer started"
    workers = ", ".join(_size(peak) for peak in result.worker_peak_bytes)
    if not workers:
        workers = "none (num_workers=0)" if result.num_workers == 0 else "not readable (no /proc)"
    return (
        "peak memory (each process's own high-water mark, VmHWM): "
        f"trainer {_size(result.trainer_peak_bytes)} {since}; workers {workers}"
    )


def _tries(result: LoaderProfile) -> list[str]:
    if result.noise is None:
        return [f"tried: nothing ({result.tries_note})"]
    noise = result.noise
    lines = [
        f"tried on this table, against {len(noise.rates)} more runs of your settings "
        f"({noise.rate_median:,.0f} rows/s, first batch {_s(noise.first_median)}; run-to-run noise "
        f"{100 * noise.rate:.0f}% in rows/s and {100 * noise.first:.0f}% in the first batch; a change "
        f"counts above {100 * noise.rate_margin:.0f}% and {100 * noise.first_margin:.0f}%):"
    ]
    lines += [f"  {_tried(tried)}" for tried in result.tried]
    lines += _not_tried(result)
    return lines


def _tried(tried: Tried) -> str:
    if tried.measured is None:
        said = "not valid here" if tried.verdict == "refused" else "failed"
        return f"{tried.candidate.label}: {said}, not advised: {tried.error}"
    return f"{tried.candidate.label}: {_before_after(tried)}: {tried.verdict}"


def _before_after(tried: Tried) -> str:
    run, noise = tried.measured, tried.baseline
    assert run is not None and noise is not None
    return (
        f"{noise.rate_median:,.0f} -> {run.rows_per_second:,.0f} rows/s ({tried.rate_gain:.2f}x), "
        f"first batch {_s(noise.first_median)} -> {_s(run.first_batch_seconds)}"
    )


def _s(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds:.3f} s"


def _not_tried(result: LoaderProfile) -> list[str]:
    rows = result.stats.get("rows_read", 0)
    per_row = result.stats["bytes_read"] / rows if rows else 0.0
    tried = any("blob_encoding" in tried.candidate.changes for tried in result.tried)
    if tried or per_row < LARGE_ROW or not result.plain_binary_columns or result.kind == "remote":
        return []
    return [
        f"  not tried: blob encoding of {', '.join(result.plain_binary_columns)} (rows average "
        f"{_size(per_row)}, stored inline; tries=True tries it on two local copies of the first rows)"
    ]


def advise(result: LoaderProfile) -> list[str]:
    """The changes to make, most useful first, each with its measured before and after."""
    if result.step_seconds > 0 and result.wait_share < KEEPS_UP:
        return [
            f"the loader keeps up: the trainer waits for data {100 * result.wait_share:.0f}% of the "
            f"loop with a {1000 * result.step_seconds:.0f} ms step; no setting needs to change"
        ]
    if result.noise is None:
        return [f"nothing advised: no setting was tried ({result.tries_note})"]
    advised = result.advised
    if not advised:
        return [_nothing_helped(result)]
    return [_advice(tried) for tried in advised]


def _advice(tried: Tried) -> str:
    candidate = tried.candidate
    caveat = f" ({candidate.caveat})" if candidate.caveat else ""
    return f"{candidate.label}: {_before_after(tried)}, {tried.verdict}: {candidate.why}{caveat}"


def _nothing_helped(result: LoaderProfile) -> str:
    per_batch = result.loop_seconds / max(1, result.batches - 1)
    if result.step_seconds > 0:
        return (
            f"no setting tried made the loader faster; the trainer waits for data "
            f"{100 * result.wait_share:.0f}% of the loop at {1000 * result.step_seconds:.0f} ms a step, "
            f"a batch every {_ms(per_batch)} in all"
        )
    return (
        f"no setting tried made the loader faster; it is not the bottleneck at {_ms(per_batch)} a step "
        f"or more (it hands over a batch every {_ms(per_batch)} here, with no training step given: "
        "--step-ms)"
    )
