"""Helpers for ``torch.distributed`` jobs: one merged checkpoint for every rank, and
every rank's ``stats()``.

Built on the public API only. Both helpers work with any backend that supports
``all_gather_object`` (gloo, nccl with the current CUDA device set).
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any, Protocol

from .errors import PartialStateWarning

__all__ = ["gather_state_dict", "gather_stats", "load_state_dict", "save_state_dict"]


class _Stateful(Protocol):
    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def gather_state_dict(obj: _Stateful, *, group: Any = None) -> dict[str, Any]:
    """Gather every rank's state and return the merged state, on every rank.

    ``obj`` is a ``StreamingDataset`` or a ``StreamingDataLoader`` (whose state is
    exact after every batch). Call it on every rank at the same
    step, like any collective; rank 0 can then save the result as one file.

    Raises:
        RuntimeError: no process group is initialised.
        ValueError: the ranks' states do not belong together (see
            ``StreamingDataset.merge_state_dicts``).
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(
            "gather_state_dict needs an initialised torch.distributed process group; "
            "in a single process use obj.state_dict()"
        )
    states: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(states, obj.state_dict(), group=group)
    from .dataset.dataset import StreamingDataset  # here: save_state_dict alone never imports torch
    from .mixture.mixture import StreamingMixture

    if isinstance(states[0], dict) and states[0].get("kind") == "mixture":
        return StreamingMixture.merge_state_dicts(states)
    return StreamingDataset.merge_state_dicts(states)


def gather_stats(obj: Any, *, group: Any = None) -> list[dict[str, float]]:
    """Every rank's ``stats()``, in rank order, on every rank.

    ``obj`` is a ``StreamingDataset``, a ``StreamingMixture`` or a loader of either
    (its dataset's ``stats()`` are taken). Call it on every rank at the same step,
    like any collective: the figures (a dataset's loop waits for batches as p50,
    p95, p99 and a total, with each worker's part; rows and bytes read) then compare
    the ranks at that step, and a rank that waits longer than the others stands out.
    A mixture's ``stats()`` count reads only.

    Raises:
        RuntimeError: no process group is initialised.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(
            "gather_stats needs an initialised torch.distributed process group; "
            "in a single process use dataset.stats()"
        )
    source = obj if hasattr(obj, "stats") else obj.dataset
    found: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(found, source.stats(), group=group)
    return found


def save_state_dict(state: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """Write a (merged) state as JSON, atomically: a crash never leaves half a file.

    The JSON goes to ``<path>.partial``, is flushed to disk, and is then renamed over
    ``path``, so ``path`` always holds a complete state (the previous one until the
    rename). A process killed mid-write leaves ``<path>.partial`` behind: this
    function overwrites it on the next save, and ``load_state_dict`` never reads it
    and warns ``PartialStateWarning`` while it is there.
    """
    target = Path(path)
    text = json.dumps(state)
    with open(_partial(target), "w") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(_partial(target), target)


def load_state_dict(obj: _Stateful, state: dict[str, Any] | str | os.PathLike[str]) -> None:
    """Load a merged state (a dict or a JSON file written by ``save_state_dict``).

    Every rank of the new run, with any world size or worker count, loads the same
    merged state; each then continues with the splits it owns. A ``<file>.partial``
    beside the file (an interrupted save) is ignored with a ``PartialStateWarning``.
    """
    obj.load_state_dict(state if isinstance(state, dict) else _read(Path(state)))


def _partial(path: Path) -> Path:
    return path.with_name(path.name + ".partial")


def _read(path: Path) -> dict[str, Any]:
    """A state file written by ``save_state_dict``; a damaged one is named in the error."""
    partial = _partial(path)
    if partial.exists():
        if not path.exists():
            raise FileNotFoundError(
                f"no state at {path}: only {partial.name}, the leftover of a save_state_dict that was "
                "interrupted before it finished, is there; it may be incomplete and is never read: "
                "resume from an earlier checkpoint"
            )
        warnings.warn(
            f"{partial} is the leftover of a save_state_dict that was interrupted mid-write (or of one "
            f"still running); it is ignored and {path.name}, the last complete state, is loaded; "
            "the next save_state_dict to this path replaces it (or delete it)",
            PartialStateWarning,
            stacklevel=3,
        )
    try:
        loaded = json.loads(path.read_text())
    except ValueError as error:
        raise ValueError(
            f"{path} is not a state written by save_state_dict: it is not valid JSON ({error}); "
            "resume from an earlier checkpoint"
        ) from None
    if not isinstance(loaded, dict):
        raise ValueError(f"{path} holds a JSON {type(loaded).__name__}, not a state dict")
    return loaded
