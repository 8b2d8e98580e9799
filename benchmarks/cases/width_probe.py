"""One contender of the ``widths`` suite in a fresh interpreter: converting the rows
into a peer's format, or reading them for two epochs while the process tree is watched.

Run by ``benchmarks.harness.envs.run_module`` with a JSON spec, in this repository's
environment (ours, lance.torch, raw Lance takes, litdata) or in a peer's own
(mosaicml-streaming, whose top-level package is also named ``streaming``). Imports
nothing but the standard library, numpy and the harness at the top, so it loads in
either; each contender's packages are imported in its own function.

The rows come from one source folder, written once by the suite: ``ids.npy``, and
``vec.npy`` (narrow rows: float32[128]) or ``payload.npy`` (wide rows: one fixed-size
row of bytes each, its first 8 bytes the row's id). Labels are ``id % 1000``. Every
converter and every Lance table is made from it, so every contender reads the same
rows. Reading checks that each id comes exactly once per epoch and that each wide
row's bytes have the right size and start with its id.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness.treewatch import TreeWatch

LABELS = 1000
CHUNK_ROWS = 4096
SPLITS = 16
"""Our splits at every k (the default, the world size, is 1: two workers need a multiple of 2)."""


# -- the source rows ---------------------------------------------------------------------


def source_rows(source: str, start: int, count: int) -> dict[str, Any]:
    """Rows ``start`` .. ``start + count - 1`` of the source as numpy arrays."""
    folder = Path(source)
    ids = np.load(folder / "ids.npy", mmap_mode="r")[start : start + count]
    rows = {"id": np.asarray(ids), "label": (np.asarray(ids) % LABELS).astype(np.int32)}
    if (folder / "vec.npy").exists():
        rows["vec"] = np.asarray(np.load(folder / "vec.npy", mmap_mode="r")[start : start + count])
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


def without_torchvision() -> None:
    """Stand in for torchvision where it is not installed.

    mosaicml-streaming imports torchvision at import for its vision datasets (unused
    here), and so does litdata when it is installed; PyPI's torchvision is a CUDA build
    whose operators do not load next to the CPU build of torch these environments
    have, so the suite installs the peers without it and this gives the two names
    mosaic imports.
    """
    import importlib.machinery
    import importlib.util
    import types

    if importlib.util.find_spec("torchvision") is not None or "torchvision" in sys.modules:
        return
    import torch.utils.data

    names = (
        "torchvision",
        "torchvision.datasets",
        "torchvision.transforms",
        "torchvision.transforms.functional",
    )
    modules = {name: types.ModuleType(name) for name in names}
    for name, module in modules.items():
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    modules["torchvision.datasets"].VisionDataset = torch.utils.data.Dataset  # type: ignore[attr-defined]
    modules["torchvision.transforms.functional"].to_tensor = torch.as_tensor  # type: ignore[attr-defined]
    sys.modules.update(modules)


def mosaic_package() -> Any:
    """mosaicml-streaming's ``streaming`` package (refused if ours was found instead)."""
    without_torchvision()
    import streaming as mosaic

    if not hasattr(mosaic, "MDSWriter"):
        raise RuntimeError(f"the streaming package at {mosaic.__file__} is not mosaicml-streaming")
    return mosaic


def convert_mosaic(source: str, out: str) -> None:
    """The source rows in mosaicml-streaming's MDS format (64 MiB shards, no compression)."""
    mosaic = mosaic_package()
    narrow = (Path(source) / "vec.npy").exists()
    columns = {"id": "int64", "label": "int32"}
    columns.update({"vec": "ndarray:float32:128"} if narrow else {"img": "bytes"})
    total = source_size(source)
    with mosaic.MDSWriter(out=out, columns=columns, size_limit=1 << 26) as writer:
        for start in range(0, total, CHUNK_ROWS):
            for sample in source_samples(source, start, min(CHUNK_ROWS, total - start)):
                writer.write(sample)


# -- contenders: (the loader, how to start the next epoch) -------------------------------

Made = tuple[Any, Callable[[], Iterator[Any]]]


def lance_torch_wide(batch: Any, **_: Any) -> dict[str, Any]:
    """lance.torch's ``to_tensor_fn`` for rows with bytes: ids as a tensor, bytes as a list
    (its default refuses binary columns; blob columns arrive as ``lance.BlobFile``s, read here)."""
    import pyarrow as pa
    import torch

    out: dict[str, Any] = {}
    names = batch.column_names if isinstance(batch, pa.RecordBatch) else list(batch)
    for name in names:
        column = batch[name]
        if isinstance(column, list):
            out[name] = [blob.read() for blob in column]
        elif pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
            out[name] = column.to_pylist()
        elif not name.startswith("_"):
            out[name] = torch.from_numpy(column.to_numpy(zero_copy_only=False))
    return out


class LanceTorchBlobs:
    """lance.torch's ``to_tensor_fn`` for a blob column: lance.torch hands over the blob
    descriptors (it reads blobs only for a ``large_binary`` field, not Lance's blob type),
    so each batch's blobs are read here by row id, as a user of it would have to."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.dataset: Any = None

    def __call__(self, batch: Any, **_: Any) -> dict[str, Any]:
        import lance
        import torch

        if self.dataset is None:
            self.dataset = lance.dataset(self.uri)
        ids = batch.column("_rowid").to_pylist()
        blobs = self.dataset.take_blobs("img", ids=ids)
        return {
            "id": torch.from_numpy(batch.column("id").to_numpy()),
            "label": torch.from_numpy(batch.column("label").to_numpy()),
            "img": [blob.readall() for blob in blobs],
        }


def ours(spec: dict[str, Any]) -> Made:
    """``StreamingDataLoader(StreamingDataset(uri), batch_size, num_workers=k)``: default settings."""
    import streaming
    from streaming import StreamingDataLoader, StreamingDataset

    if not str(streaming.__file__).startswith(str(Path(__file__).resolve().parents[2])):
        raise RuntimeError(f"imported another streaming package: {streaming.__file__}")
    loader = StreamingDataLoader(
        StreamingDataset(spec["uri"], num_splits=SPLITS),
        batch_size=spec["batch"],
        num_workers=spec["workers"],
    )

    epoch = [0]

    def again() -> Iterator[Any]:
        epoch[0] += 1
        loader.set_epoch(epoch[0])
        return iter(loader)

    return loader, again


def lance_torch(spec: dict[str, Any]) -> Made:
    """``lance.torch.data.LanceDataset(uri, batch_size)``: unshuffled, fragments shared among
    workers (``DataLoader(batch_size=None, num_workers=k)``, forkserver, when k > 0)."""
    import torch.utils.data
    from lance.torch.data import LanceDataset

    options: dict[str, Any] = {} if spec["narrow"] else {"to_tensor_fn": lance_torch_wide}
    if spec.get("blob"):
        options = {"to_tensor_fn": LanceTorchBlobs(spec["uri"]), "with_row_id": True}
    dataset = LanceDataset(spec["uri"], batch_size=spec["batch"], **options)
    if not spec["workers"]:
        return dataset, lambda: iter(dataset)
    context = "forkserver"  # Lance warns that it is not fork-safe
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=None, num_workers=spec["workers"], multiprocessing_context=context
    )
    return loader, lambda: iter(loader)


def lance_takes(spec: dict[str, Any]) -> Made:
    """Raw Lance takes of shuffled 64-row blocks, 32 blocks a sorted take (Arrow only)."""
    from benchmarks.cases.contenders import lance_block_takes
    from benchmarks.harness.tables import TableRef

    directory, name = os.path.split(spec["uri"])
    table = TableRef(directory, name.removesuffix(".lance"), spec["rows"], spec["fragments"])
    return _Restartable(lambda: lance_block_takes(table)), lambda: lance_block_takes(table)


class _Restartable:
    """An iterable whose ``iter`` calls ``make``."""

    def __init__(self, make: Callable[[], Iterator[Any]]) -> None:
        self.make = make

    def __iter__(self) -> Iterator[Any]:
        return self.make()


def litdata_bytes(sample: dict[str, Any]) -> dict[str, Any]:
    """litdata gives bytes back as a ``memoryview``, which ``default_collate`` takes for a
    sequence (a batch of them comes out as one list per byte position): bytes again."""
    return {key: bytes(value) if isinstance(value, memoryview) else value for key, value in sample.items()}


def litdata_loader(spec: dict[str, Any]) -> Made:
    """``litdata.StreamingDataLoader(litdata.StreamingDataset(dir, shuffle=True), batch_size, k)``."""
    import litdata

    dataset = litdata.StreamingDataset(spec["uri"], shuffle=True, transform=litdata_bytes)
    loader = litdata.StreamingDataLoader(dataset, batch_size=spec["batch"], num_workers=spec["workers"])
    return loader, lambda: iter(loader)


def mosaic_loader(spec: dict[str, Any]) -> Made:
    """mosaicml-streaming's ``StreamingDataset(local=dir, shuffle=True, batch_size)`` in a torch
    ``DataLoader(batch_size, num_workers=k)``."""
    import torch.utils.data

    mosaic = mosaic_package()
    mosaic.base.util.clean_stale_shared_memory()
    dataset = mosaic.StreamingDataset(local=spec["uri"], shuffle=True, batch_size=spec["batch"])
    loader = torch.utils.data.DataLoader(dataset, batch_size=spec["batch"], num_workers=spec["workers"])
    return loader, lambda: iter(loader)


CONTENDERS: dict[str, Callable[[dict[str, Any]], Made]] = {
    "ours": ours,
    "lance_torch": lance_torch,
    "lance_takes": lance_takes,
    "litdata": litdata_loader,
    "mosaic": mosaic_loader,
}

PRELOAD = {
    "ours": ("torch", "lance", "streaming.dataset.dataset", "streaming.loader.loader"),
    "lance_torch": ("torch", "lance", "lance.torch.data"),
    "lance_takes": ("lance", "pyarrow", "benchmarks.cases.contenders"),
    "litdata": ("torch", "litdata"),
    "mosaic": ("torch",),
}
"""What a trainer has imported before it builds its loader (not timed): for ours, what
``from streaming import StreamingDataLoader, StreamingDataset`` loads (the package root
imports its classes lazily, at that line of a trainer, not when the loader is built)."""


# -- reading -----------------------------------------------------------------------------


def _ids(batch: Any) -> np.ndarray:
    column = batch.column("id") if hasattr(batch, "column") else batch["id"]
    if hasattr(column, "to_numpy") and not hasattr(column, "numpy"):
        return np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.int64)
    if hasattr(column, "numpy"):
        return np.asarray(column.numpy(), dtype=np.int64).reshape(-1)
    return np.asarray(column, dtype=np.int64).reshape(-1)


def _check_bytes(batch: Any, ids: np.ndarray, size: int) -> None:
    """Each row's bytes: ``size`` of them, starting with the row's id."""
    values = batch["img"]
    if len(values) != len(ids):
        raise RuntimeError(f"a batch of {len(ids)} ids has {len(values)} payloads")
    for row, value in zip(ids.tolist(), values, strict=True):
        data = bytes(value[:8]) if not isinstance(value, bytes) else value[:8]
        if len(value) != size or int.from_bytes(data, "little") != row:
            raise RuntimeError(f"row {row}: wrong bytes ({len(value)} bytes)")


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
    """A batch's ids, its wide rows' bytes checked (raw takes read Arrow only: not checked)."""
    ids = _ids(batch)
    if spec["payload"] and spec["contender"] != "lance_takes":
        _check_bytes(batch, ids, spec["payload"])
    return ids


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
