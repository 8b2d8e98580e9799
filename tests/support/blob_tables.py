"""Tables with a blob column (and the same bytes stored plainly), and picklable transforms
that check blob bytes inside DataLoader workers."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa

BLOB_FIELD = pa.field("img", pa.large_binary(), metadata={"lance-encoding:blob": "true"})
PLAIN_FIELD = pa.field("img", pa.large_binary())
BIG = 64 << 20  # the largest blob of the suite


def payload(row: int) -> bytes | None:
    """The bytes stored for ``row``: None (every 17th), empty (every 13th), else 0-3000 bytes."""
    if row % 17 == 5:
        return None
    if row % 13 == 1:
        return b""
    generator = np.random.default_rng(np.random.SeedSequence([7, row]))
    return generator.bytes(int(generator.integers(1, 3000)))


def digest(value: bytes | None) -> str:
    """A short fingerprint of a blob's bytes (``"null"`` for a null blob)."""
    return "null" if value is None else hashlib.blake2b(value, digest_size=8).hexdigest()


def rows(start: int, count: int, *, blob: bool) -> pa.Table:
    """Rows ``start``... with an ``id``, a ``label`` and the ``img`` column (blob or plain)."""
    ids = np.arange(start, start + count, dtype=np.int64)
    schema = pa.schema(
        [pa.field("id", pa.int64()), pa.field("label", pa.int32()), BLOB_FIELD if blob else PLAIN_FIELD]
    )
    images = pa.array([payload(int(i)) for i in ids], pa.large_binary())
    return pa.table({"id": ids, "label": (ids % 10).astype(np.int32), "img": images}, schema=schema)


def write(
    path: Path | str,
    fragments: Sequence[int],
    *,
    blob: bool,
    deleted: Iterable[int] = (),
    storage_options: dict[str, str] | None = None,
) -> str:
    """One fragment per entry of ``fragments`` (consecutive ids), then ``deleted`` removed."""
    uri, start = str(path), 0
    for index, size in enumerate(fragments):
        mode = "create" if index == 0 else "append"
        lance.write_dataset(rows(start, size, blob=blob), uri, mode=mode, storage_options=storage_options)
        start += size
    gone = sorted(set(deleted))
    if gone:
        lance.dataset(uri, storage_options=storage_options).delete(f"id IN ({', '.join(map(str, gone))})")
    return uri


class Digests:
    """A transform: each row's ``id`` and the fingerprint of its ``img`` (bytes or a handle)."""

    def __call__(self, batch: pa.RecordBatch) -> list[dict[str, Any]]:
        values = batch.column("img").to_pylist()
        return [
            {
                "id": int(i),
                "img": digest(value if value is None or isinstance(value, bytes) else value.read()),
            }
            for i, value in zip(batch.column("id").to_pylist(), values, strict=True)
        ]


def read_chars() -> int:
    """Bytes this process has read through system calls so far (Linux ``rchar``)."""
    with open("/proc/self/io") as io:
        return next(int(line.split()[1]) for line in io if line.startswith("rchar:"))


class ReadPart:
    """A transform over blob handles: open each one, seek to its middle and read ``length``
    bytes, then read it whole, counting the bytes the process read for each."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __call__(self, batch: pa.RecordBatch) -> list[dict[str, Any]]:
        samples = []
        for i, handle in zip(batch.column("id").to_pylist(), batch.column("img").to_pylist(), strict=True):
            sample: dict[str, Any] = {"id": int(i), "part": "null", "part_read": 0, "whole_read": 0}
            if handle is not None:
                before = read_chars()
                with handle.open() as blob:
                    blob.seek(handle.size // 2)
                    sample["part"] = digest(blob.read(self.length))
                middle = read_chars()
                whole = handle.read()
                sample.update(part_read=middle - before, whole_read=read_chars() - middle, size=len(whole))
            samples.append(sample)
        return samples


def big_payloads() -> dict[int, bytes | None]:
    """The rows of the large-blob table: 64 MiB, empty, 1 KiB, null."""
    return {0: np.random.default_rng(11).bytes(BIG), 1: b"", 2: b"x" * 1024, 3: None}


def write_big(path: Path | str) -> str:
    """A four-row blob table whose first blob is 64 MiB."""
    values = big_payloads()
    schema = pa.schema([pa.field("id", pa.int64()), BLOB_FIELD])
    table = pa.table(
        {"id": pa.array(list(values), pa.int64()), "img": pa.array(list(values.values()), pa.large_binary())},
        schema=schema,
    )
    return str(lance.write_dataset(table, str(path)).uri)
