"""What each Ray Train worker of the docs/ray.md example trains, for ``tests/jobs/test_ray.py``.

Python imports this module at start-up in every process started with this folder on
``PYTHONPATH``; a Ray cluster started by the example passes the driver's environment on
to its workers. In a Ray worker process (``default_worker.py``) whose environment names
a folder in ``LS_RAY_LOG``, ``streaming`` is patched as soon as the training function
imports it (unpickling the training function does): ``StreamingDataLoader``, in
``streaming`` and in its defining module, becomes a subclass that logs every batch as the
training loop receives it, so the example runs unchanged:

- ``LS_RAY_LOG/attempts/<n>/rank<r>.jsonl``: ``{"step", "ids"}`` a batch, where ``n``
  numbers the starts of the worker group (attempts) and the step counts on from the
  checkpoint the attempt loaded (``state.json`` in ``ray.train.get_checkpoint()``);
- ``LS_RAY_LOG/attempts/<n>/resumed.json``: that step and the world size (rank 0).

Other Ray processes (the controller, Ray's own actors) never import ``streaming``.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any


def _resumed_step() -> int:
    import ray.train

    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        return 0
    with checkpoint.as_directory() as folder:
        return int(json.loads((Path(folder) / "state.json").read_text())["step"])


def _attempt_folder(folder: Path, rank: int) -> Path:
    """Rank 0 counts the attempts logged so far and tells every rank (a collective)."""
    import torch
    import torch.distributed as dist

    attempts = folder / "attempts"
    number = torch.tensor([len(list(attempts.glob("*"))) if rank == 0 and attempts.exists() else 0])
    dist.broadcast(number, src=0)
    attempt = attempts / str(int(number.item()))
    attempt.mkdir(parents=True, exist_ok=True)
    return attempt


def _install(streaming: ModuleType, folder: Path) -> None:
    import torch.distributed as dist

    class LoggedLoader(streaming.StreamingDataLoader):  # type: ignore[misc,name-defined]
        def __iter__(self) -> Iterator[Any]:
            rank, world_size, step = dist.get_rank(), dist.get_world_size(), _resumed_step()
            attempt = _attempt_folder(folder, rank)
            if rank == 0:
                (attempt / "resumed.json").write_text(json.dumps({"step": step, "world_size": world_size}))
            with (attempt / f"rank{rank}.jsonl").open("a") as log:
                for batch in super().__iter__():
                    step += 1
                    log.write(json.dumps({"step": step, "ids": batch["id"].tolist()}) + "\n")
                    log.flush()  # before the loop's body: a SIGKILL there loses no line
                    yield batch

    # the training function reaches Ray by pickle, which names the class by its defining module
    original = streaming.StreamingDataLoader
    setattr(sys.modules[original.__module__], original.__name__, LoggedLoader)
    streaming.StreamingDataLoader = LoggedLoader


class _PatchStreaming(importlib.abc.MetaPathFinder):
    """Finds ``streaming`` as usual and patches it once it has been executed."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def find_spec(self, name: str, path: Sequence[str] | None, target: Any = None) -> Any:
        if name != "streaming":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader, folder = spec.loader, self.folder

        class Patching(importlib.abc.Loader):
            def create_module(self, spec: Any) -> Any:
                return loader.create_module(spec)

            def exec_module(self, module: ModuleType) -> None:
                loader.exec_module(module)
                _install(module, folder)

        spec.loader = Patching()
        return spec


if os.environ.get("LS_RAY_LOG") and sys.argv and sys.argv[0].endswith("default_worker.py"):
    sys.meta_path.insert(0, _PatchStreaming(Path(os.environ["LS_RAY_LOG"])))
