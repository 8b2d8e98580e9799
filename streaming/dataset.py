"""``StreamingDataset``: a Lance table as an elastic, exactly resumable IterableDataset."""

from __future__ import annotations

import os
import uuid
import warnings
import weakref
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from typing import Any

from torch.utils.data import IterableDataset, get_worker_info

from . import commit, source, stats, watchdog
from .assemble import iterate_batches
from .checkpoint import Checkpointing
from .errors import EpochCompleteWarning
from .iterate import Progress, is_running, iterate_cycles
from .options import (
    DEFAULT_BLOCK_ROWS,
    DEFAULT_IO_QUEUE_DEPTH,
    DEFAULT_READ_BATCH_SIZE,
    DEFAULT_SHUFFLE_BUFFER_SIZE,
    Options,
    check_options,
)
from .packing import iterate_blocks
from .packing import resolve as packing_settings
from .plan import EpochPlan, PlanSettings, rank_splits, window_rows_for, worker_splits
from .reader import WindowSource
from .stats import Counters
from .topology import draw_seed, topology


class StreamingDataset(Checkpointing, IterableDataset[Any]):
    """Stream one snapshot of a Lance table with exact, elastic checkpoint/resume.

    The table's planned rows (live rows matching ``filter``) are cut into
    ``num_splits`` splits of equal length L = N // num_splits; rank ``r`` of
    ``world_size`` owns splits r, r + W, ... and an iterator yields one sample of
    each owned split per cycle. Over all ranks an epoch delivers every planned row
    exactly once (the N - S * L < S surplus rows are left out of that epoch).

    Guaranteed: the samples of global step t are the same for every world size;
    ``state_dict()`` taken after any delivered sample resumes on any topology with
    nothing lost or repeated except the samples of an incomplete cycle, which are
    replayed; the same seed and epoch reproduce the same order on every machine.
    Not guaranteed: the order of samples inside one rank's batch across world sizes.

    Args:
        table: A LanceDB table, a ``lance.LanceDataset``, or a dataset URI (local
            path, ``s3://``, ``gs://``, ``az://``).
        num_splits: S, fixed for the whole run; defaults to ``world_size``. Must be a
            multiple of ``world_size`` (and of ``world_size * num_workers``).
        shuffle: Shuffle fragments, blocks and rows within windows; ``False`` gives
            storage order.
        shuffle_seed: Seed of every shuffle; ``None`` draws one (rank 0's, shared
            through ``torch.distributed``).
        epoch: The epoch to start in; the plan differs per epoch.
        rank: This process's rank; defaults to the process group's, else 0.
        world_size: Number of ranks; defaults to the process group's, else 1.
        read_batch_size: Rows per ``transform`` call.
        io_queue_depth: Threads reading windows in the background (as many again
            run the per-fragment takes of those reads).
        prefetch_batches: Accepted for compatibility with ``lancedb.streaming``.
        columns: Columns to read; ``None`` reads every column of the snapshot.
        shuffle_clump_size: Rows kept together when permuting a window.
        filter: SQL predicate; only matching rows are planned.
        transform: ``transform(pyarrow.RecordBatch)`` returning one sample per row.
        transform_parallelism: Accepted for compatibility.
        transform_queue_depth: Accepted for compatibility.
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
            yield unequal numbers of samples (see docs/limits.md).
        connection_factory: ``factory(table_name)`` returning the LanceDB table in
            another process, instead of reopening the URI.
        worker_info_override: Testing hook replacing ``get_worker_info()``.
        version: Lance version to read; defaults to the latest at construction.
        storage_options: Object-store options (credentials); never stored in a state.
        block_rows: Consecutive rows read and shuffled as one block.
        shuffle_buffer_size: Rows (over all splits) permuted together; each split's
            window is ``max(1, shuffle_buffer_size // (S * block_rows))`` blocks.
        tag_snapshot: Opt in to protecting the version read (at construction and
            after ``load_state_dict``) from ``cleanup_old_versions`` with a Lance tag
            ``lance-streaming-v<version>``; ``release_snapshot()`` removes it.

    Raises:
        ValueError: a setting out of range, N < S, S not divisible by world_size,
            an unknown column, or ``shuffle_seed=None`` with several ranks and no
            process group.
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
        block_rows: int = DEFAULT_BLOCK_ROWS,
        shuffle_buffer_size: int = DEFAULT_SHUFFLE_BUFFER_SIZE,
        tag_snapshot: bool = False,
    ) -> None:
        rank, world_size = topology(rank, world_size)
        if shuffle_seed is None and isinstance(world_size, int):
            shuffle_seed = draw_seed(world_size)
        settings = dict(locals())
        values = {name: settings[name] for name in Options.__dataclass_fields__}
        values["num_splits"] = world_size if num_splits is None else num_splits
        self._options = check_options(values)
        self._rank_splits = rank_splits(self._options.num_splits, rank=rank, world_size=world_size)
        self._worker_info_override = worker_info_override
        self._token = uuid.uuid4().hex  # pairs this object with its copies in worker processes
        self._shipped = False  # pickled for worker processes of a plain DataLoader
        self._loader_iterator: weakref.ref[Any] | None = None
        self._trainer_pid: int | None = None  # set in copies sent to worker processes
        self._loader_batch = 0  # in copies sent to a loader that wants columnar batches
        self._counters = Counters()  # reads of this process's iterators
        self._worker_counters: dict[tuple[int, int], dict[str, float]] = {}
        self._snapshot, handle = source.resolve(
            table,
            version=version,
            storage_options=storage_options,
            connection_factory=connection_factory,
        )
        self._epoch = self._options.epoch
        self._open(self._snapshot, handle, epoch=self._epoch)
        self._tag_snapshot = bool(tag_snapshot)
        if self._tag_snapshot:
            source.protect(self._snapshot)
        self._progress = Progress(self._options.num_splits)
        self._active: Generator[Any, None, None] | None = None  # the running iterator

    # -- snapshot and plan -------------------------------------------------------

    def _open(self, snapshot: source.Snapshot, handle: Any, *, epoch: int) -> None:
        """Resolve columns, filter and plan for ``snapshot``; assign only on success."""
        columns = self._resolve_columns(handle)
        filter_index = (
            source.build_filter_index(handle, self._options.filter) if self._options.filter else None
        )
        ids, rows = source.fragment_rows(handle)
        if filter_index is not None:
            matching = dict(zip(filter_index.ids.tolist(), filter_index.counts()))
            rows = [matching.get(fragment_id, 0) for fragment_id in ids]
        plan = EpochPlan(ids, rows, self._settings(epoch))
        packing = packing_settings(
            self._options, handle, columns, plan.split_length * self._options.num_splits
        )
        self._snapshot, self._columns, self._filter_index = snapshot, columns, filter_index
        self._fragments, self._plan, self._packing = (ids, rows), plan, packing

    def _resolve_columns(self, handle: Any) -> tuple[str, ...]:
        available = source.column_names(handle)
        wanted = self._options.columns
        if wanted is None:
            return tuple(available)
        unknown = [name for name in wanted if name not in available]
        if unknown:
            raise ValueError(
                f"columns={list(wanted)!r} names {unknown!r}, which version "
                f"{handle.version} of the table does not have; choose from {available!r}"
            )
        return tuple(wanted)

    def _settings(self, epoch: int) -> PlanSettings:
        options = self._options
        return PlanSettings(
            num_splits=options.num_splits,
            shuffle=options.shuffle,
            seed=options.shuffle_seed,
            epoch=epoch,
            block_rows=options.block_rows,
            window_rows=window_rows_for(
                shuffle_buffer_size=options.shuffle_buffer_size,
                num_splits=options.num_splits,
                block_rows=options.block_rows,
            ),
            clump_rows=options.clump_rows,
        )

    # -- public properties ------------------------------------------------------

    @property
    def epoch(self) -> int:
        """The current epoch."""
        return self._epoch

    @property
    def num_splits(self) -> int:
        """S, the number of splits."""
        return self._options.num_splits

    @property
    def shuffle_seed(self) -> int:
        """The seed in use (drawn when constructed with ``shuffle_seed=None``)."""
        return self._options.shuffle_seed

    @property
    def split_length(self) -> int:
        """L, the rows of every split in this epoch."""
        return self._plan.split_length

    @property
    def rank(self) -> int:
        """This dataset's rank."""
        return self._options.rank

    @property
    def world_size(self) -> int:
        """The number of ranks."""
        return self._options.world_size

    @property
    def columns(self) -> list[str]:
        """The columns read, resolved against the snapshot."""
        return list(self._columns)

    @property
    def table_uri(self) -> str:
        """URI of the table (never includes credentials)."""
        return self._snapshot.uri

    @property
    def version(self) -> int:
        """The Lance version read."""
        return self._snapshot.version

    def owned_splits(self) -> list[int]:
        """Splits of this rank: rank, rank + world_size, ..."""
        return list(self._rank_splits)

    def __len__(self) -> int:
        """Samples (or packed blocks) the next iterator of this rank will yield."""
        remaining = self._remaining()
        return sum(remaining[split] for split in self._rank_splits)

    def _remaining(self, *, whole: bool = False) -> list[int]:
        """Samples (or blocks) each split has left in this epoch (``whole``: all of it)."""
        if self._packing is not None:
            budget = self._packing.split_blocks(self.num_splits)
            return [budget - (0 if whole else count) for count in self._progress.samples]
        length = self._plan.split_length
        return [length - (0 if whole else position) for position in self._progress.positions]

    def __repr__(self) -> str:
        return (
            f"StreamingDataset(uri={self._snapshot.uri!r}, version={self._snapshot.version}, "
            f"num_splits={self.num_splits}, rank={self.rank}, world_size={self.world_size}, "
            f"epoch={self._epoch}, split_length={self.split_length})"
        )

    # -- iteration ------------------------------------------------------------

    def _worker(self) -> tuple[int, int]:
        """(worker id, number of workers) of the process iterating this dataset."""
        info = self._worker_info_override
        if info is None:
            info = get_worker_info()
            if info is not None:
                source.check_fork_safety()
                watchdog.watch_trainer(self._trainer_pid)
        return (0, 1) if info is None else (int(info.id), int(info.num_workers))

    def _iterator_splits(self, worker: int, num_workers: int) -> list[int]:
        if num_workers <= 1:
            return list(self._rank_splits)
        return worker_splits(
            self._rank_splits, worker=worker, num_workers=num_workers, world_size=self.world_size
        )

    def __iter__(self) -> Iterator[Any]:
        """Yield the remaining samples of this rank's (or this worker's) splits.

        A new iterator continues from the committed position; an older iterator of
        the same dataset is closed (it stops) so two never advance one position.
        """
        if self._active is not None:
            self._active.close()  # a no-op once it has finished
        worker, num_workers = self._worker()
        splits = self._iterator_splits(worker, num_workers)
        commit.register(self._token, self._progress, splits, worker, self._counters)
        remaining = self._remaining()
        if all(remaining[split] == 0 for split in splits):
            warnings.warn(
                f"epoch {self._epoch} was already fully delivered, so this iterator yields "
                f"nothing; call set_epoch({self._epoch + 1}) to move on",
                EpochCompleteWarning,
                stacklevel=2,
            )
        windows = WindowSource(
            snapshot=self._snapshot,
            plan=self._plan,
            columns=self._columns,
            filter_index=self._filter_index,
            transform=self._options.transform,
            on_error=self._options.on_transform_error,
            batch_rows=self._options.read_batch_size,
            counters=self._counters,
        )
        batch = self._loader_batch or commit.loader_batch(self._token)
        threads = self._options.io_queue_depth
        if self._packing is not None:
            self._active = iterate_blocks(
                windows, splits, self._progress, io_threads=threads, packing=self._packing
            )
        elif batch:
            self._active = iterate_batches(
                windows, splits, self._progress, io_threads=threads, batch_size=batch
            )
        else:
            self._active = iterate_cycles(windows, splits, self._progress, io_threads=threads)
        return self._active

    def _attach(self, loader_iterator: Any) -> None:
        """Remember the StreamingDataLoader iterator whose workers read this dataset."""
        self._loader_iterator = weakref.ref(loader_iterator)

    def _close_if_delivered(self) -> None:
        """Close open iterators when every owned split was delivered to the end.

        Frameworks such as Lightning stop after ``len(loader)`` batches without
        asking for the end of the epoch; such an iterator has nothing left to give.
        """
        if len(self) > 0:
            return
        loader_iterator = self._loader_iterator() if self._loader_iterator is not None else None
        if loader_iterator is not None:
            loader_iterator.close()
        if self._active is not None:
            self._active.close()  # a no-op once it has finished

    def _require_idle(self, action: str) -> None:
        loader_iterator = self._loader_iterator() if self._loader_iterator is not None else None
        if is_running(self._active) or (loader_iterator is not None and loader_iterator.active):
            raise RuntimeError(
                f"cannot {action} while an iterator of this dataset is active; finish or "
                "close the iterator (or the DataLoader loop) first"
            )

    def set_epoch(self, epoch: int) -> None:
        """Move to ``epoch``: a no-op for the current epoch, else counts restart at 0.

        Raises:
            RuntimeError: another epoch while an iterator is active.
            ValueError: ``epoch`` is not a non-negative integer.
        """
        if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
            raise ValueError(f"epoch must be a non-negative integer, got {epoch!r}")
        if epoch == self._epoch:
            return
        self._close_if_delivered()
        self._require_idle(f"set_epoch({epoch})")
        self._plan = EpochPlan(*self._fragments, self._settings(epoch))
        self._epoch = epoch
        self._progress = Progress(self.num_splits)

    def stats(self) -> dict[str, float]:
        """Live statistics of this rank, including its DataLoader workers.

        ``rows_delivered`` and ``rows_skipped`` count this epoch's committed samples
        of the rank's splits; ``rows_read``, ``bytes_read``, ``windows_read``,
        ``read_seconds`` (wall time of reads, summed over read threads) and
        ``transform_seconds`` are totals since this object was made, over this
        process and every worker whose batches reached it; ``read_ahead`` is the
        number of windows requested and not yet consumed. Worker figures are as of
        their latest delivered batch. Cheap: counters only, no I/O.
        """
        samples, positions = self._progress.samples, self._progress.positions
        totals = stats.total([self._counters.as_dict(), *self._worker_counters.values()])
        return {
            "epoch": self._epoch,
            "rows_delivered": sum(samples[split] for split in self._rank_splits),
            "rows_skipped": 0
            if self._packing is not None
            else sum(positions[split] - samples[split] for split in self._rank_splits),
            **totals,
        }

    def __getstate__(self) -> dict[str, Any]:
        """Pickle for a worker process: settings, snapshot and position, no handles."""
        state = dict(self.__dict__)
        state["_active"] = None
        state["_loader_iterator"] = None
        state["_trainer_pid"] = os.getpid()
        state["_loader_batch"] = commit.loader_batch(self._token)
        state["_counters"] = Counters()
        state["_worker_counters"] = {}
        if not commit.shipping_for_loader(self._token) and commit.pickled_for_a_child_process():
            self._shipped = True
        state["_shipped"] = False
        return state
