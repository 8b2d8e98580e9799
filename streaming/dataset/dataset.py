"""``StreamingDataset``: a Lance table as an elastic, exactly resumable IterableDataset.

One idea, the user's class: a facade whose every method forwards to its engine
(``engine.DatasetEngine``) in a line or two. Most of this module is what a user reads:
the class's docstring and the documented arguments of its constructor (two thirds of
its lines), which ``docs/api.md`` renders; splitting it would split that page.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from torch.utils.data import IterableDataset

from ..core import keywords
from ..core.options import DEFAULT_IO_QUEUE_DEPTH, DEFAULT_READ_BATCH_SIZE
from ..state.merge import merge_states
from . import host
from .build import build_engine
from .engine import DatasetEngine
from .observe import Described, Observed

__all__ = ["StreamingDataset"]


class StreamingDataset(Described, Observed, IterableDataset[Any]):
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
        num_splits: S, fixed for the whole run; a multiple of ``world_size`` (any
            ``num_workers`` works). ``None``: chosen for the table so that the world
            sizes jobs move between divide it (192 for 1 to 64 ranks once the table
            has 1,024 rows a split; fewer for smaller tables, ``world_size`` at the
            least), recorded in the state and adopted from a checkpoint on load.
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
            storage profile's (64 local; bucket: the most rows, a power of two,
            within 2 MiB, e.g. 2,048 for 0.5 KiB rows).
        shuffle_buffer_size: Rows (over all splits) permuted together; each split's
            window is ``max(1, shuffle_buffer_size // (S * block_rows))`` blocks.
            ``None``: the storage profile's (32,768 local; 128 blocks in a bucket).
        storage_profile: Where the plan settings above come from when not given:
            ``"local"`` (small blocks, small buffer), ``"bucket"`` (blocks of about
            1 to 2 MiB, which object storage needs to be fast and cheap, a buffer
            of 128 blocks to keep the mixing, at least 16 read threads and one
            Lance take per fragment), or ``"auto"`` (default): ``"bucket"`` for
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
        self._engine = build_engine(table, keywords.given(locals()))  # core/keywords.py declares them
        host.attach(self, self._engine)

    def __repr__(self) -> str:
        return self._engine.describe_self()

    def _engine_described(self) -> DatasetEngine:
        return self._engine

    def __getstate__(self) -> dict[str, Any]:
        """Pickled for a worker process: the engine (settings, snapshot, position; no handle)."""
        return {"engine": self._engine}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._engine = state["engine"]
        host.attach(self, self._engine)

    # -- iteration ------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        """Yield the remaining samples of this rank's (or this worker's) splits.

        A new iterator closes an older one that has not finished (its later
        ``next()`` raises ``RuntimeError``). It takes its position at its first
        ``next()``: the committed position then, so a ``set_epoch`` or
        ``load_state_dict`` between ``iter()`` and the first ``next()`` is followed.
        An evaluation dataset starts at position 0 of its epoch every time.
        """
        return self._engine.iterate()

    def __len__(self) -> int:
        """Samples (or packed blocks) the next iterator of this rank will yield.

        Raises:
            TypeError: an endless dataset, which has no length.
        """
        return self._engine.length()

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
        self._engine.set_epoch(epoch)

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

        The training loop's waits for a ``StreamingDataLoader``'s batches (always
        kept, since this object was made; seconds): ``wait_batches`` (batches handed
        to the loop), ``wait_seconds`` (their total time in ``next()``),
        ``wait_first_seconds`` (the part spent on each iterator's first batch:
        start-up), ``wait_p50_seconds``, ``wait_p95_seconds``, ``wait_p99_seconds``
        and ``wait_longest_seconds`` (over the batches after each first one, within
        3%), and with workers ``wait_worker_<w>_seconds`` (the part of the waits
        spent on worker w's shares). Over ranks: ``streaming.gather_stats``.

        With workers, ``rows_read_worker_<w>`` is how many rows worker w read (its
        processes since this object was made): how evenly the workers share the
        reads. The trainer's own reads (``num_workers=0``, the first batches of a
        head start) are the rest of ``rows_read``.
        """
        return self._engine.stats()

    # -- checkpoints ------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The position after the last sample delivered, as plain JSON data.

        Owned splits carry their exact counts; every other split carries where it
        stands if all ranks advance in lockstep, so one rank's state resumes a
        synchronous job on the same topology. Never contains credentials.

        Raises:
            RuntimeError: an evaluation dataset; a dataset whose samples went to the
                workers of a plain DataLoader.
        """
        return self._engine.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from ``state``: pins its snapshot and adopts its epoch and counts.

        The whole state is validated first; a refused state leaves the dataset as
        it was.

        Raises:
            ValueError: malformed state, unknown format, peer checkpoint, or any plan
                input that differs from this dataset's (the message names the
                field, both values and the fix).
            SnapshotGoneError: the pinned version no longer exists.
            RuntimeError: an evaluation dataset, or an iterator of this dataset has
                not finished and is still held (close it or drop it first).
        """
        self._engine.load_state_dict(state)

    def release_snapshot(self) -> bool:
        """Remove the tag that protects this dataset's version (see ``tag_snapshot``).

        Returns False when the version had no such tag. After this, cleaning up old
        versions may delete it, and states that pin it can no longer be resumed.
        """
        return self._engine.release_snapshot()

    @staticmethod
    def merge_state_dicts(states: Sequence[dict[str, Any]], *, allow_lag: bool = False) -> dict[str, Any]:
        """Merge every old rank's state into the one state every new rank loads.

        Each split's count comes from the state that owns it. Refuses states of
        different plans, snapshots or epochs, owners that disagree, and (unless
        ``allow_lag=True``, which accepts ranks of unequal remaining length) owned
        counts that differ between states.
        """
        return merge_states(states, allow_lag=allow_lag)
