"""Sequence packing: each split's documents joined with ``eos_id``, cut into blocks.

Split s's token stream is its documents in plan order, each followed by
``eos_id``. It is cut into blocks of ``pack_sequences`` tokens; every split emits
exactly ``blocks_per_epoch / S`` blocks, padding with ``pad_id`` once its
documents run out and dropping the tokens beyond that budget. So every rank yields
the same number of blocks and the blocks do not depend on the topology.

A split's progress is an anchor ``(blocks, document, offset)``: after ``blocks``
blocks, the next one starts at token ``offset`` of document ``document`` (its
tokens plus the ``eos_id``). An anchor may lag the split's block count (a split no
iterator of this run owned, counted in lockstep); an iterator then rebuilds and
discards the blocks in between.
"""

from __future__ import annotations

import warnings
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.progress import Anchor, Cursor
from ..errors import PackingEstimateWarning
from ..tables.table import Table
from .iterate import lowest_level
from .reader import SplitReaders, open_readers
from .window import WindowSource

__all__ = ["Packing", "estimate_blocks", "iterate_blocks", "packing_for"]


@dataclass(frozen=True)
class Packing:
    """The packing settings; all of them decide the blocks, so states record them."""

    pack_sequences: int
    eos_id: int
    pad_id: int
    blocks_per_epoch: int

    def split_blocks(self, num_splits: int) -> int:
        """Blocks every split emits per epoch."""
        return self.blocks_per_epoch // num_splits


_SAMPLE_DOCUMENTS = 4096
"""Documents read to estimate ``blocks_per_epoch="auto"``."""


def packing_for(options: Any, handle: Table, columns: Sequence[str], planned_rows: int) -> Packing | None:
    """The packing settings for a snapshot, or None; checks the token column.

    Raises:
        ValueError: packing without exactly one integer-list column.
    """
    from ..tables import source

    if options.pack_sequences is None:
        return None
    _check_token_column(handle, columns)
    blocks = options.blocks_per_epoch
    if blocks == "auto":
        lengths = source.list_lengths(handle, columns[0], limit=_SAMPLE_DOCUMENTS, filter=options.filter)
        blocks = estimate_blocks(
            lengths,
            planned_rows=planned_rows,
            pack_sequences=options.pack_sequences,
            num_splits=options.num_splits,
            sampled_from=planned_rows,
        )
    return Packing(options.pack_sequences, options.eos_id, options.pad_id, int(blocks))


def _check_token_column(handle: Table, columns: Sequence[str]) -> None:
    """Packing reads exactly one column, of integer lists (variable or fixed size)."""
    from ..tables import source

    if len(columns) != 1:
        raise ValueError(
            f"pack_sequences packs one column of integer lists (token ids), got columns={list(columns)!r}; "
            "pass columns=[<token column>]"
        )
    if not source.is_integer_list(handle, columns[0]):
        kind = handle.schema.field(columns[0]).type
        raise ValueError(
            f"pack_sequences packs a column of integer lists (token ids), but column {columns[0]!r} is "
            f"{kind}; the accepted types are list, large_list and fixed_size_list of any integer type: "
            "store the token ids as one of them (pa.list_(pa.int32()), say)"
        )


def estimate_blocks(
    lengths: np.ndarray, *, planned_rows: int, pack_sequences: int, num_splits: int, sampled_from: int
) -> int:
    """``blocks_per_epoch`` for ``"auto"``: the sample's mean tokens per document.

    Rounded down to a multiple of ``num_splits`` (at least ``num_splits``); warns
    ``PackingEstimateWarning`` with the value so runs can pin it.
    """
    mean = float(np.mean(lengths + 1)) if len(lengths) else 1.0
    per_split = max(1, int(mean * (planned_rows // num_splits)) // pack_sequences)
    blocks = per_split * num_splits
    warnings.warn(
        f"blocks_per_epoch='auto' estimated {blocks} blocks of {pack_sequences} tokens from "
        f"{len(lengths)} of {sampled_from} documents (mean {mean:.1f} tokens with eos); splits "
        f"with fewer tokens are padded, extra tokens are dropped. Pass blocks_per_epoch={blocks} "
        "to fix it",
        PackingEstimateWarning,
        stacklevel=7,  # the caller of StreamingDataset() (through build_engine, the first view)
    )
    return blocks


_DOCUMENTS_PER_TAKE = 64


class _Packer:
    """Builds one split's blocks from its documents, starting at an anchor."""

    def __init__(self, readers: SplitReaders, split: int, anchor: Anchor, *, packing: Packing, column: str):
        self._readers, self.split, self._column = readers, split, column
        self._packing = packing
        self.blocks, self.document, self.offset = anchor
        self._tokens: np.ndarray | None = None  # of ``document``, with its eos
        self._ahead: list[Any] = []  # samples of the documents after it, read already

    @property
    def anchor(self) -> Anchor:
        return (self.blocks, self.document, self.offset)

    def _current(self) -> np.ndarray | None:
        """Tokens of ``document`` (its eos not included), or ``None`` past the split's end."""
        if self._tokens is None:
            if not self._ahead and self._readers.remaining(self.split) > 0:
                self._ahead = self._readers.take(self.split, _DOCUMENTS_PER_TAKE)[::-1]
            if self._ahead:
                self._tokens = np.asarray(self._ahead.pop()[self._column])
        return self._tokens

    def block(self) -> dict[str, Any]:
        """The next block: ``input_ids`` and ``doc_ids`` (document index in the block).

        A document's stream is its tokens then ``eos_id``; ``offset`` counts
        positions in that stream, so it runs up to the token count (the eos).
        """
        size, eos = self._packing.pack_sequences, self._packing.eos_id
        ids = np.full(size, self._packing.pad_id, dtype=np.int64)
        docs = np.zeros(size, dtype=np.int64)
        filled, local = 0, 0
        while filled < size:
            tokens = self._current()
            if tokens is None:  # the split ran dry: pads keep the last document's index
                docs[filled:] = local
                break
            if filled and self.offset == 0:
                local += 1
            count = len(tokens)
            take = min(size - filled, count + 1 - self.offset)
            stop = filled + take
            copied = min(take, count - self.offset) if self.offset < count else 0
            ids[filled : filled + copied] = tokens[self.offset : self.offset + copied]  # casts to int64
            if copied < take:
                ids[stop - 1] = eos
            docs[filled:stop] = local
            filled = stop
            self.offset += take
            if self.offset == count + 1:
                self.document, self.offset, self._tokens = self.document + 1, 0, None
        self.blocks += 1
        return {"input_ids": ids, "doc_ids": docs}


def iterate_blocks(
    windows: WindowSource,
    splits: Sequence[int],
    cursor: Cursor,
    *,
    io_threads: int,
    packing: Packing,
) -> Generator[dict[str, Any], None, None]:
    """Yield blocks by level (a block's index in its split), inside a level in
    ascending split order: cycle after cycle, and the rest of a partial cycle first.

    ``cursor`` moves each split's anchor as its block is handed out, so a state
    taken in the middle of a cycle is exact. Closing the generator stops reads.
    """
    import torch

    ordered = sorted(splits)
    budget = packing.split_blocks(len(cursor))
    column = windows.columns[0]
    anchors = {split: cursor.anchor(split) for split in ordered}
    with open_readers(
        windows, {split: anchors[split][1] for split in ordered}, io_threads=io_threads
    ) as readers:
        packers = {
            split: _Packer(readers, split, anchors[split], packing=packing, column=column)
            for split in ordered
        }
        for split, packer in packers.items():
            while packer.blocks < cursor.samples[split]:  # a lockstep anchor: catch up
                packer.block()
        while True:
            running = [split for split in ordered if packers[split].blocks < budget]
            if not running:
                return
            levels = {split: packers[split].blocks for split in running}
            active, _ = lowest_level(levels, running)
            for split in active:
                block = packers[split].block()
                cursor.move_anchors({split: packers[split].anchor})
                yield _tensors(block, torch)


def _tensors(block: dict[str, np.ndarray], torch: Any) -> dict[str, Any]:
    return {name: torch.from_numpy(values) for name, values in block.items()}
