"""The ``blobs`` suite's cases: the images, the three stores they are written to (a blob
column, a plain column, one file per image), and the fresh-interpreter probes of speed and
memory that the suite runs."""

from __future__ import annotations

import functools
import io
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from benchmarks.harness.measure import Caps, time_items, tree_pids, tree_rss_kib

BATCH = 32
SPLITS = 4  # every worker count of the run divides it
FRAGMENTS = 4
KINDS = ("blob", "plain", "files")
BLOB_FIELD = pa.field("img", pa.large_binary(), metadata={"lance-encoding:blob": "true"})
PLAN = (4, 1024)
"""(block_rows, shuffle_buffer_size) of both tables, given explicitly to both so only the
read path differs (about what images of a few hundred KiB get by default: blocks of at most
1 MiB, a buffer of at most 256 MiB)."""
THUMB = 64  # decoded images are shrunk to this side before they travel to the trainer
SAMPLE_S = 0.02


@functools.cache
def images(count: int = 16) -> list[bytes]:
    """``count`` distinct images: PNGs of 384x384 and JPEGs (quality 95) of 768x768."""
    from PIL import Image

    rng = np.random.default_rng(0)
    encoded = []
    for index in range(count):
        side, kind = (384, "PNG") if index % 2 == 0 else (768, "JPEG")
        ramp = np.linspace(0, 1, side, dtype=np.float32)
        colour = rng.random((1, 1, 3), dtype=np.float32)
        base = 200 * colour * (ramp[:, None, None] + ramp[None, :, None]) / 2
        pixels = np.clip(base + rng.normal(0, 20, (side, side, 3)), 0, 255).astype(np.uint8)
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format=kind, **({"quality": 95} if kind == "JPEG" else {}))
        encoded.append(buffer.getvalue())
    return encoded


def decode(data: bytes) -> np.ndarray:
    """One image's bytes decoded to RGB and shrunk to a ``THUMB`` x ``THUMB`` uint8 array."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        rgb = image.convert("RGB")
        return np.asarray(rgb.resize((THUMB, THUMB)))


def decode_batch(batch: pa.RecordBatch) -> list[dict[str, Any]]:
    """The ``transform``: every row's image decoded (module-level, so workers can load it)."""
    ids, data = batch.column("id").to_pylist(), batch.column("img").to_pylist()
    return [{"id": i, "pixels": decode(blob)} for i, blob in zip(ids, data, strict=True)]


class ImageFiles:
    """A map-style torch ``Dataset`` over one image file per row."""

    def __init__(self, folder: str, count: int) -> None:
        self.folder, self.count = folder, count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> dict[str, Any]:
        with open(os.path.join(self.folder, f"{index:07d}.img"), "rb") as file:
            return {"id": index, "pixels": decode(file.read())}


def write_tables(work: str, count: int) -> dict[str, str]:
    """The images three ways: a blob table, a plain table and a folder of files."""
    import lance

    pictures = images()
    data = [pictures[i % len(pictures)] for i in range(count)]
    uris = {}
    for kind in ("blob", "plain"):
        field = BLOB_FIELD if kind == "blob" else pa.field("img", pa.large_binary())
        schema = pa.schema([pa.field("id", pa.int64()), field])
        uri = os.path.join(work, f"{kind}.lance")
        for part, rows in enumerate(np.array_split(np.arange(count), FRAGMENTS)):
            table = pa.table(
                {
                    "id": pa.array(rows, pa.int64()),
                    "img": pa.array([data[i] for i in rows], pa.large_binary()),
                },
                schema=schema,
            )
            lance.write_dataset(table, uri, mode="create" if part == 0 else "append")
        uris[kind] = uri
    folder = os.path.join(work, "files")
    os.makedirs(folder)
    for index, blob in enumerate(data):
        Path(folder, f"{index:07d}.img").write_bytes(blob)
    uris["files"] = folder
    return uris


def speed_probe(spec: dict[str, Any]) -> dict[str, Any]:
    """In a fresh interpreter: one contender's first batch and steady rows/s."""
    import torch.utils.data

    from streaming import StreamingDataLoader, StreamingDataset

    kind, workers, location = spec["kind"], spec["workers"], spec["location"]
    timeout = {"timeout": 300} if workers else {}

    def make() -> Any:
        if kind == "files":
            files = ImageFiles(location, spec["images"])
            loader = torch.utils.data.DataLoader(
                files, batch_size=BATCH, shuffle=True, num_workers=workers, **timeout
            )
        else:
            plan = {"block_rows": PLAN[0], "shuffle_buffer_size": PLAN[1]}
            data = StreamingDataset(location, num_splits=SPLITS, transform=decode_batch, **plan)
            loader = StreamingDataLoader(data, batch_size=BATCH, num_workers=workers, **timeout)
        return iter(loader)

    run = time_items(make, size=lambda batch: len(batch["id"]), caps=Caps(spec["images"], spec["seconds"]))
    return {"rows": run.rows, "first_s": run.first_s, "rate": run.rate, "stopped_by": run.stopped_by}


def write_big_table(work: str, count: int, blob_bytes: int) -> str:
    """``count`` blobs of ``blob_bytes`` each (seeded bytes, each blob's first 8 bytes its id)."""
    import lance

    body = np.random.default_rng(1).bytes(blob_bytes)
    schema = pa.schema([pa.field("id", pa.int64()), BLOB_FIELD])
    uri = os.path.join(work, "big.lance")
    per_write = max(1, (256 << 20) // blob_bytes)
    for start in range(0, count, per_write):
        ids = range(start, min(count, start + per_write))
        values = [i.to_bytes(8, "little") + body[8:] for i in ids]
        table = pa.table(
            {"id": pa.array(ids, pa.int64()), "img": pa.array(values, pa.large_binary())}, schema=schema
        )
        lance.write_dataset(table, uri, mode="create" if start == 0 else "append")
        del values, table
    return uri


def _high_water_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            return next((int(line.split()[1]) for line in status if line.startswith("VmHWM:")), 0)
    except OSError:
        return 0


class Peaks:
    """Every ``SAMPLE_S``: the tree's summed RSS (its peak) and each process's ``VmHWM``."""

    def __init__(self) -> None:
        self.tree_kib = tree_rss_kib()
        self.high: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        self.tree_kib = max(self.tree_kib, tree_rss_kib())
        for pid in tree_pids():
            self.high[pid] = max(self.high.get(pid, 0), _high_water_kib(pid))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(SAMPLE_S)

    def stop(self) -> None:
        self._sample()
        self._stop.set()
        self._thread.join()


def memory_probe(spec: dict[str, Any]) -> dict[str, Any]:
    """In a fresh interpreter: stream the big table once with k=2, every blob checked."""
    from streaming import StreamingDataLoader, StreamingDataset

    baseline = tree_rss_kib()
    peaks = Peaks()
    start = time.perf_counter()
    data = StreamingDataset(spec["uri"], num_splits=2)
    plan = data.state_dict()["plan"]
    loader = StreamingDataLoader(data, batch_size=spec["batch"], num_workers=2, timeout=300)
    rows = 0
    for batch in loader:
        for i, blob in zip(batch["id"].tolist(), batch["img"], strict=True):
            if len(blob) != spec["blob_bytes"] or int.from_bytes(blob[:8], "little") != i:
                raise RuntimeError(f"row {i}: wrong blob")
        rows += len(batch["id"])
    seconds = time.perf_counter() - start
    peaks.stop()
    trainer = peaks.high.pop(os.getpid(), 0)
    return {
        "rows": rows,
        "seconds": seconds,
        "block_rows": plan["block_rows"],
        "window_rows": plan["window_rows"],
        "baseline_mib": baseline / 1024,
        "tree_peak_mib": peaks.tree_kib / 1024,
        "trainer_peak_mib": trainer / 1024,
        "child_peaks_mib": sorted((kib / 1024 for kib in peaks.high.values()), reverse=True),
    }
