"""Why the samples a transform returned cannot be batched: the key, the sample, the types, the fix.

``default_collate`` fails on a transform's samples with messages that name no
column (``must be real number, not str``, ``stack expects each tensor to be
equal size``, a bare ``KeyError``). ``collate`` runs it unchanged and, only when
it fails, looks again at the samples to say which key of which sample broke it,
as a table column's error does (``assemble``). The successful path costs one
``try``.
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from torch.utils.data import default_collate

__all__ = ["collate", "collate_default", "unbatchable"]

_FAILURES = (TypeError, RuntimeError, KeyError, ValueError, IndexError)
_SHORT = reprlib.Repr()
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlist = 40, 40, 4


def collate(function: Callable[[Any], Any], samples: Any) -> Any:
    """``function(samples)``; when ``function`` is ``default_collate`` and fails, a
    ``TypeError`` that names the key, the sample and the types (chained to the original).

    Raises:
        TypeError: the samples cannot be batched by ``default_collate``.
    """
    try:
        return function(samples)
    except _FAILURES as error:
        if function is not default_collate or not isinstance(samples, list):
            raise
        message = unbatchable(samples, error)
        if message is None:
            raise
        raise TypeError(message) from error


def collate_default(samples: Any) -> Any:
    """``default_collate(samples)``, failing as ``collate`` does (for loaders built on it)."""
    return collate(default_collate, samples)


def unbatchable(samples: list[Any], error: Exception) -> str | None:
    """What in ``samples`` made ``default_collate`` raise ``error``, and the fix (``None``:
    nothing found, the original error stands)."""
    found = _find(samples, ())
    if found is None:
        return None
    return f"{found} (default_collate: {type(error).__name__}: {error})"


def _where(path: tuple[Any, ...]) -> str:
    if not path:
        return "the samples the transform returned"
    key = repr(path[0]) + "".join(f"[{part!r}]" for part in path[1:])
    return f"key {key} of the samples the transform returned"


def _find(values: list[Any], path: tuple[Any, ...]) -> str | None:
    """The first problem in ``values`` (one per sample of the batch) at ``path``."""
    if all(isinstance(value, Mapping) for value in values):
        return _find_mapping(values, path)
    if any(isinstance(value, Mapping) for value in values):
        return _mixed(values, path)
    if all(_is_sequence(value) for value in values):
        lengths = {len(value) for value in values}
        if len(lengths) > 1:
            return _ragged(values, path, [len(value) for value in values], what="lengths")
        for index in range(lengths.pop() if lengths else 0):
            found = _find([value[index] for value in values], (*path, index))
            if found is not None:
                return found
        return None
    try:
        default_collate(values)
    except _FAILURES:
        return _leaf(values, path)
    return None


def _is_sequence(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str | bytes)


def _find_mapping(values: list[Any], path: tuple[Any, ...]) -> str | None:
    keys = list(values[0])
    for index, value in enumerate(values):
        missing = [key for key in keys if key not in value]
        if missing:
            return (
                f"{_where((*path, missing[0]))} is missing from sample {index} of the batch "
                f"(its keys: {_SHORT.repr(sorted(map(str, value)))}; sample 0 has it); return the same "
                "keys for every row from the transform, with a placeholder value where a row has none, "
                "or drop such rows with filter= or on_transform_error="
            )
    for key in keys:
        found = _find([value[key] for value in values], (*path, key))
        if found is not None:
            return found
    return None


def _kind(value: Any) -> str:
    return type(value).__name__


def _mixed(values: list[Any], path: tuple[Any, ...]) -> str:
    first = _kind(values[0])
    index = next((i for i, value in enumerate(values) if _kind(value) != first), 0)
    kinds = ", ".join(sorted({_kind(value) for value in values}))
    return (
        f"{_where(path)} cannot be batched: sample {index} of the batch holds a {_kind(values[index])} "
        f"({_SHORT.repr(values[index])}) where sample 0 holds a {first} (types seen: {kinds}); "
        f"return one type for it from every row of the transform (convert it there), drop such rows "
        "with filter= or on_transform_error=, or pass a collate_fn= that handles them"
    )


def _shape(value: Any) -> tuple[int, ...] | None:
    shape = getattr(value, "shape", None)
    return tuple(shape) if shape is not None else None


def _ragged(values: list[Any], path: tuple[Any, ...], sizes: list[Any], *, what: str) -> str:
    index = next(i for i, size in enumerate(sizes) if size != sizes[0])
    seen = ", ".join(map(str, sorted(set(sizes))[:6]))
    return (
        f"{_where(path)} cannot be batched: its {what} differ, sample {index} of the batch has "
        f"{sizes[index]} and sample 0 {sizes[0]} ({what} seen: {seen}); pad or cut it to one size "
        "in the transform, pass a collate_fn= that pads, or pack token lists with pack_sequences="
    )


def _leaf(values: list[Any], path: tuple[Any, ...]) -> str:
    """The message for a list of values (no mappings or sequences) that does not collate."""
    if len({_kind(value) for value in values}) > 1:
        return _mixed(values, path)
    shapes = [_shape(value) for value in values]
    if shapes[0] is not None and len(set(shapes)) > 1:
        return _ragged(values, path, shapes, what="shapes")
    return (
        f"{_where(path)} holds values default_collate cannot batch ({_kind(values[0])}, e.g. "
        f"{_SHORT.repr(values[0])}); return numbers, numpy arrays, tensors, str or bytes for it "
        "from the transform, or pass a collate_fn= that handles them"
    )
