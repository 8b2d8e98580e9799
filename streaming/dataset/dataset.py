"""``StreamingDataset``: a Lance table as an elastic, exactly resumable IterableDataset."""

from __future__ import annotations

import logging
import numbers
import os
import warnings
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from torch.utils.data import IterableDataset, get_worker_info

from .. import _compat
from ..core import stats
from ..core.cachesettings import cache_settings
from ..core.lifecycle import Guarded, Samples
from ..core.options import (
    DEFAULT_IO_QUEUE_DEPTH,
    DEFAULT_READ_BATCH_SIZE,
    Options,
    as_epoch,
    check_handle_options,
    check_options,
)
from ..core.plan import rank_splits, worker_splits
from ..core.profiles import profile_for
from ..core.progress import WorkerReport
from ..core.stats import Counters
from ..errors import EpochCompleteWarning
from ..read import blobs, cached, jobplan, source
from ..read.view import TableView, open_view, unplanned_view
from . import striped, torchrun, watchdog
from .board import Board
from .observe import Observed
from .positioned import PositionedDataset
from .topology import draw_seed, require_group, simulated_splits, topology

__all__ = ["StreamingDataset"]

_LOG = logging.getLogger("streaming")


def _first_view(
    snapshot: source.Snapshot, handle: Any, options: Options, *, shared_plan: bool
) -> tuple[Options, TableView]:
    """The options sized for ``snapshot`` and its view for the first epoch.

    When the snapshot cannot be planned (no rows, a column or filter column it does
    not have), the view holds that error for its first use instead: building a
    dataset to resume a checkpoint never fails because of the latest version.
    """
    row_bytes, has_blobs = blobs.row_bytes(handle, options.columns)
    options = options.sized_for(row_bytes, blobs=has_blobs)
    index = None
    if shared_plan and options.filter:  # one scan for the job (its errors are the job's, not deferred)
        index = jobplan.shared_filter_index(snapshot, handle, options.filter)
    try:
        view = open_view(snapshot, handle, options, epoch=options.epoch, filter_index=index)
    except ValueError as error:  # every rank of a shared plan reads the same version: all fail alike
        return options, unplanned_view(snapshot, options, error)
    if index is not None:
        jobplan.check_same_plan(view, options)  # one plan checked on every rank
    return options, view


class StreamingDataset(PositionedDataset, Observed, IterableDataset[Any]):
    """Stream one snapshot of a Lance table with exact, elastic checkpoint/resume.

    The table's planned rows (live rows matching ``filter``) are cut into
    ``num_splits`` splits of equal length L = N // num_splits; rank ``r`` of
    ``world_size`` owns splits r, r + W, ... and an iterator yields one sample of
    each owned split per cycle. Over all ranks an epoch delivers every planned row
    exactly once (the N - S * L < S surplus rows are left out of that epoch).

    One live iterator per dataset: a new ``iter()`` (of the dataset or of a loader
    over it) closes an older one that has not finished, whose later ``next()`` then
    raises ``RuntimeError``; the new one continues from the committed position.
    Leaving an epoch early is normal: ``set_epoch`` closes a suspended iterator (see
    docs/lifecycle.md).

    Guaranteed: the samples of global step t are the same for every world size;
    ``state_dict()`` taken after any delivered sample resumes on any topology with
    nothing lost or repeated (a partial cycle included; only a resume on a world
    size that splits a partial cycle unevenly gives back at most one sample per
    rank, so that ranks stay equal); the same seed and epoch reproduce the same
    order on every machine.
    Not guaranteed: the order of samples inside one rank's batch across world sizes.

    Args:
        table: A LanceDB table (embedded, or remote: a table of
            ``lancedb.connect("db://...", api_key=...)`` on LanceDB Cloud or
            Enterprise, read through the server's API with the same guarantees), a
            ``lance.LanceDataset``, or a dataset URI (local path, ``s3://``,
            ``gs://``, ``az://``).
        num_splits: S, fixed for the whole run; defaults to ``world_size``. Must be a
            multiple of ``world_size`` (and of ``world_size * num_workers``).
        shuffle: Shuffle fragments, blocks and rows within windows; ``False`` gives
            storage order.
        shuffle_seed: Seed of every shuffle; ``None`` draws one (rank 0's, shared
            through ``torch.distributed``).
        epoch: The epoch to start in; the plan differs per epoch.
        rank: This process's rank; defaults to the process group's, else 0.
        world_size: Number of ranks; defaults to the process group's, else 1.
        read_batch_size: Rows per ``transform`` call: each split's rows, in delivery
            order, are transformed in batches of this many as the loop reaches them.
        io_queue_depth: Threads reading windows in the background (as many again
            run the per-fragment takes of those reads).
        prefetch_batches: Accepted for compatibility with ``lancedb.streaming``.
        columns: Columns to read; ``None`` reads every column of the snapshot.
        shuffle_clump_size: Rows kept together when permuting a window.
        filter: SQL predicate; only matching rows are planned.
        transform: ``transform(pyarrow.RecordBatch)`` returning one sample per row.
        transform_parallelism: Threads running ``transform`` in each iterating
            process; ``None``: 4, or fewer CPUs.
        transform_queue_depth: Batches of a split transformed (or being
            transformed) at once, the one being consumed included; bounds the
            memory transformed rows take. ``None``: ``max(2, transform_parallelism)``.
        pack_sequences: Tokens per packed block: each split's documents (one
            integer-list column), joined with ``eos_id``, are cut into blocks of
            this many tokens, yielded as ``{"input_ids", "doc_ids"}`` (see
            docs/packing.md). ``None`` (default) yields rows.
        eos_id: Token appended after every document when packing.
        pad_id: Token that fills a split's last blocks when its documents run out.
        blocks_per_epoch: Blocks per epoch over all splits (a multiple of
            ``num_splits``; every split yields the same number), or ``"auto"`` to
            estimate it from the first documents (warns ``PackingEstimateWarning``).
        on_transform_error: What a ``transform`` exception does. ``"raise"``
            (default) raises it; ``"skip"`` retries the failing batch row by row and
            drops only the rows that fail; ``"warn"`` does the same and warns
            ``TransformErrorWarning``; a callable ``handler(exception) -> bool`` is
            asked per failing row (True drops the row, False raises). Dropped rows
            count as passed positions but not as samples, so resume stays exact
            when the transform fails the same way again; splits and ranks may then
            yield unequal numbers of samples (see docs/limits.md). ``"replace"``
            keeps every length: a failing row's sample is a copy of the nearest
            good sample of its batch, or of its shuffle window if the whole batch
            fails (the same copy on every run and topology), so ranks take equal
            steps; recommended for
            synchronous multi-rank training that must not stop on bad rows.
        connection_factory: ``factory(table_name)`` returning the LanceDB table in
            another process, instead of reopening the URI.
        worker_info_override: Testing hook replacing ``get_worker_info()`` (anything
            with ``id`` and ``num_workers``): the dataset reads that worker's splits
            of its rank. Its state counts them exactly and gives the other workers'
            splits their lockstep counts, so one such state, or the merge of every
            worker's, resumes every worker. Inside a real DataLoader worker the
            override still wins and a ``WARNING`` is logged.
        version: Lance version to read (a remote table's version on its server);
            defaults to the latest at construction.
        storage_options: Object-store options (credentials); never stored in a state.
        block_rows: Consecutive rows read and shuffled as one block; ``None``: the
            storage profile's (64 local; remote: the most rows, a power of two,
            within 2 MiB, e.g. 2,048 for 0.5 KiB rows).
        shuffle_buffer_size: Rows (over all splits) permuted together; each split's
            window is ``max(1, shuffle_buffer_size // (S * block_rows))`` blocks.
            ``None``: the storage profile's (32,768 local; 128 blocks remote).
        storage_profile: Where the plan settings above come from when not given:
            ``"local"`` (small blocks, small buffer), ``"remote"`` (blocks of about
            1 to 2 MiB, which object storage needs to be fast and cheap, a buffer
            of 128 blocks to keep the mixing, at least 16 read threads and one
            Lance take per fragment), or ``"auto"`` (default): ``"remote"`` for
            object-store URIs (``s3://``, ``gs://``, ``az://``),
            ``"lancedb-server"`` (the same sizes, takes of 8,192 rows) for a remote
            LanceDB table, else ``"local"``.
            A dataset whose block and buffer sizes came from its profile adopts a
            checkpoint's (``load_state_dict``), so a table copied between local
            disk and a bucket resumes exactly; see docs/object-storage.md.
        tag_snapshot: Opt in to protecting the version read (at construction and
            after ``load_state_dict``) from ``cleanup_old_versions`` with a Lance tag
            ``lance-streaming-v<version>``; ``release_snapshot()`` removes it.
        evaluation: Build a dataset for evaluation passes: every ``iter()`` starts at
            position 0 of its epoch and delivers every planned row of the rank once,
            however the previous pass ended; it keeps no resumable position
            (``state_dict()`` and ``load_state_dict()`` raise ``RuntimeError``).
        endless: Never end: when this rank's epoch is fully delivered, the same
            iterator moves into the next epoch (re-planned, new shuffle, same
            snapshot), as step-based training wants. ``len()`` raises
            ``TypeError``; the state records the epoch and counts as usual, so a
            resume is exact across epochs. ``loader.sampler.set_epoch`` (what
            frameworks call) is ignored; ``set_epoch`` itself still moves it.
        transform_rng: Call ``transform(batch, rngs)``, where ``rngs`` holds one
            ``numpy.random.Generator`` per row, seeded from (``shuffle_seed``, epoch,
            split, position): random crops or masks come out the same on every run,
            after a resume on any topology, and for any ``read_batch_size``.
        follow_latest: At every move to another epoch (an endless dataset's own, or
            ``set_epoch``), read the table's newest version instead of the same
            snapshot: for tables that keep growing. Every rank reads rank 0's choice
            (broadcast; several ranks need a process group). The state records the
            version each epoch reads, so a resume is exact; ``load_state_dict`` pins
            the checkpoint's version until the next epoch.
        cache_dir: Keep what is read of a table on object storage in this folder on
            a local disk, so later epochs, resumes and other runs on the machine
            read the same snapshot locally (see docs/object-storage.md, "Local
            cache"). Shared by every process of the machine; created owner-only.
            ``None``: the ``LANCE_STREAMING_CACHE_DIR`` environment variable, else
            no cache. Never changes samples, order or states; ignored for local
            tables.
        cache_limit: The most bytes the cache may hold (an integer, or a string
            such as ``"200GiB"``); least recently used files no process is reading
            are removed to make room. ``None``: ``LANCE_STREAMING_CACHE_LIMIT``,
            else as much as the disk has free (keeping 5%, at most 1 GiB, free).
        blobs: What a sample holds for a blob column (a column Lance stores out of
            line: images, audio, video; see docs/multimodal.md): ``"bytes"`` (default)
            gives each blob's bytes, read in batched reads per window, the same
            values as the bytes stored in a plain binary column; ``"handles"`` gives a
            ``streaming.BlobHandle`` per blob, which a ``transform`` opens in the
            worker as a seekable file (``handle.open()``) that reads only what is
            read. Never changes samples' order or states.

    Raises:
        ValueError: a setting out of range, N < S, S not divisible by world_size,
            an unknown column, or ``shuffle_seed=None`` with several ranks and no
            process group.
        TypeError: a column the package cannot deliver (a blob field nested in a
            struct or list; a blob column with ``pack_sequences``), naming it, its
            type and the fix.
    """

    def __init__(
        self,
        table: Any,
        *,
        num_splits: int | None = None,
        shuffle: bool = True,
        shuffle_seed: int | None = 0,
        epoch: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        read_batch_size: int = DEFAULT_READ_BATCH_SIZE,
        io_queue_depth: int = DEFAULT_IO_QUEUE_DEPTH,
        prefetch_batches: int | None = None,
        columns: Sequence[str] | None = None,
        shuffle_clump_size: int | None = None,
        filter: str | None = None,  # noqa: A002 - the peer's keyword
        transform: Callable[[Any], Iterable[Any]] | None = None,
        transform_parallelism: int | None = None,
        transform_queue_depth: int | None = None,
        pack_sequences: int | None = None,
        eos_id: int | None = None,
        pad_id: int | None = None,
        blocks_per_epoch: int | str | None = None,
        on_transform_error: str | Callable[[Exception], bool] = "raise",
        connection_factory: Callable[[str], Any] | None = None,
        worker_info_override: Any = None,
        version: int | None = None,
        storage_options: dict[str, str] | None = None,
        block_rows: int | None = None,
        shuffle_buffer_size: int | None = None,
        storage_profile: str = "auto",
        tag_snapshot: bool = False,
        evaluation: bool = False,
        endless: bool = False,
        transform_rng: bool = False,
        follow_latest: bool = False,
        cache_dir: str | os.PathLike[str] | None = None,
        cache_limit: int | str | None = None,
        blobs: str = "bytes",
    ) -> None:
        torchrun.check_torchrun_store()
        shared_plan = jobplan.shares_plan(rank, world_size, filter)  # before topology fills them in
        rank, world_size = topology(rank, world_size)
        check_handle_options(
            {
                "storage_options": storage_options,
                "tag_snapshot": tag_snapshot,
                "connection_factory": connection_factory,
            }
        )
        if follow_latest is True and isinstance(world_size, numbers.Integral):
            require_group(int(world_size), what="follow_latest", fix="leave follow_latest off")
        if shuffle_seed is None and isinstance(world_size, numbers.Integral):
            shuffle_seed = draw_seed(world_size)
        profile, profile_plan = profile_for(
            storage_profile,
            source.table_uri(table),
            block_rows=block_rows,
            shuffle_buffer_size=shuffle_buffer_size,
        )
        block_rows, shuffle_buffer_size = profile.block_rows, profile.shuffle_buffer_size
        cache = cache_settings(cache_dir, cache_limit)
        settings = dict(locals())
        values = {name: settings[name] for name in Options.__dataclass_fields__}
        values["num_splits"] = world_size if num_splits is None else num_splits
        options = check_options(values)
        owned = rank_splits(options.num_splits, rank=options.rank, world_size=options.world_size)
        snapshot, handle = source.open_table(
            table, version=version, storage_options=storage_options, connection_factory=connection_factory
        )
        cached.warn_unused(snapshot.uri, cache_dir=cache_dir)
        options, view = _first_view(snapshot, handle, options, shared_plan=shared_plan)
        exact = simulated_splits(owned, worker_info_override, world_size=options.world_size)
        super().__init__(options, view, owned, tag_snapshot=bool(tag_snapshot), exact_splits=exact)
        self._worker_info_override = worker_info_override
        self._counters = Counters()  # reads of this process's iterators
        self._board: Board | None = None  # a persistent loader's pipes to its workers
        self._loader_batch: tuple[int, bool] | None = None
        """(batch size, columnar) of the loader starting an iterator: it wants ``Slice``s."""
        self._iterating: tuple[int, tuple[int, ...]] = (0, ())
        """(worker id, splits) of this process's iterator."""

    def __repr__(self) -> str:
        snapshot = self._view.snapshot
        length = self.split_length if self._view.planned else "unplanned"
        return (
            f"StreamingDataset(uri={snapshot.uri!r}, version={snapshot.version}, "
            f"num_splits={self.num_splits}, rank={self.rank}, world_size={self.world_size}, "
            f"epoch={self.epoch}, split_length={length})"
        )

    # -- iteration ------------------------------------------------------------

    def _worker(self) -> tuple[int, int]:
        """(worker id, number of workers) of the process iterating this dataset."""
        info, real = self._worker_info_override, get_worker_info()
        if real is not None:
            source.check_fork_safety()
            watchdog.watch_trainer(self._lifecycle.trainer_pid)
        if info is not None and real is not None:
            _LOG.warning(
                "worker_info_override (worker %s of %s) takes precedence over DataLoader worker "
                "%d of %d: this process reads the override's splits, so workers may read the "
                "same rows or leave rows out; the override is a testing hook for iterating "
                "without a DataLoader",
                info.id,
                info.num_workers,
                real.id,
                real.num_workers,
            )
        info = real if info is None else info
        return (0, 1) if info is None else (int(info.id), int(info.num_workers))

    def __iter__(self) -> Iterator[Any]:
        """Yield the remaining samples of this rank's (or this worker's) splits.

        A new iterator closes an older one that has not finished (its later
        ``next()`` raises ``RuntimeError``). It takes its position at its first
        ``next()``: the committed position then, so a ``set_epoch`` or
        ``load_state_dict`` between ``iter()`` and the first ``next()`` is followed.
        An evaluation dataset starts at position 0 of its epoch every time.
        """
        worker, num_workers = self._worker()
        for_loader = self._lifecycle.for_loader  # else the loader has superseded the live iterator already
        if not for_loader and get_worker_info() is None:  # a plain DataLoader's worker has none
            self.supersede("iter(dataset)")
        splits = self._rank_splits
        if num_workers > 1:
            splits = worker_splits(splits, worker=worker, num_workers=num_workers, world_size=self.world_size)
        self._iterating = (worker, tuple(splits))
        stream = self._run(
            splits, for_loader=for_loader, stripe=(worker, num_workers), batch=self._loader_batch
        )
        iterator = Samples(stream, "iter(dataset)")
        self._lifecycle.live.hold(iterator)
        return iterator

    def _run(
        self, splits: list[int], *, for_loader: bool, stripe: tuple[int, int], batch: tuple[int, bool] | None
    ) -> Generator[Any, None, None]:
        """The samples of ``splits`` from where the dataset stands at the first ``next()``
        (for a loader: its ``Slice`` of every batch, worker ``stripe[0]`` of ``stripe[1]``)."""
        if not for_loader:  # a loader begins the iteration itself
            self.begin_iteration(stacklevel=5)
        if self._board is not None:  # a persistent worker: the trainer's position now
            self._board.take_over(self, stripe[0], keep=("_counters", "_iterating"))
        if self._options.endless and not for_loader:
            yield from self._endless(splits)
        elif batch is not None:  # a StreamingDataLoader moves an endless dataset on
            batch_size, columnar = batch
            pieces = striped.slices(
                self.stripe(stripe[0], stripe[1], batch_size=batch_size),
                lambda sizes: self._stream(splits, sizes=sizes),
                columnar=columnar,
            )
            in_worker = get_worker_info() is not None
            yield from striped.messages(
                pieces,
                in_worker=in_worker,
                report=self.worker_report,
                row_bytes=lambda: stats.row_bytes([self._counters]),
            )
        else:
            yield from self._stream(splits)

    def _stream(self, splits: list[int], *, sizes: Iterator[int] | None = None) -> Generator[Any, None, None]:
        return self._view.stream(
            self._options, splits, self._ledger.cursor, counters=self._counters, sizes=sizes
        )

    def _endless(self, splits: list[int]) -> Generator[Any, None, None]:
        """This epoch's rest, then every later epoch's samples, without end."""
        while True:
            yield from self._stream(splits)
            self.next_epoch()

    def next_epoch(self) -> None:
        """Move an endless dataset into the next epoch (the iterator stays live)."""
        _LOG.info(
            "endless dataset of rank %d moves from epoch %d to %d", self.rank, self.epoch, self.epoch + 1
        )
        self._view = self._epoch_view(self.epoch + 1)
        self._restart()

    def set_epoch(self, epoch: int) -> None:
        """Move to ``epoch``: a no-op for the current epoch, else counts restart at 0.

        An iterator of this dataset that has not finished (the loop did ``break``,
        a step limit stopped it, an exception left it) is closed first: its
        prefetched samples are discarded, never counted, and how much of the epoch
        was left is logged at INFO on the ``streaming`` logger.

        Raises:
            RuntimeError: a ``next()`` of this dataset's iterator is running right
                now (in another thread).
            ValueError: ``epoch`` is not a non-negative integer.
        """
        epoch = as_epoch(epoch)
        if epoch == self.epoch:
            return
        left, whole = self._left(), sum(self.remaining(whole=True)[split] for split in self._rank_splits)
        closed = self._lifecycle.set_epoch(epoch, anything_left=left > 0)
        if left > 0 and (closed is not None or left < whole) and not self._options.evaluation:
            _LOG.info(
                "set_epoch(%d) leaves epoch %d of rank %d with %d of %d samples undelivered%s",
                epoch,
                self.epoch,
                self.rank,
                left,
                whole,
                f" (closed {closed.description})" if closed is not None else "",
            )
        self._view = self._epoch_view(epoch)
        self._restart()

    def stats(self) -> dict[str, float]:
        """Live statistics of this rank, including its DataLoader workers.

        ``rows_delivered`` and ``rows_skipped`` count this epoch's committed samples
        of the rank's splits (and the dropped rows they passed). Totals since this
        object was made, over this process and every worker whose batches reached
        it: ``rows_read``, ``bytes_read``, ``windows_read``, ``read_seconds`` (wall
        time of reads, summed over read threads), ``transform_seconds`` (summed
        over transform threads), ``convert_seconds`` (Arrow to samples, reads
        without a transform), ``rows_dropped`` (rows ``transform`` failed on,
        delivered or not yet). What running iterators hold now (0 while none
        runs): ``read_ahead`` (windows requested, not yet consumed), ``raw_rows``
        (rows read, waiting for the transform), ``ready_rows`` (rows ready to hand
        out), ``unscanned_rows`` (rows not yet requested). Worker totals are as of
        their latest delivered batch. The ``lancedb.streaming`` attributes
        (``bytes_loaded``, ``fetch_time``, ``transform_time``, ``rows_skipped``,
        ``consumed_rows``, ``raw_queue_depth``, ``prefetch_queue_depth``,
        ``unscanned_rows``) read these entries. Cheap: counters only, no I/O.
        """
        samples, positions = self._ledger.cursor.samples, self._ledger.cursor.positions
        totals = stats.total([self._counters.as_dict(), *self._worker_counters.values()])
        skipped = sum(positions[split] - samples[split] for split in self._rank_splits)
        return {
            "epoch": self.epoch,
            "rows_delivered": sum(samples[split] for split in self._rank_splits),
            "rows_skipped": 0 if self._view.packing is not None else skipped,
            **totals,
        }

    # -- package-internal: the loader's host protocol (see host.py) ------------

    @property
    def counters(self) -> Counters:
        """The read counters of this process's iterators."""
        return self._counters

    def user_functions(self) -> list[tuple[str, object]]:
        """(keyword, value) of the user's functions a worker process must unpickle."""
        return [
            ("transform", self._options.transform),
            ("on_transform_error", self._options.on_transform_error),
        ]

    def supersede(self, description: str) -> None:
        """A new iterator (``description``) closes the live one; an endless dataset whose
        epoch was fully delivered moves on at once (its ``epoch`` says where ``iter()`` is)."""
        self._lifecycle.supersede(description, anything_left=self._left() > 0)
        if self._options.endless and not self._options.evaluation and self._left() == 0:
            self.next_epoch()

    def begin_iteration(self, *, stacklevel: int, warn: bool = True) -> None:
        """At an iterator's first ``next()``: restart an evaluation pass, move an endless
        dataset on, or warn that the epoch was fully delivered."""
        if self._options.evaluation:
            self._restart()
        elif self._left() == 0 and self._options.endless:
            self.next_epoch()
        elif self._left() == 0 and warn:
            warnings.warn(
                f"epoch {self.epoch} was already fully delivered, so this iterator yields "
                f"nothing; call set_epoch({self.epoch + 1}) to move on (a validation loader, "
                "iterated once per check, wants StreamingDataset(..., evaluation=True))",
                EpochCompleteWarning,
                stacklevel=stacklevel,
            )

    def hold(self, iterator: Guarded) -> Guarded | None:
        """Make a loader's iterator the live one; return the one it wraps, if any (its
        own ``iter(dataset)`` with ``num_workers=0``)."""
        return self._lifecycle.hold(iterator)

    @contextmanager
    def shipping(self, *, batch_size: int, columnar: bool, board: Board | None = None) -> Iterator[None]:
        """While a loader starts its iterator: iterators yield one ``Slice`` per batch of
        ``batch_size`` (of columnar pieces with ``columnar``); a pickle for a worker
        process is the loader's, not a plain DataLoader's, and carries ``board`` (a
        persistent loader's pipes)."""
        self._loader_batch, self._board = (batch_size, columnar), board
        try:
            with self._lifecycle.shipping():
                yield
        finally:
            self._loader_batch, self._board = None, None

    def worker_report(self) -> WorkerReport:
        """In a worker process: the progress of the splits this worker's iterator owns."""
        worker, splits = self._iterating
        progress = dict(zip(splits, self._ledger.cursor.progress(splits), strict=True))
        return WorkerReport(worker, os.getpid(), progress, self._counters.as_dict())

    def __getstate__(self) -> dict[str, Any]:
        """Pickle for a worker process: settings, snapshot and position, no handles."""
        state = dict(self.__dict__)
        state["_counters"] = Counters()
        state["_worker_counters"] = {}
        for_child = _compat.pickling_for_child_process()
        state["_lifecycle"] = self._lifecycle.pickled(for_child=for_child)
        state["_board"] = self._board if for_child else None
        return state
