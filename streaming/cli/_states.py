"""Reading a state from a file for ``inspect`` and ``merge``: JSON or ``torch.save``.

A ``torch.save`` checkpoint usually holds the state next to the model, e.g. under
``"dataset"``; the state is found automatically (a dict with ``format_version`` or
``samples_consumed_per_split``) unless ``--key`` names where it is.
"""

from __future__ import annotations

import json
import pickle
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["read_state"]

_STATE_KEYS = ("format_version", "samples_consumed_per_split")
_MAX_DEPTH = 8  # how deep in nested dicts a state is looked for


def read_state(path: Path, *, key: str | None = None) -> tuple[dict[str, Any], str | None]:
    """Load a validated state from a JSON file or a ``torch.save`` file.

    Returns the state and where it was found in the file (``None``: the file is the
    state). Raises ``ValueError`` for a file without exactly one usable state.
    """
    from ..state.format import parse_state

    container = _load_file(path)
    where = key if key is not None else _locate_state(container, path)
    state = _at(container, where, path) if where else container
    if not isinstance(state, dict):
        raise ValueError(f"{path}: the state at {where!r} is a {type(state).__name__}, not a dict")
    try:
        if state.get("kind") == "mixture":
            from ..mixture.state import MixtureState

            MixtureState.from_dict(state)
        else:
            parse_state(state)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
    return state, where or None


def _load_file(path: Path) -> Any:
    data = path.read_bytes()
    if data[:4] == b"PK\x03\x04" or data[:1] == b"\x80":  # torch.save: zip, or legacy pickle
        return _torch_load(path)
    try:
        return json.loads(data.decode("utf-8"))
    except ValueError as error:
        raise ValueError(f"{path} is neither a JSON state nor a torch.save file ({error})") from None


def _torch_load(path: Path) -> Any:
    import torch

    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        found = re.search(r"Unsupported global: GLOBAL (\S+)", str(error))
        reason = f" (it holds a {found.group(1)})" if found else ""
        raise ValueError(
            f"{path} cannot be loaded with torch.load(weights_only=True){reason}; only tensors "
            "and plain data load without running code from the file: also save the dataset "
            "state on its own with streaming.save_state_dict and inspect that file"
        ) from None


def _looks_like_state(value: object) -> bool:
    return isinstance(value, dict) and any(name in value for name in _STATE_KEYS)


def _states_in(value: object, where: str = "", depth: int = 0) -> Iterator[str]:
    """Dotted paths of every state-like dict inside ``value`` (not inside a state)."""
    if _looks_like_state(value):
        yield where
    elif isinstance(value, dict) and depth < _MAX_DEPTH:
        for name, item in value.items():
            yield from _states_in(item, f"{where}.{name}" if where else str(name), depth + 1)


def _locate_state(container: object, path: Path) -> str:
    found = list(_states_in(container))
    if len(found) == 1:
        return found[0]
    if not found:
        keys = sorted(map(str, container)) if isinstance(container, dict) else []
        raise ValueError(
            f"{path} holds no lance-streaming state (a dict with format_version and "
            f"samples_consumed_per_split); top-level keys: {keys}"
        )
    raise ValueError(f"{path} holds several states, at {found}; choose one with --key")


def _at(container: object, where: str, path: Path) -> object:
    value = container
    for name in where.split("."):
        if not isinstance(value, dict) or name not in value:
            keys = sorted(map(str, value)) if isinstance(value, dict) else []
            raise ValueError(f"{path} has no key {where!r} (at {name!r} the keys are {keys})")
        value = value[name]
    return value
