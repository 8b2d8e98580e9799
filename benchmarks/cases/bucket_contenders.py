"""The contenders of the ``bucket`` suite: one pass of a table, local or on object storage.

Each factory takes the table's URI, its storage options (``None`` locally) and the
LanceDB directory it lives in, and returns the batches a trainer would loop over.
``ours:BLOCK:BUFFER`` is ours with those plan settings (the frontier's points).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from benchmarks.harness.s3 import BUCKET, Store
from benchmarks.harness.tables import wide_chunk, write_table

BATCH_SIZE = 256
NUM_SPLITS = 16
TABLE = "wide"


@dataclass(frozen=True)
class Where:
    """A table: its LanceDB directory (``uri`` is ``directory/wide.lance``) and options."""

    directory: str
    options: dict[str, str] | None

    @property
    def uri(self) -> str:
        """The Lance dataset URI."""
        return f"{self.directory}/{TABLE}.lance"

    def lancedb_table(self) -> Any:
        """The LanceDB table, opened with the options (as the peer is used)."""
        import lancedb

        return lancedb.connect(self.directory, storage_options=self.options).open_table(TABLE)


def write_tables(folder: str, store: Store, rows: int) -> tuple[Where, Where]:
    """The table of ``rows`` rows on local disk and on the server (read through the relay)."""
    local_dir, bucket_dir = os.path.join(folder, f"local{rows}"), f"s3://{BUCKET}/db{rows}"
    write_table(local_dir, TABLE, rows=rows, fragments=16, chunk=wide_chunk)
    direct = store.options(relayed=False)
    write_table(bucket_dir, TABLE, rows=rows, fragments=16, chunk=wide_chunk, storage_options=direct)
    return Where(local_dir, None), Where(bucket_dir, store.options(relayed=True))


def raw_scan(where: Where) -> Iterator[Any]:
    """``lance.dataset(uri).to_batches()``: sequential Arrow batches, every column."""
    import lance

    return iter(lance.dataset(where.uri, storage_options=where.options).to_batches())


def _ours(where: Where, **settings: Any) -> Iterator[Any]:
    from streaming import StreamingDataLoader, StreamingDataset

    dataset = StreamingDataset(where.uri, storage_options=where.options, num_splits=NUM_SPLITS, **settings)
    return iter(StreamingDataLoader(dataset, batch_size=BATCH_SIZE))


def ours_auto(where: Where) -> Iterator[Any]:
    """Ours with no plan settings: the profile the URI picks (the bucket profile on ``s3://``)."""
    return _ours(where)


def ours_local(where: Where) -> Iterator[Any]:
    """Ours with ``storage_profile="local"`` (the defaults for local disks)."""
    return _ours(where, storage_profile="local")


def ours_bucket(where: Where) -> Iterator[Any]:
    """Ours with ``storage_profile="bucket"``."""
    return _ours(where, storage_profile="bucket")


def ours_bucket_k2(where: Where) -> Iterator[Any]:
    """Ours with the URI's defaults and two worker processes (k=2)."""
    from streaming import StreamingDataLoader, StreamingDataset

    dataset = StreamingDataset(where.uri, storage_options=where.options, num_splits=NUM_SPLITS)
    return iter(StreamingDataLoader(dataset, batch_size=BATCH_SIZE, num_workers=2))


def ours_point(block_rows: int, buffer_rows: int) -> Callable[[Where], Iterator[Any]]:
    """Ours with ``block_rows`` and ``shuffle_buffer_size`` set (a frontier point)."""
    return lambda where: _ours(where, block_rows=block_rows, shuffle_buffer_size=buffer_rows)


def peer(where: Where) -> Iterator[Any]:
    """The peer's ``StreamingDataLoader(batch_size=256)`` over its shuffled dataset, k=0."""
    from lancedb.streaming import StreamingDataLoader, StreamingDataset

    dataset = StreamingDataset(where.lancedb_table(), num_splits=NUM_SPLITS, shuffle=True)
    return iter(StreamingDataLoader(dataset, batch_size=BATCH_SIZE))


def _lance_torch(where: Where, sampler: Any) -> Iterator[Any]:
    from lance.torch.data import LanceDataset

    options = {"storage_options": where.options} if where.options else None
    dataset = LanceDataset(where.uri, batch_size=BATCH_SIZE, dataset_options=options, sampler=sampler)
    return iter(dataset)


def lance_fragments(where: Where) -> Iterator[Any]:
    """``lance.torch`` ``LanceDataset`` with ``ShardedFragmentSampler(randomize=True)``."""
    from lance.sampler import ShardedFragmentSampler

    return _lance_torch(where, ShardedFragmentSampler(rank=0, world_size=1, randomize=True))


def lance_batches(where: Where) -> Iterator[Any]:
    """``lance.torch`` ``LanceDataset`` with ``ShardedBatchSampler(randomize=True)``."""
    from lance.sampler import ShardedBatchSampler

    return _lance_torch(where, ShardedBatchSampler(rank=0, world_size=1, randomize=True))


FIXED: dict[str, tuple[str, Callable[[Where], Iterator[Any]]]] = {
    "raw_scan": ("raw Lance scan (to_batches), unshuffled", raw_scan),
    "ours_local": ('ours, storage_profile="local" (the local defaults)', ours_local),
    "ours_bucket": ('ours, storage_profile="bucket"', ours_bucket),
    "ours_bucket_k2": ("ours, the URI's defaults, k=2 (two worker processes)", ours_bucket_k2),
    "peer": ("peer StreamingDataLoader(256), k=0", peer),
    "lance_fragments": ("lance.torch ShardedFragmentSampler(randomize=True)", lance_fragments),
    "lance_batches": ("lance.torch ShardedBatchSampler(randomize=True)", lance_batches),
}


def factory(key: str) -> Callable[[Where], Iterator[Any]]:
    """The factory of a contender key (``ours:BLOCK:BUFFER`` for a frontier point)."""
    if key.startswith("ours:"):
        _, block, buffer = key.split(":")
        return ours_point(int(block), int(buffer))
    return FIXED[key][1]


def batch_rows(batch: Any) -> int:
    """Rows of a batch: Arrow or a dict of tensors."""
    if hasattr(batch, "num_rows"):
        return int(batch.num_rows)
    return len(batch["id"])


def labels_of(batch: Any) -> Any:
    """The ``label`` column of a batch as numpy."""
    import numpy as np

    if hasattr(batch, "num_rows"):
        return batch.column("label").to_numpy()
    if isinstance(batch, dict):
        return np.asarray(batch["label"])
    return np.asarray(batch)  # lance.torch gives a bare tensor for a single column
