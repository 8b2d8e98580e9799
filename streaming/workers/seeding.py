"""A ``worker_init_fn`` that seeds the global random generators, met by several transform threads.

torch's docs teach seeding numpy's, torch's and Python's global generators in
``worker_init_fn``. A transform that draws from them on ``transform_parallelism``
threads takes its draws in the order the threads happen to run, which changes
from run to run: the seeding buys nothing. ``WorkerInit`` notes whether the
user's function changed those generators; the worker's first batch then
carries a notice, and the trainer's process raises it as
``SeededTransformWarning`` (where the user's warning filters apply). What the
notice needs of the dataset (its transform and threads, ``Transforming``) is
worked out by the loader in the trainer and handed down with the collate
function; nothing here reads a dataset.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.options import Options
from ..errors import SeededTransformWarning

__all__ = ["Transforming", "notice", "run_user_init", "transforming", "warn"]

_worker = {"seeded_by": "", "told": False}  # this worker process's own record


def _global_states() -> tuple[bytes, ...]:
    """The states of numpy's legacy, Python's and torch's global generators."""
    import torch

    numpy_state: Any = np.random.get_state(legacy=False)["state"]
    return (
        np.asarray(numpy_state["key"]).tobytes() + int(numpy_state["pos"]).to_bytes(8, "little"),
        repr(random.getstate()).encode(),
        torch.random.get_rng_state().numpy().tobytes(),
    )


def run_user_init(user: Callable[[int], None], worker_id: int) -> None:
    """``user(worker_id)``, noting whether it changed a global generator (it seeded one)."""
    before = _global_states()
    user(worker_id)
    if _global_states() != before:
        _worker["seeded_by"] = _name(user)


@dataclass(frozen=True)
class Transforming:
    """A dataset's transform that draws on several threads without ``transform_rng``."""

    transform: str  # its name
    threads: int


def transforming(options: Options | None) -> Transforming | None:
    """What a seeding ``worker_init_fn`` would make unreproducible in a dataset with
    ``options`` (``None``: not a ``StreamingDataset``): its transform when it runs on
    several threads without ``transform_rng``; else ``None``."""
    if options is None or options.transform is None or options.transform_rng:
        return None
    threads = options.transform_threads
    if threads <= 1:
        return None
    return Transforming(_name(options.transform), threads)


def notice(risk: Transforming | None) -> str | None:
    """Once per worker: why its seeding does not make the transform's draws reproducible,
    when ``worker_init_fn`` seeded a global generator and the dataset's transform runs
    on several threads without ``transform_rng`` (``risk``, from ``transforming``);
    else ``None``."""
    if not _worker["seeded_by"] or _worker["told"]:
        return None
    _worker["told"] = True
    if risk is None:
        return None
    return (
        f"worker_init_fn {_worker['seeded_by']} seeded the global random generators (numpy's, torch's "
        f"or Python's), but the transform {risk.transform} runs on {risk.threads} threads in each "
        "worker (transform_parallelism), which draw from them in an order that changes from run to "
        "run: draws from the global generators are not reproducible. Pass transform_rng=True and "
        "draw from the per-row generators (the same on every run, topology and resume), or "
        "transform_parallelism=1; if the transform draws nothing from the global generators, "
        "ignore SeededTransformWarning"
    )


def warn(message: str) -> None:
    """Raise a worker's notice as ``SeededTransformWarning`` in the trainer's process."""
    warnings.warn(message, SeededTransformWarning, stacklevel=3)


def _name(function: object) -> str:
    inner = getattr(function, "func", function)  # functools.partial
    module = getattr(inner, "__module__", None)
    name = getattr(inner, "__qualname__", type(inner).__qualname__)
    return f"{module}.{name}" if module else str(name)
