"""One contender of the ``widths`` suite in a fresh interpreter: converting the rows
into a peer's format, or reading them for two epochs while the process tree is watched.

Run by ``benchmarks.harness.envs.run_module`` with a JSON spec, in this repository's
environment (ours, lance.torch, raw Lance takes) or in a peer's own (litdata,
mosaicml-streaming, whose top-level package is also named ``streaming``). Imports
nothing but the standard library, numpy and the harness at the top, so it loads in
any; each contender (``benchmarks.cases.width_contenders``) imports its packages in
its own function.

The rows come from one source folder, written once by the suite: ``ids.npy``, and
``vec.npy`` (narrow rows: float32[128]), ``text_offsets.npy`` and ``text_bytes.npy``
(narrow text: each row's UTF-8 text, starting with its id and a colon) or
``payload.npy`` (wide rows: one fixed-size row of bytes each, its first 8 bytes the
row's id). Labels are ``id % 1000``. Every
converter and every Lance table is made from it, so every contender reads the same
rows. Reading checks, for every contender alike, that each id comes exactly once per
epoch and that each wide row's bytes have the right size, start with its id, and are
in memory (one byte of every 4 KiB page read: a memory-mapped row, as litdata and
mosaic give, is brought in as a trainer using it would; Arrow rows are in memory
once read).
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.cases.width_contenders import CONTENDERS, PRELOAD, mosaic_package
from benchmarks.harness.treewatch import TreeWatch

LABELS = 1000
CHUNK_ROWS = 4096
PAGE = 4096


# -- the source rows ---------------------------------------------------------------------


def source_rows(source: str, start: int, count: int) -> dict[str, Any]:
    """Rows ``start`` .. ``start + count - 1`` of the source as numpy arrays."""
    folder = Path(source)
    ids = np.load(folder / "ids.npy", mmap_mode="r")[start : start + count]
    rows = {"id": np.asarray(ids), "label": (np.asarray(ids) % LABELS).astype(np.int32)}
    if (folder / "vec.npy").exists():
        rows["vec"] = np.asarray(np.load(folder / "vec.npy", mmap_mode="r")[start : start + count])
    elif (folder / "text_offsets.npy").exists():
        bounds = np.load(folder / "text_offsets.npy", mmap_mode="r")[start : start + len(ids) + 1].tolist()
        data = np.load(folder / "text_bytes.npy", mmap_mode="r")
        chunk = bytes(data[bounds[0] : bounds[-1]])
        rows["text"] = [
            chunk[low - bounds[0] : high - bounds[0]].decode() for low, high in itertools.pairwise(bounds)
        ]
    else:
        rows["img"] = np.load(folder / "payload.npy", mmap_mode="r")[start : start + count]
    return rows


def source_size(source: str) -> int:
    """Rows in the source."""
    return len(np.load(Path(source) / "ids.npy", mmap_mode="r"))


def source_samples(source: str, start: int, count: int) -> Iterator[dict[str, Any]]:
    """The rows as one dict per row (what a peer's writer takes)."""
    rows = source_rows(source, start, count)
    for index in range(len(rows["id"])):
        sample: dict[str, Any] = {"id": int(rows["id"][index]), "label": int(rows["label"][index])}
        if "vec" in rows:
            sample["vec"] = np.array(rows["vec"][index])
        elif "text" in rows:
            sample["text"] = rows["text"][index]
        else:
            sample["img"] = rows["img"][index].tobytes()
        yield sample


def litdata_chunk(item: tuple[str, int, int]) -> Iterator[dict[str, Any]]:
    """``litdata.optimize``'s function: one input is (source, start, count)."""
    yield from source_samples(*item)


# -- conversions -------------------------------------------------------------------------


def convert_litdata(source: str, out: str) -> None:
    """The source rows in litdata's format (``litdata.optimize``, 64 MB chunks)."""
    import litdata

    total = source_size(source)
    inputs = [(source, start, min(CHUNK_ROWS, total - start)) for start in range(0, total, CHUNK_ROWS)]
    litdata.optimize(
        fn=litdata_chunk, inputs=inputs, output_dir=out, chunk_bytes="64MB", num_workers=1, mode="overwrite"
    )


def convert_mosaic(source: str, out: str) -> None:
    """The source rows in mosaicml-streaming's MDS format (64 MiB shards, no compression)."""
    mosaic = mosaic_package()
    narrow = (Path(source) / "vec.npy").exists()
    text = (Path(source) / "text_offsets.npy").exists()
    columns = {"id": "int64", "label": "int32"}
    columns.update(
        {"vec": "ndarray:float32:128"} if narrow else {"text": "str"} if text else {"img": "bytes"}
    )
    total = source_size(source)
    with mosaic.MDSWriter(out=out, columns=columns, size_limit=1 << 26) as writer:
        for start in range(0, total, CHUNK_ROWS):
            for sample in source_samples(source, start, min(CHUNK_ROWS, total - start)):
                writer.write(sample)


# -- reading -----------------------------------------------------------------------------


def _ids(batch: Any) -> np.ndarray:
    column = batch.column("id") if hasattr(batch, "column") else batch["id"]
    if hasattr(column, "to_numpy") and not hasattr(column, "numpy"):
        return np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.int64)
    if hasattr(column, "numpy"):
        return np.asarray(column.numpy(), dtype=np.int64).reshape(-1)
    return np.asarray(column, dtype=np.int64).reshape(-1)


def _check_bytes(batch: Any, ids: np.ndarray, size: int) -> None:
    """Each row's bytes: ``size`` of them, starting with the row's id, one byte of each page read."""
    values = batch["img"]
    if len(values) != len(ids):
        raise RuntimeError(f"a batch of {len(ids)} ids has {len(values)} payloads")
    if hasattr(values, "chunks"):  # Arrow (raw takes): the buffers, checked at once
        _check_arrow_bytes(values, ids, size)
        return
    for row, value in zip(ids.tolist(), values, strict=True):
        data = np.frombuffer(value, np.uint8)
        if len(data) != size or int.from_bytes(data[:8].tobytes(), "little") != row:
            raise RuntimeError(f"row {row}: wrong bytes ({len(data)} bytes)")
        int(data[::PAGE].sum())  # a trainer's use of the row: every page brought in


def _check_arrow_bytes(column: Any, ids: np.ndarray, size: int) -> None:
    """The same check on an Arrow binary column, from its offsets and values buffers."""
    found = []
    for chunk in column.chunks:
        wide = str(chunk.type).startswith("large_")
        offsets = np.frombuffer(chunk.buffers()[1], np.int64 if wide else np.int32)
        offsets = offsets[chunk.offset : chunk.offset + len(chunk) + 1].astype(np.int64)
        if len(chunk) and not np.all(np.diff(offsets) == size):
            raise RuntimeError(f"an Arrow chunk has rows of other than {size} bytes")
        values = np.frombuffer(chunk.buffers()[2], np.uint8)
        heads = values[offsets[:-1, None] + np.arange(8)] if len(chunk) else np.zeros((0, 8), np.uint8)
        found.append(np.ascontiguousarray(heads).view("<i8").reshape(-1))
    if not np.array_equal(np.concatenate(found) if found else ids[:0], ids):
        raise RuntimeError("an Arrow row's bytes do not start with its id")


def _close(items: Any) -> None:
    for name in ("close", "_shutdown_workers"):
        method = getattr(items, name, None)
        if callable(method):
            method()


def read(spec: dict[str, Any]) -> dict[str, Any]:
    """Two epochs of one contender: the first whole (every id checked), the second to its first
    batch; with ``epochs`` above 1, that many whole epochs first (peak RSS over all of them)."""
    import importlib

    for name in PRELOAD[spec["contender"]]:
        importlib.import_module(name)
    if spec["contender"] == "mosaic":
        mosaic_package()
    watch = TreeWatch(limit_kib=int(spec["limit_gib"] * 2**20), on_exceed=_exceeded)
    baseline_kib = watch.sample()
    watch.reset_peak()
    cpu_start = watch.cpu_seconds()
    start = time.perf_counter()
    loader, again = CONTENDERS[spec["contender"]](spec)
    items = iter(loader)
    seen: list[np.ndarray] = []
    first_s = first_rows = 0.0
    for batch in items:
        ids = _checked_ids(batch, spec)
        if not seen:
            first_s, first_rows = time.perf_counter() - start, len(ids)
        seen.append(ids)
        del batch
    end = time.perf_counter()
    cpu = watch.cpu_seconds() - cpu_start
    _close(items)
    del items
    exact_again = all(_whole_epoch(again(), spec) for _ in range(spec.get("epochs", 1) - 1))
    epoch_peak_kib = watch.peak_kib
    restart = time.perf_counter()
    second = again()
    try:
        next(second)
        restart_s = time.perf_counter() - restart
    except StopIteration:  # litdata's second epoch of a tiny table with workers can be empty
        restart_s = float("nan")
    _close(second)
    del second, loader
    peak_kib = watch.stop()
    found = _sorted(seen)
    rows = len(found)
    if spec["contender"] == "lance_takes":  # whole 64-row blocks only: no row twice
        exact = bool(rows == len(np.unique(found)))
    else:
        exact = _each_once(found, spec)
    exact = exact and exact_again
    return {
        "rows": rows,
        "exactly_once": exact,
        "first_s": first_s,
        "steady_rate": (rows - first_rows) / (end - start - first_s) if end - start > first_s else 0.0,
        "whole_rate": rows / (end - start),
        "restart_s": restart_s,
        "cpu_us_per_row": cpu / rows * 1e6 if rows else float("nan"),
        "baseline_mib": baseline_kib / 1024,
        "epoch_peak_mib": epoch_peak_kib / 1024,
        "peak_mib": peak_kib / 1024,
    }


def _whole_epoch(items: Iterator[Any], spec: dict[str, Any]) -> bool:
    """Read one more whole epoch (``epochs`` above 1: the same table read again, to compare peak
    RSS after as many rows as a larger table's one epoch); whether each id came once."""
    seen = [_checked_ids(batch, spec) for batch in items]
    _close(items)
    return _each_once(_sorted(seen), spec)


def _checked_ids(batch: Any, spec: dict[str, Any]) -> np.ndarray:
    """A batch's ids, its wide rows' bytes checked."""
    ids = _ids(batch)
    if spec["payload"]:
        _check_bytes(batch, ids, spec["payload"])
    elif spec.get("text"):
        _check_text(batch, ids)
    return ids


def _check_text(batch: Any, ids: np.ndarray) -> None:
    """Each row's text is a ``str`` that starts with the row's id and a colon."""
    values = batch["text"]
    if hasattr(values, "to_pylist"):  # Arrow (raw takes)
        values = values.to_pylist()
    if len(values) != len(ids):
        raise RuntimeError(f"a batch of {len(ids)} ids has {len(values)} texts")
    for row, value in zip(ids.tolist(), values, strict=True):
        if type(value) is not str or value[: value.index(":")] != str(row):
            raise RuntimeError(f"row {row}: wrong text {value[:40]!r}")


def _sorted(seen: list[np.ndarray]) -> np.ndarray:
    return np.sort(np.concatenate(seen)) if seen else np.zeros(0, np.int64)


def _each_once(found: np.ndarray, spec: dict[str, Any]) -> bool:
    """Every id of the table, once (``found`` sorted)."""
    return bool(len(found) == spec["rows"] and np.array_equal(found, np.arange(spec["rows"])))


PROBE_PRELOAD_SPEC = json.dumps({"action": "preload"})
"""The spec that times the fork server's imports in a fresh interpreter."""


def preload_seconds() -> float:
    """How long a fresh interpreter takes to import what our fork server preloads for its
    workers (torch most of it): the part of a k>0 first batch that no fork-safe start avoids."""
    import importlib

    started = time.perf_counter()
    launch = importlib.import_module("streaming.loader.launch")
    for name in launch.PRELOAD:
        importlib.import_module(name)
    return time.perf_counter() - started


def _exceeded(watch: TreeWatch) -> None:
    """Stop a run whose tree passed the RSS limit (the machine is shared)."""
    limit = watch.limit_kib / 2**20
    print(json.dumps({"error": f"stopped: the tree's RSS passed {limit:.0f} GiB"}), flush=True)
    os._exit(0)


def main(argv: list[str]) -> int:
    """``main([spec_json])``: convert or read, and print one JSON line."""
    spec = json.loads(argv[0])
    if spec["action"] == "convert-litdata":
        started = time.perf_counter()
        convert_litdata(spec["source"], spec["out"])
        print(json.dumps({"seconds": time.perf_counter() - started}))
    elif spec["action"] == "convert-mosaic":
        started = time.perf_counter()
        convert_mosaic(spec["source"], spec["out"])
        print(json.dumps({"seconds": time.perf_counter() - started}))
    elif spec["action"] == "preload":
        print(json.dumps({"seconds": preload_seconds()}))
    else:
        print(json.dumps(read(spec)), flush=True)
    sys.stdout.flush()
    return 0
