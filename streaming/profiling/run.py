"""``streaming.profile``: measure a loader on the user's own table and settings, then
try the changes worth trying on the same table and keep those that helped.

It builds the ``StreamingDataset`` and ``StreamingDataLoader`` the user would, draws
batches as a trainer does (optionally spending ``step_seconds`` per batch, standing in
for the training step) until it has read past the first shuffle windows, and reports
what it measured (``measure.py``): the first batch, rows and batches per second after
it, where the time went (``stats()``: reads, transforms, the loop's waits for each
batch at p50/p95/p99 and each worker's part), each process's own peak memory, and
the read requests per 1,000 rows where this process can count them. Then it runs each
candidate change (``trials.py``) for as many rows, beside two more runs of the user's
settings that measure the run-to-run noise, and advises only what beat that noise
(``findings.py``).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from . import encoding, trials
from .findings import KEEPS_UP, LoaderProfile
from .measure import Measured, measure

__all__ = ["LoaderProfile", "profile"]

TRY_SECONDS = 0.2
"""Each try (and each run of the user's settings beside them) runs at least this long (or
to the epoch's end), for as many rows as the measured run at least."""


def profile(
    table: Any,
    *,
    batch_size: int = 64,
    num_workers: int = 0,
    batches: int = 100,
    step_seconds: float = 0.0,
    progress: bool | None = None,
    tries: bool | Collection[str] = True,
    **settings: Any,
) -> LoaderProfile:
    """Measure ``StreamingDataLoader(StreamingDataset(table, **settings), batch_size=...,
    num_workers=...)``, then try the changes worth trying and advise those that helped.

    The measured run draws ``batches`` batches and goes on past the first shuffle
    windows (a rate inside them is a rate from memory) unless the table fits in one
    (``window`` says which) or the epoch ends. ``settings`` are ``StreamingDataset``'s
    keywords (and the loader's ``head_start``). ``step_seconds`` is spent after each batch.
    ``progress`` shows a bar on stderr (``None``: when stderr is a terminal).

    With ``tries=True`` (unless the loader keeps up with the step), each candidate
    change (other worker counts, a larger batch, larger blocks, a smaller shuffle
    buffer, a bucket's local cache; blob encoding on two local copies of the first
    rows) runs for as many rows, between three more runs of the user's settings whose
    spread is the noise. ``advice()`` names only changes that beat the user's settings
    by more than that noise (and 5%), with before and after; one the package refuses
    is reported as refused. ``tries`` may name what to try (of ``trials.KEYWORDS``;
    ``()``: the three runs only); ``False`` runs nothing after the measured run.

    Guaranteed: the numbers are measured, not estimated; reading changes nothing on
    the table, no state is saved, and a cache tried is removed. Memory is each
    process's own high-water mark (``VmHWM``, the trainer's reset at the start), so
    it never includes the program that launched it. Requests are counted for Lance
    tables read in this process (``num_workers=0``); elsewhere ``requests`` is
    ``None`` and ``requests_note`` says why.
    """
    _check(batches, tries)
    counting = _Requests(num_workers, settings.get("storage_options"))
    with _bar(batches, progress) as bar:
        base, dataset = measure(
            table, batch_size=batch_size, num_workers=num_workers, batches=batches, step_seconds=step_seconds,
            settings=settings, past_first_window=True, bar=bar, on_built=counting.start,
        )  # fmt: skip
    found = _found(dataset, base, settings, requests=counting.stop(), step_seconds=step_seconds)
    if note := _no_tries(found, tries=tries):
        return _with(found, tries_note=note)
    names = None if tries is True else set(tries)  # type: ignore[arg-type]
    noise, tried = _try(table, base, found, names=names, settings=settings, step_seconds=step_seconds)
    return _with(found, noise=noise, tried=tuple(tried))


def _check(batches: int, tries: bool | Collection[str]) -> None:
    """Refuse a count of batches below 1 and ``tries`` naming what ``profile`` does not try."""
    if batches < 1:
        raise ValueError(f"batches must be 1 or more, got {batches}; pass batches=100, say")
    unknown = sorted(set(tries) - set(trials.KEYWORDS)) if not isinstance(tries, bool) else []
    if unknown or isinstance(tries, str):
        raise ValueError(
            f"tries names {unknown or tries!r}, which profile does not try; name some of "
            f"{', '.join(trials.KEYWORDS)}, or pass True (all) or False (none)"
        )


def _no_tries(found: LoaderProfile, *, tries: bool | Collection[str]) -> str:
    """Why no change is tried ('' where they are)."""
    if tries is False:
        return "tries=False"
    if found.step_seconds > 0 and found.wait_share < KEEPS_UP:
        return f"the loader keeps up with a {1000 * found.step_seconds:.0f} ms step"
    return ""


def _run(
    table: Any,
    *,
    rows: int,
    step_seconds: float,
    batch_size: int,
    num_workers: int,
    step_factor: float,
    settings: dict[str, Any],
    source: Any = None,
) -> Measured:
    """One run of a try: as many rows as the measured run delivered (``source``: another
    table than the user's, a copy)."""
    return measure(
        table if source is None else source,
        batch_size=batch_size,
        num_workers=num_workers,
        batches=max(2, -(-rows // batch_size)),
        step_seconds=step_seconds * step_factor,
        settings=settings,
        min_seconds=TRY_SECONDS,
    )[0]


def _try(
    table: Any,
    base: Measured,
    found: LoaderProfile,
    *,
    names: set[str] | None,
    settings: dict[str, Any],
    step_seconds: float,
) -> tuple[trials.Noise, list[trials.Tried]]:
    """Run the candidates between three more runs of the user's settings; judge each."""
    rows = int(base.stats["rows_delivered"])  # as many rows as the measured run delivered
    run = functools.partial(_run, table, rows=rows, step_seconds=step_seconds)

    def again() -> Measured:
        return run(
            batch_size=base.batch_size, num_workers=base.num_workers, step_factor=1.0, settings=settings
        )

    candidates = [
        candidate
        for candidate in trials.candidates(base, kind=found.kind, cached=found.cache_dir is not None)
        if names is None or set(candidate.changes) <= names
    ]
    middle = len(candidates) // 2
    baselines, outcomes = [again()], []
    for index, candidate in enumerate(candidates):
        if index == middle:
            baselines.append(again())
        outcomes.append(
            trials.run_candidate(
                candidate, run, batch_size=base.batch_size, num_workers=base.num_workers, settings=settings
            )
        )
    while len(baselines) < 3:  # the user's settings between, before and after the candidates
        baselines.append(again())
    noise = trials.noise(baselines)
    tried = [
        trials.judge(candidate, outcome, noise)
        if isinstance(outcome, Measured)
        else trials.refused(candidate, outcome)
        for candidate, outcome in zip(candidates, outcomes, strict=True)
    ]
    if names is None or "blob_encoding" in names:
        tried += _try_blobs(base, found, rows=rows, run=run, settings=settings)
    return noise, tried


def _try_blobs(
    base: Measured, found: LoaderProfile, *, rows: int, run: Callable[..., Measured], settings: dict[str, Any]
) -> list[trials.Tried]:
    """Blob encoding on two local copies of the first rows, where it is worth a try."""
    read = base.stats.get("rows_read", 0)
    per_row = base.stats["bytes_read"] / read if read else 0.0
    if not encoding.worth_trying(kind=found.kind, columns=found.plain_binary_columns, bytes_per_row=per_row):
        return []
    local = {name: value for name, value in settings.items() if name not in _NOT_FOR_A_COPY}

    def on_copy(uri: str) -> Measured:
        return run(
            batch_size=base.batch_size,
            num_workers=base.num_workers,
            step_factor=1.0,
            settings=local,
            source=uri,
        )

    handle = _open(found.table_uri, found.version, settings)
    candidate, outcome, stored = encoding.try_blob_encoding(
        handle, columns=found.plain_binary_columns, rows=4 * rows, bytes_per_row=per_row, run=on_copy
    )
    if isinstance(outcome, Measured) and stored is not None:
        return [trials.judge(candidate, outcome, stored)]
    return [trials.refused(candidate, outcome if isinstance(outcome, BaseException) else RuntimeError())]


_NOT_FOR_A_COPY = ("storage_options", "cache_dir", "version")
"""Settings of the user's table that a local copy does not take."""


def _with(found: LoaderProfile, **changes: Any) -> LoaderProfile:
    return replace(found, **changes)


def _found(
    dataset: Any,
    base: Measured,
    settings: dict[str, Any],
    *,
    requests: tuple[int | None, str],
    step_seconds: float,
) -> LoaderProfile:
    """What the measured run found, as one value (no tries yet)."""
    table = _handle(dataset, settings)
    return LoaderProfile(
        table_uri=dataset.table_uri,
        version=dataset.version,
        num_splits=base.num_splits,
        block_rows=base.block_rows,
        shuffle_buffer_size=base.shuffle_buffer_size,
        batch_size=base.batch_size,
        num_workers=base.num_workers,
        step_seconds=step_seconds,
        open_seconds=base.open_seconds,
        first_batch_seconds=base.first_batch_seconds,
        batches=base.batches,
        rows=base.rows,
        loop_seconds=base.loop_seconds,
        wait_seconds=base.wait_seconds,
        window=base.window,
        first_window_rows=base.first_window_rows,
        stats=base.stats,
        trainer_peak_bytes=base.trainer_peak_bytes,
        trainer_peak_reset=base.trainer_peak_reset,
        worker_peak_bytes=base.worker_peak_bytes,
        requests=requests[0],
        requests_note=requests[1],
        kind=table.kind,
        cache_dir=_cache_dir(settings),
        plain_binary_columns=_plain_binary(table),
    )


def _handle(dataset: Any, settings: dict[str, Any]) -> Any:
    """This process's ``Table`` of the dataset's snapshot (the one its reads use)."""
    return _open(dataset.table_uri, dataset.version, settings)


def _open(uri: str, version: int, settings: dict[str, Any]) -> Any:
    from ..tables.source import Snapshot, open_snapshot

    return open_snapshot(Snapshot(uri, version, settings.get("storage_options")))


class _Requests:
    """Lance's read requests of the measured run, where this process sees them all."""

    def __init__(self, num_workers: int, options: Any) -> None:
        self._options = options
        self._table: Any = None
        self._before: int | None = None
        self.note = "each worker reads with its own handle; run with num_workers=0 to count them"
        self._workers = num_workers

    def start(self, dataset: Any) -> None:
        """Before the first batch: open the counted handle and read its count."""
        if self._workers > 0:
            return
        table = _handle(dataset, {"storage_options": self._options})
        if table.kind == "remote":
            self.note = "a LanceDB server's requests are not counted by its client"
        elif table.read_requests() is None:
            self.note = "this Lance version counts no requests"
        else:
            self._table, self._before = table, table.read_requests()
            self.note = "Lance's read operations in this process"

    def stop(self) -> tuple[int | None, str]:
        """The requests since ``start`` (``None`` where not counted) and what they are."""
        after = None if self._table is None else self._table.read_requests()
        if after is None or self._before is None:
            return None, self.note
        return after - self._before, self.note


def _cache_dir(settings: dict[str, Any]) -> str | None:
    from ..core.cachesettings import CACHE_DIR_ENV

    folder = settings.get("cache_dir") or os.environ.get(CACHE_DIR_ENV)
    return os.fspath(folder) if folder else None


def _plain_binary(handle: Any) -> tuple[str, ...]:
    """Top-level binary columns Lance stores inline (without ``lance-encoding:blob``)."""
    import pyarrow as pa

    schema = handle.schema
    return tuple(
        field.name
        for field in schema
        if (pa.types.is_binary(field.type) or pa.types.is_large_binary(field.type))
        and b"lance-encoding:blob" not in (field.metadata or {})
    )


@contextmanager
def _bar(total: int, progress: bool | None) -> Iterator[Any]:
    """A tqdm bar of batches on stderr (``None``: only on a terminal)."""
    from tqdm import tqdm

    shown = sys.stderr.isatty() if progress is None else progress
    with tqdm(total=total, unit="batch", disable=not shown, file=sys.stderr, leave=False) as bar:
        yield bar
