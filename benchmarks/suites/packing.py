"""Sequence-packing throughput, ours against the peer, side by side in one run.

    python -m benchmarks packing [--docs 20000] [--out docs/benchmarks.md]

Builds a LanceDB table of token lists (lengths 0 .. 2 * mean, seeded), then
iterates packed blocks of 512 tokens with the same settings for every contender
and reports tokens per second (block tokens, padding included) after the first
block. The raw scan of the token column is the ceiling. The section between the
markers of ``--out`` is replaced; the rest of the file is kept.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from benchmarks.harness import sections

BLOCK, EOS, PAD, SPLITS, FRAGMENTS = 512, 1, 0, 16, 16


def build(folder: str, docs: int, mean: int) -> Any:
    """The token table in ``FRAGMENTS`` fragments; returns the LanceDB table."""
    import lancedb

    rng = np.random.default_rng(0)
    lengths = rng.integers(0, 2 * mean + 1, size=docs)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    values = pa.array(rng.integers(2, 50_000, size=int(offsets[-1]), dtype=np.int32))
    tokens = pa.ListArray.from_arrays(pa.array(offsets), values)
    table = pa.table({"tokens": tokens})
    step = -(-docs // FRAGMENTS)
    db = lancedb.connect(folder)
    handle = db.create_table("docs", table.slice(0, step))
    for start in range(step, docs, step):
        handle.add(table.slice(start, step))
    return handle


def budget(table: Any) -> int:
    """Blocks per epoch holding every token (plus one EOS per document)."""
    import pyarrow.compute as pc

    column = table.to_lance().to_table(columns=["tokens"]).column("tokens")
    total = int(pc.sum(pc.list_value_length(column)).as_py()) + len(column)
    return -(-total // (BLOCK * SPLITS)) * SPLITS


def raw_scan(table: Any, blocks: int) -> Iterator[int]:
    for batch in table.to_lance().to_batches(columns=["tokens"]):
        yield len(batch.column(0).values)


def _settings(blocks: int) -> dict[str, Any]:
    return {
        "num_splits": SPLITS,
        "columns": ["tokens"],
        "pack_sequences": BLOCK,
        "eos_id": EOS,
        "pad_id": PAD,
        "blocks_per_epoch": blocks,
    }


def ours(table: Any, blocks: int) -> Iterator[int]:
    from streaming import StreamingDataset

    for block in StreamingDataset(table, **_settings(blocks)):
        yield int(block["input_ids"].numel())


def peer(table: Any, blocks: int) -> Iterator[int]:
    from lancedb.streaming import StreamingDataset

    for block in StreamingDataset(table, **_settings(blocks)):
        yield int(block["input_ids"].numel())


Contender = Callable[[Any, int], Iterator[int]]
CONTENDERS: tuple[tuple[str, Contender], ...] = (
    ("raw Lance scan of the token column (the ceiling)", raw_scan),
    ("peer StreamingDataset(pack_sequences=512), direct", peer),
    ("ours StreamingDataset(pack_sequences=512), direct", ours),
)


def measure(contender: Contender, table: Any, blocks: int, cap_s: float) -> tuple[float, float, int]:
    """(first-item seconds, tokens/s after the first item, tokens) within ``cap_s``."""
    start = time.perf_counter()
    items = contender(table, blocks)
    tokens = next(items)
    first = time.perf_counter()
    counted = 0
    for count in items:
        counted += count
        if time.perf_counter() - first > cap_s:
            break
    elapsed = time.perf_counter() - first
    return first - start, counted / elapsed if elapsed > 0 else float("nan"), tokens + counted


def section(rows: list[tuple[str, float, float, int]], docs: int, blocks: int) -> str:
    ceiling = rows[0][2]
    peer_rate = rows[1][2]
    lines = [
        "## Sequence packing",
        "",
        f"`python -m benchmarks packing --docs {docs}`: {docs:,} documents in {FRAGMENTS} fragments, "
        f"blocks of {BLOCK} tokens, {SPLITS} splits, blocks_per_epoch={blocks:,} (every token fits), "
        "tokens/s after the first block.",
        "",
        "| contender | first item (s) | tokens/s | vs raw scan | vs peer |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for label, first, rate, _ in rows:
        lines.append(
            f"| {label} | {first:.2f} | {rate:,.0f} | {rate / ceiling:.3f}x | {rate / peer_rate:.2f}x |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks packing", description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=20_000)
    parser.add_argument("--mean", type=int, default=256, help="mean tokens per document")
    parser.add_argument("--cap", type=float, default=30.0, help="seconds per contender at most")
    parser.add_argument(
        "--out", type=Path, default=None, help="Markdown file whose packing section is replaced"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        table = build(folder, args.docs, args.mean)
        blocks = budget(table)
        rows = []
        for label, contender in CONTENDERS:
            first, rate, tokens = measure(contender, table, blocks, args.cap)
            rows.append((label, first, rate, tokens))
            print(f"{label}: first {first:.2f} s, {rate:,.0f} tokens/s", flush=True)
    text = section(rows, args.docs, blocks)
    sections.publish(text, name="packing", out=args.out)
    return 0
