"""The contenders of the ``widths`` suite: each builds its loader from a probe's spec and
says how to start the next epoch.

Imported by ``benchmarks.cases.width_probe`` in this repository's environment (ours,
lance.torch, raw Lance takes) or in a peer's own (litdata, mosaicml-streaming, whose
top-level package is also named ``streaming``): nothing but the standard library and
numpy at the top; each contender's packages are imported in its own function.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

SPLITS = 16
"""Our splits at every k (the default, the world size, is 1: two workers need a multiple of 2)."""


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


# -- contenders: (the loader, how to start the next epoch) -------------------------------

Made = tuple[Any, Callable[[], Iterator[Any]]]


def lance_torch_wide(batch: Any, **_: Any) -> dict[str, Any]:
    """lance.torch's ``to_tensor_fn`` for rows with bytes or text: ids as a tensor, bytes and
    strings as lists (its default refuses them; blob columns arrive as ``lance.BlobFile``s, read
    here)."""
    import pyarrow as pa
    import torch

    out: dict[str, Any] = {}
    names = batch.column_names if isinstance(batch, pa.RecordBatch) else list(batch)
    for name in names:
        column = batch[name]
        if isinstance(column, list):
            out[name] = [blob.read() for blob in column]
        elif _byte_like(column.type):
            out[name] = column.to_pylist()
        elif not name.startswith("_"):
            out[name] = torch.from_numpy(column.to_numpy(zero_copy_only=False))
    return out


def _byte_like(type_: Any) -> bool:
    import pyarrow as pa

    return bool(
        pa.types.is_binary(type_)
        or pa.types.is_large_binary(type_)
        or pa.types.is_string(type_)
        or pa.types.is_large_string(type_)
    )


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

    wide = not spec["narrow"] or spec.get("text")
    options: dict[str, Any] = {"to_tensor_fn": lance_torch_wide} if wide else {}
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
    """Raw Lance takes of shuffled 64-row blocks (Arrow only): 32 blocks a sorted take of narrow
    rows, one block a take of wide ones (``spec["wave_blocks"]`` to choose)."""
    from functools import partial

    from benchmarks.cases.contenders import lance_block_takes
    from benchmarks.harness.tables import TableRef

    directory, name = os.path.split(spec["uri"])
    table = TableRef(directory, name.removesuffix(".lance"), spec["rows"], spec["fragments"])
    wave = spec.get("wave_blocks") or (1 if spec["payload"] else 32)
    make = partial(lance_block_takes, table, wave_blocks=wave)
    return _Restartable(make), make


class _Restartable:
    """An iterable whose ``iter`` calls ``make``."""

    def __init__(self, make: Callable[[], Iterator[Any]]) -> None:
        self.make = make

    def __iter__(self) -> Iterator[Any]:
        return self.make()


LITDATA_WINDOW = 256
"""litdata's in-chunk shuffle window (its default, ``item_shuffle_window``), and the decode
window the suite gives it by default (``batch_decode``), as its documentation pairs them.

litdata 0.2.76 picks its decode window from the rows' size, ``16 MiB // row bytes``: 163
rows of 100 KiB, which does not divide its 256-row shuffle window, so a shuffled read
keeps leaving one window for the other and decodes about 65 rows for each row it
delivers (5.6-7k rows/s of 100 KiB rows here, against 30k+ with the windows aligned).
``{"decode": "auto"}`` in a spec measures that default."""


def litdata_collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """litdata's rows as a batch: bytes-likes in a list, as ``default_collate`` does for
    ``bytes``, the rest through ``default_collate``. litdata gives a row's bytes as a
    ``memoryview`` into its chunk file: kept as it is in the trainer's process (no copy);
    in a worker made ``bytes``, the copy that crossing to the trainer needs (a ``memoryview``
    cannot be pickled). ``default_collate`` would take a ``memoryview`` for a sequence and
    make one list per byte position."""
    from torch.utils.data import default_collate, get_worker_info

    crossing = get_worker_info() is not None
    out: dict[str, Any] = {}
    for key in samples[0]:
        values = [sample[key] for sample in samples]
        if isinstance(values[0], (bytes, memoryview)):
            out[key] = [bytes(value) for value in values] if crossing else values
        else:
            out[key] = default_collate(values)
    return out


def litdata_loader(spec: dict[str, Any]) -> Made:
    """``litdata.StreamingDataLoader(litdata.StreamingDataset(dir, shuffle=True, batch_decode=W),
    batch_size, k)``, W = ``LITDATA_WINDOW`` unless the spec says ``"decode": "auto"``."""
    import litdata

    decode = spec.get("decode") or LITDATA_WINDOW
    dataset = litdata.StreamingDataset(spec["uri"], shuffle=True, batch_decode=decode)
    loader = litdata.StreamingDataLoader(
        dataset, batch_size=spec["batch"], num_workers=spec["workers"], collate_fn=litdata_collate
    )
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
    "litdata": ("torch", "litdata", "torch.utils.data"),
    "mosaic": ("torch",),
}
"""What a trainer has imported before it builds its loader (not timed): for ours, what
``from streaming import StreamingDataLoader, StreamingDataset`` loads (the package root
imports its classes lazily, at that line of a trainer, not when the loader is built)."""
