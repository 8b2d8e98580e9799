"""The settings ``profile`` tries: which changes are candidates, each one's short
measured run on the user's table, the run-to-run noise of the user's own settings,
and which changes helped by more than that noise.

Every candidate is built as the user would build it, so the package's own checks
decide whether it is valid: one they refuse is reported as refused, never advised.
The user's settings run three times (before, between and after the candidates), so
the noise is measured on the same table, machine and moment as the candidates.
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .measure import Measured

__all__ = ["KEYWORDS", "Candidate", "Noise", "Tried", "candidates", "judge", "noise"]

FLOOR = 0.05
"""The least margin a change must win by, however quiet the machine (5%)."""
SAVED_S = 0.02
"""The least time a faster change must save over its run's rows (shorter gains are noise)."""
SOONER_S = 0.05
"""The least time a change must take off the first batch to count as starting sooner."""
CACHE_DIR_SHOWN = "<a directory on a local disk>"
ORDER = (
    "changes which rows are read together and so the order of samples: a checkpoint of "
    "the old setting does not resume under it"
)


KEYWORDS = ("num_workers", "batch_size", "block_rows", "shuffle_buffer_size", "cache_dir", "blob_encoding")
"""What ``profile`` tries: the keywords whose changes it runs, and ``blob_encoding`` (of
inline binary columns, on two local copies: ``encoding.py``)."""


@dataclass(frozen=True)
class Candidate:
    """One change to try: ``profile`` keywords and the values to try them at."""

    changes: dict[str, Any]
    why: str
    """What it may improve, in one phrase."""
    caveat: str = ""
    step_factor: float = 1.0
    """The training step's time scales with the batch by this factor."""

    @property
    def label(self) -> str:
        """The change as the user writes it: ``num_workers=2``."""
        return ", ".join(
            f"{name}={CACHE_DIR_SHOWN if name == 'cache_dir' else value}"
            for name, value in self.changes.items()
        )


@dataclass(frozen=True)
class Noise:
    """How much the user's own settings vary from run to run (relative spread)."""

    rates: tuple[float, ...]
    firsts: tuple[float, ...]

    @property
    def rate(self) -> float:
        return _spread(self.rates)

    @property
    def first(self) -> float:
        return _spread(self.firsts)

    @property
    def rate_margin(self) -> float:
        """The least relative gain in rows/s that counts: the noise, at least ``FLOOR``."""
        return max(FLOOR, self.rate)

    @property
    def first_margin(self) -> float:
        return max(FLOOR, self.first)

    @property
    def rate_median(self) -> float:
        return statistics.median(self.rates)

    @property
    def first_median(self) -> float:
        return statistics.median(self.firsts)


def _spread(values: tuple[float, ...]) -> float:
    middle = statistics.median(values) if values else 0.0
    return (max(values) - min(values)) / middle if middle > 0 else 0.0


def noise(runs: list[Measured]) -> Noise:
    """The spread of the user's settings over ``runs`` (rows/s and first batch)."""
    return Noise(tuple(run.rows_per_second for run in runs), tuple(run.first_batch_seconds for run in runs))


@dataclass(frozen=True)
class Tried:
    """A candidate's run and what it showed against the user's settings."""

    candidate: Candidate
    measured: Measured | None = field(repr=False)
    baseline: Noise | None = field(default=None, repr=False)
    """The runs it was compared with: the user's settings (or, for blob encoding, the copy
    as stored)."""
    error: str = ""
    rate_gain: float = 0.0
    """Its rows/s over the user's (the median of their runs)."""
    first_gain: float = 0.0
    """The user's first batch time over its own (above 1: it starts sooner)."""
    verdict: str = ""
    """``"faster"``, ``"starts sooner"``, ``"no better"``, ``"slower"``, ``"refused"`` (the
    package's checks refused the setting) or ``"failed"`` (its run raised)."""

    @property
    def helped(self) -> bool:
        return self.verdict in ("faster", "starts sooner")


def judge(candidate: Candidate, run: Measured, baseline: Noise) -> Tried:
    """Compare a candidate's run with the user's runs: it is faster when its rows/s beat
    theirs by more than the noise and it saves ``SAVED_S`` over its rows; it starts
    sooner when its first batch comes earlier by more than the noise and ``SOONER_S``
    and its rows/s are no worse beyond the noise."""
    rate_gain = run.rows_per_second / baseline.rate_median if baseline.rate_median > 0 else 0.0
    first_gain = baseline.first_median / run.first_batch_seconds if run.first_batch_seconds > 0 else 0.0
    saved = run.rows / baseline.rate_median - run.loop_seconds if baseline.rate_median > 0 else 0.0
    sooner = baseline.first_median - run.first_batch_seconds
    if rate_gain - 1 > baseline.rate_margin and saved > SAVED_S:
        verdict = "faster"
    elif (
        first_gain - 1 > baseline.first_margin and sooner > SOONER_S and rate_gain >= 1 - baseline.rate_margin
    ):
        verdict = "starts sooner"
    elif 1 - rate_gain > baseline.rate_margin or 1 - first_gain > baseline.first_margin:
        verdict = "slower"
    else:
        verdict = "no better"
    return Tried(candidate, run, baseline, rate_gain=rate_gain, first_gain=first_gain, verdict=verdict)


def refused(candidate: Candidate, error: BaseException) -> Tried:
    """A candidate the package refused or that failed: never advised."""
    said = str(error).split("\n")[0] or type(error).__name__
    verdict = "refused" if isinstance(error, (ValueError, TypeError)) else "failed"
    return Tried(candidate, None, error=said, verdict=verdict)


def candidates(base: Measured, *, kind: str, cached: bool, cpus: int | None = None) -> list[Candidate]:
    """The changes worth a try from the user's settings ``base`` (each checked when built)."""
    cpus = cpus or os.cpu_count() or 1
    found = [Candidate({"num_workers": count}, _workers_why(count)) for count in _worker_counts(base, cpus)]
    found.append(
        Candidate(
            {"batch_size": 2 * base.batch_size},
            "fewer, larger batches: less handing over per row",
            "a training setting: it changes the optimisation, so change it only where your training allows",
            step_factor=2.0,
        )
    )
    found.append(
        Candidate({"block_rows": 4 * base.block_rows}, "fewer, larger reads (one request a block)", ORDER)
    )
    if base.shuffle_buffer_size // 4 >= base.num_splits * base.block_rows:
        found.append(
            Candidate(
                {"shuffle_buffer_size": base.shuffle_buffer_size // 4},
                "a smaller first read before the first batch",
                ORDER + "; mixing is over fewer rows",
            )
        )
    if kind == "bucket" and not cached:
        found.append(
            Candidate(
                {"cache_dir": CACHE_DIR_SHOWN},
                "the rows read again from a local disk, not the bucket",
                "measured on a second read of the same rows (the next epochs, resumes and runs on this "
                "machine); the first epoch still reads the bucket",
            )
        )
    return found


def _worker_counts(base: Measured, cpus: int) -> list[int]:
    workers = base.num_workers
    counts = {0} if workers > 0 else {1, 2}
    counts |= {workers // 2, 2 * workers} if workers > 0 else set()
    return sorted(count for count in counts - {workers} if count <= cpus)


def _workers_why(count: int) -> str:
    return (
        "no worker processes: nothing to start or hand over"
        if count == 0
        else "reading in parallel processes"
    )


def trial_settings(candidate: Candidate, settings: dict[str, Any], folder: str) -> dict[str, Any]:
    """The dataset keywords of a candidate's run (a cache goes to ``folder``)."""
    changed = {
        name: value for name, value in candidate.changes.items() if name not in ("num_workers", "batch_size")
    }
    if "cache_dir" in changed:
        changed["cache_dir"] = folder
    return {**settings, **changed}


def run_candidate(
    candidate: Candidate,
    run: Callable[..., Measured],
    *,
    batch_size: int,
    num_workers: int,
    settings: dict[str, Any],
) -> Measured | BaseException:
    """Measure ``candidate`` with ``run(batch_size=, num_workers=, step_factor=, settings=)``
    (a cache is filled by one run first and measured on the second); what failed, if it did."""
    folder = tempfile.mkdtemp(prefix="lance-streaming-profile-")
    try:
        keywords = {
            "batch_size": candidate.changes.get("batch_size", batch_size),
            "num_workers": candidate.changes.get("num_workers", num_workers),
            "step_factor": candidate.step_factor,
            "settings": trial_settings(candidate, settings, folder),
        }
        if "cache_dir" in candidate.changes:
            run(**keywords)  # fills the cache: the first epoch's reads
        return run(**keywords)
    except Exception as error:
        return error
    finally:
        shutil.rmtree(folder, ignore_errors=True)
