"""The throughput contenders, each an iterator factory timed the same way.

Every factory builds its dataset/loader inside the timed region (so time to first
batch includes construction, the peer's permutation and worker start-up) and
returns the iterator the trainer would loop over.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from benchmarks.harness.measure import Caps, Run, time_items
from benchmarks.harness.tables import TableRef

BATCH_SIZE = 256
NUM_SPLITS = 16
NUM_WORKERS = 2

Factory = Callable[[TableRef], Iterator[Any]]


@dataclass(frozen=True)
class Contender:
    """A named way to read the table, and which peer contender it is compared with."""

    key: str
    label: str
    make: Factory
    per_row: bool
    peer: str | None = None


def _batch_rows(batch: Any) -> int:
    """Rows of a batch: an Arrow RecordBatch or a dict of tensors."""
    if isinstance(batch, (pa.RecordBatch, pa.Table)):
        return batch.num_rows
    return len(batch["id"])


def _numpy_column(column: pa.Array) -> np.ndarray:
    """A column as numpy: fixed-size lists become a 2-D array, one row per list."""
    if pa.types.is_fixed_size_list(column.type):
        width = column.type.list_size
        return column.flatten().to_numpy(zero_copy_only=False).reshape(len(column), width)
    return column.to_numpy(zero_copy_only=False)


def _row_dict_batches(batches: Iterator[pa.RecordBatch], batch_size: int) -> Iterator[Any]:
    """Raw Arrow batches -> one dict of numpy values per row -> ``default_collate``."""
    from torch.utils.data import default_collate

    pending: list[dict[str, Any]] = []
    for batch in batches:
        names = batch.schema.names
        columns = [_numpy_column(batch.column(name)) for name in names]
        for values in zip(*columns, strict=True):
            pending.append(dict(zip(names, values, strict=True)))
            if len(pending) == batch_size:
                yield default_collate(pending)
                pending = []
    if pending:
        yield default_collate(pending)


def raw_scan(table: TableRef) -> Iterator[Any]:
    """``lance.dataset(uri).to_batches()``: Arrow batches, no per-row work (the limit)."""
    import lance

    return iter(lance.dataset(table.uri).to_batches())


def row_dicts(table: TableRef) -> Iterator[Any]:
    """The raw scan turned into per-row dicts and collated in batches of 256."""
    import lance

    return _row_dict_batches(iter(lance.dataset(table.uri).to_batches()), BATCH_SIZE)


BLOCK_ROWS = 64
WAVE_BLOCKS = 32


def lance_block_takes(table: TableRef, *, wave_blocks: int = WAVE_BLOCKS) -> Iterator[Any]:
    """Sorted ``fragment.take`` of shuffled 64-row blocks, ``wave_blocks`` a call, on one thread.

    What a shuffled block reader cannot avoid: the Lance reads alone, as Arrow,
    with no permutation, batching or tensors (the limit for shuffled reads).
    """
    import lance

    dataset = lance.dataset(table.uri)
    rng = np.random.default_rng(0)

    def batches() -> Iterator[pa.Table]:
        for fragment in dataset.get_fragments():
            blocks = rng.permutation(fragment.count_rows() // BLOCK_ROWS)
            for start in range(0, len(blocks), wave_blocks):
                chosen = np.sort(blocks[start : start + wave_blocks]) * BLOCK_ROWS
                offsets = (chosen[:, None] + np.arange(BLOCK_ROWS)).reshape(-1)
                yield fragment.take(offsets)

    return batches()


def lance_torch(table: TableRef) -> Iterator[Any]:
    """``lance.torch.data.LanceDataset(uri, batch_size=256)``: a sequential, unshuffled scan."""
    from lance.torch.data import LanceDataset

    return iter(LanceDataset(table.uri, batch_size=BATCH_SIZE))


def peer_direct(table: TableRef) -> Iterator[Any]:
    """``lancedb.streaming.StreamingDataset(num_splits=16, shuffle=True)`` iterated per row."""
    from lancedb.streaming import StreamingDataset

    return iter(StreamingDataset(table.open(), num_splits=NUM_SPLITS, shuffle=True))


def _peer_loader(table: TableRef, workers: int) -> Iterator[Any]:
    from lancedb.streaming import StreamingDataLoader, StreamingDataset

    dataset = StreamingDataset(table.open(), num_splits=NUM_SPLITS, shuffle=True)
    context = "spawn" if workers else None  # the default fork start method crashes its workers
    loader = StreamingDataLoader(
        dataset, batch_size=BATCH_SIZE, num_workers=workers, multiprocessing_context=context
    )
    return iter(loader)


def peer_loader_k0(table: TableRef) -> Iterator[Any]:
    """The peer's ``StreamingDataLoader(batch_size=256, num_workers=0)``."""
    return _peer_loader(table, 0)


def peer_loader_k2(table: TableRef) -> Iterator[Any]:
    """The peer's ``StreamingDataLoader`` with 2 ``spawn`` workers."""
    return _peer_loader(table, NUM_WORKERS)


def ours_direct(table: TableRef) -> Iterator[Any]:
    """``streaming.StreamingDataset(table, num_splits=16)`` iterated per row."""
    from streaming import StreamingDataset

    return iter(StreamingDataset(table.open(), num_splits=NUM_SPLITS))


def _ours_loader(table: TableRef, workers: int) -> Iterator[Any]:
    from streaming import StreamingDataLoader, StreamingDataset

    dataset = StreamingDataset(table.open(), num_splits=NUM_SPLITS)
    return iter(StreamingDataLoader(dataset, batch_size=BATCH_SIZE, num_workers=workers))


def ours_loader_k0(table: TableRef) -> Iterator[Any]:
    """``streaming.StreamingDataLoader(batch_size=256, num_workers=0)``."""
    return _ours_loader(table, 0)


def ours_loader_k2(table: TableRef) -> Iterator[Any]:
    """``streaming.StreamingDataLoader`` with 2 workers and the default start method."""
    return _ours_loader(table, NUM_WORKERS)


CONTENDERS = (
    Contender("raw_scan", "raw Lance scan -> Arrow (to_batches)", raw_scan, per_row=False),
    Contender(
        "lance_takes", "Lance takes of shuffled 64-row blocks, Arrow only", lance_block_takes, per_row=False
    ),
    Contender("row_dicts", "raw scan -> row dicts -> default_collate(256)", row_dicts, per_row=False),
    Contender(
        "lance_torch", "lance.torch LanceDataset(batch_size=256), unshuffled", lance_torch, per_row=False
    ),
    Contender("peer_direct", "peer StreamingDataset, direct per row", peer_direct, per_row=True),
    Contender("peer_k0", "peer StreamingDataLoader(256), k=0", peer_loader_k0, per_row=False),
    Contender("peer_k2", "peer StreamingDataLoader(256), k=2 spawn", peer_loader_k2, per_row=False),
    Contender("ours_direct", "ours StreamingDataset, direct per row", ours_direct, True, "peer_direct"),
    Contender("ours_k0", "ours StreamingDataLoader(256), k=0", ours_loader_k0, False, "peer_k0"),
    Contender(
        "ours_k2", "ours StreamingDataLoader(256), k=2 default start", ours_loader_k2, False, "peer_k2"
    ),
)


PassFactory = Callable[[TableRef], Callable[[int], Iterator[Any]]]


def _back_to_back(start_pass: Callable[[int], Iterator[Any]], passes: int) -> Iterator[Any]:
    """The items of ``passes`` passes, each started when the previous one ends."""
    for index in range(passes):
        yield from start_pass(index)


def raw_scan_passes(table: TableRef) -> Callable[[int], Iterator[Any]]:
    """A new ``to_batches()`` scan per pass (the handle is opened once)."""
    import lance

    dataset = lance.dataset(table.uri)
    return lambda _: iter(dataset.to_batches())


def lance_torch_passes(table: TableRef) -> Callable[[int], Iterator[Any]]:
    """A new ``LanceDataset(uri, batch_size=256)`` iterator per pass."""
    from lance.torch.data import LanceDataset

    dataset = LanceDataset(table.uri, batch_size=BATCH_SIZE)
    return lambda _: iter(dataset)


def ours_k0_passes(table: TableRef) -> Callable[[int], Iterator[Any]]:
    """Ours, k=0: epoch ``p`` of the same dataset per pass (``set_epoch(p)``, a new iterator)."""
    from streaming import StreamingDataLoader, StreamingDataset

    dataset = StreamingDataset(table.open(), num_splits=NUM_SPLITS)
    loader = StreamingDataLoader(dataset, batch_size=BATCH_SIZE)

    def start(index: int) -> Iterator[Any]:
        loader.set_epoch(index)
        return iter(loader)

    return start


@dataclass(frozen=True)
class Sustained:
    """A contender streamed over several passes of the table back to back."""

    key: str
    label: str
    passes: PassFactory


SUSTAINED = (
    Sustained("raw_scan", "raw Lance scan -> Arrow (to_batches)", raw_scan_passes),
    Sustained("lance_torch", "lance.torch LanceDataset(batch_size=256), unshuffled", lance_torch_passes),
    Sustained("ours_k0", "ours StreamingDataLoader(256), k=0 (a new epoch per pass)", ours_k0_passes),
)


def run_sustained(sustained: Sustained, table: TableRef, caps: Caps, *, passes: int) -> Run:
    """Measure ``passes`` back-to-back passes like one contender (steady state after the first batch)."""
    try:
        return time_items(lambda: _back_to_back(sustained.passes(table), passes), size=_batch_rows, caps=caps)
    except Exception as error:  # a crashing contender must not hide the others' numbers
        return Run(0, float("nan"), 0, 0.0, f"failed: {type(error).__name__}: {error}"[:200])


def preload() -> None:
    """Import what the contenders use, as a trainer would have before its first batch."""
    for name in (
        "torch",
        "lance",
        "lance.torch.data",
        "lancedb",
        "lancedb.streaming",
    ):
        importlib.import_module(name)
    import_ours()


def import_ours() -> None:
    """Import our loader and what it imports (the package root imports it at first use)."""
    import streaming

    _ = streaming.StreamingDataLoader


def run_contender(contender: Contender, table: TableRef, caps: Caps) -> Run:
    """Measure one contender on ``table`` (in this process; workers are its children).

    A contender that fails comes back as a run of 0 rows whose ``stopped_by`` says why.
    """
    size = None if contender.per_row else _batch_rows
    try:
        return time_items(lambda: contender.make(table), size=size, caps=caps)
    except Exception as error:  # a crashing contender must not hide the others' numbers
        return Run(0, float("nan"), 0, 0.0, f"failed: {type(error).__name__}: {error}"[:200])
