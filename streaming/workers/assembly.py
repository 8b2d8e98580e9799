"""One loader batch from its workers' shares: each value put in its slot.

Every worker sends its share of a batch already batched (tensors stacked along
the first dimension, lists of strings, dicts of those: what ``default_collate``
makes), or as raw samples when the user's ``collate_fn`` must see the whole
batch. ``assemble`` lays the shares into one batch, slot by slot, so the result
is what ``default_collate`` (or the user's function) gives for the samples in
the rank's order: the same batch for every worker count.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["assemble", "columns", "compact"]


def compact(slots: Sequence[np.ndarray], size: int) -> tuple[list[np.ndarray], int]:
    """``slots`` renumbered 0, 1, ... in order when they leave holes (a share came short
    because a transform dropped rows), and the batch size they then fill."""
    filled = sum(len(part) for part in slots)
    if filled == size:
        return list(slots), size
    joined = np.concatenate(list(slots))
    ranks = np.empty(len(joined), dtype=np.int64)
    ranks[np.argsort(joined, kind="stable")] = np.arange(len(joined))
    bounds = np.cumsum([0, *(len(part) for part in slots)])
    return [ranks[low:high] for low, high in itertools.pairwise(bounds)], filled


def assemble(
    parts: Sequence[Any],
    slots: Sequence[np.ndarray],
    size: int,
    *,
    collate: Callable[[Any], Any] | None,
) -> Any:
    """The batch of ``size`` samples whose share ``parts[i]`` goes to ``slots[i]``.

    With ``collate`` the parts are lists of raw samples, put in order and then
    collated; without, they are batched already and are merged value by value.

    Raises:
        TypeError: the shares cannot make one batch (shapes that differ between
            them, as ``default_collate`` would refuse the whole batch).
    """
    if collate is not None:
        return collate(_placed(list(parts), list(slots), size))
    if len(parts) == 1 and _in_order(slots[0], size):
        return parts[0]
    return _merge(list(parts), [_Where.of(where) for where in slots], size, ())


@dataclass(frozen=True)
class _Where:
    """A share's slots, and how to index them (a slice where evenly spaced), computed once."""

    slots: np.ndarray
    index: slice | np.ndarray

    @classmethod
    def of(cls, slots: np.ndarray) -> _Where:
        return cls(slots, _index(slots))


def _placed(values: list[Any], slots: list[np.ndarray], size: int) -> list[Any]:
    """The items of several lists, each put in its slot of one list of ``size``."""
    out: list[Any] = [None] * size
    for value, where in zip(values, slots, strict=True):
        for slot, item in zip(where.tolist(), value, strict=True):
            out[slot] = item
    return out


def _index(where: np.ndarray) -> slice | np.ndarray:
    """``where`` as a slice when its slots are evenly spaced (a worker's share of a
    batch usually is: every k-th slot), which numpy copies much faster."""
    if len(where) < 2:
        return where
    first, step = int(where[0]), int(where[1] - where[0])
    if step > 0 and int(where[-1]) == first + step * (len(where) - 1) and (np.diff(where) == step).all():
        return slice(first, first + step * len(where), step)
    return where


def columns(parts: Sequence[Mapping[str, Any]], slots: Sequence[np.ndarray], size: int) -> dict[str, Any]:
    """The batch of columnar shares (a dict of numpy arrays or lists each), in new
    arrays: each numeric column is copied once, share by share into its slots."""
    where = [_index(part) for part in slots]
    out: dict[str, Any] = {}
    for name, first in parts[0].items():
        values = [part[name] for part in parts]
        if isinstance(first, np.ndarray) and all(
            isinstance(value, np.ndarray)
            and value.dtype == first.dtype
            and value.shape[1:] == first.shape[1:]
            for value in values
        ):
            column = np.empty((size, *first.shape[1:]), dtype=first.dtype)
            for value, index in zip(values, where, strict=True):
                column[index] = value
            out[name] = column
        else:
            out[name] = _merge(
                values, [_Where(part, index) for part, index in zip(slots, where, strict=True)], size, (name,)
            )
    return out


def _in_order(slots: np.ndarray, size: int) -> bool:
    """Whether ``slots`` are 0, 1, ..., size - 1 (a lone share of a batch usually is)."""
    if len(slots) != size or size == 0:
        return len(slots) == size
    index = _index(slots)
    return int(slots[0]) == 0 and (size == 1 or (isinstance(index, slice) and index.step == 1))


def _kind(value: Any) -> str:
    if isinstance(value, torch.Tensor | np.ndarray):
        return "array"
    if isinstance(value, Mapping):
        return "mapping"
    return "sequence" if isinstance(value, list | tuple) else type(value).__name__


def _merge(values: list[Any], slots: list[_Where], size: int, path: tuple[Any, ...]) -> Any:
    first = values[0]
    kinds = {_kind(value) for value in values}
    if len(kinds) > 1:
        raise TypeError(
            f"{_where(path)} cannot be batched: the batch holds different types for it "
            f"({', '.join(sorted(type(value).__name__ for value in values))} in the workers' shares); "
            "return one type for it from every row of the transform (convert it there), drop such "
            "rows with filter= or on_transform_error=, or pass a collate_fn= that handles them"
        )
    if isinstance(first, torch.Tensor):
        return _merge_tensors(values, slots, size, path)
    if isinstance(first, np.ndarray):
        out = np.empty((size, *first.shape[1:]), dtype=np.result_type(*values))
        for value, where in zip(values, slots, strict=True):
            _check_shape(value.shape, first.shape, path)
            out[where.index] = value
        return out
    if isinstance(first, Mapping):
        return {key: _merge([value[key] for value in values], slots, size, (*path, key)) for key in first}
    if isinstance(first, tuple) and hasattr(first, "_fields"):  # a namedtuple: default_collate keeps it
        fields = [_merge([value[i] for value in values], slots, size, (*path, i)) for i in range(len(first))]
        return type(first)(*fields)
    if isinstance(first, list | tuple):
        if _leaves(values, slots):
            return _placed(values, [where.slots for where in slots], size)
        return [_merge([value[i] for value in values], slots, size, (*path, i)) for i in range(len(first))]
    raise TypeError(f"{_where(path)} holds a {type(first).__name__}, which no batch of samples gives")


def _merge_tensors(values: list[torch.Tensor], slots: list[_Where], size: int, path: tuple[Any, ...]) -> Any:
    first = values[0]
    dtype = first.dtype
    for value in values[1:]:  # as default_collate of the whole batch would (ints and floats: floats)
        if value.dtype != dtype:
            dtype = torch.promote_types(dtype, value.dtype)
    pinned = first.device.type == "cpu" and _accelerated() and first.is_pinned()
    out = torch.empty((size, *first.shape[1:]), dtype=dtype, device=first.device, pin_memory=pinned)
    for value, where in zip(values, slots, strict=True):
        _check_shape(tuple(value.shape), tuple(first.shape), path)
        value = value if value.dtype == dtype else value.to(dtype)
        if out.device.type == "cpu" and dtype != torch.bfloat16:  # numpy handles every other dtype
            out.numpy()[where.index] = value.numpy()
        else:
            out[torch.from_numpy(where.slots).to(out.device)] = value
    return out


@functools.cache
def _accelerated() -> bool:
    """Whether pinned memory can exist here (a CUDA device); asked once."""
    return torch.cuda.is_available()


def _check_shape(shape: tuple[int, ...], first: tuple[int, ...], path: tuple[Any, ...]) -> None:
    if shape[1:] != first[1:]:
        raise TypeError(
            f"{_where(path)} cannot be batched: its shapes differ within the batch ({first[1:]} and "
            f"{shape[1:]}); pad or cut it to one size in the transform, pass a collate_fn= that pads, "
            "or pack token lists with pack_sequences="
        )


_PLAIN = frozenset({str, bytes, type(None), int, float, bool})
"""Types of plain items, told without an ``isinstance`` against abstract classes."""


def _leaves(values: list[Any], slots: list[_Where]) -> bool:
    """Whether each value is a list with one plain item per sample (strings, bytes)."""
    containers = (torch.Tensor, np.ndarray, Mapping, list, tuple)
    return all(
        len(value) == len(where.slots) for value, where in zip(values, slots, strict=True)
    ) and not any(
        type(item) not in _PLAIN and isinstance(item, containers) for value in values for item in value
    )


def _where(path: tuple[Any, ...]) -> str:
    if not path:
        return "the samples the transform returned"
    key = repr(path[0]) + "".join(f"[{part!r}]" for part in path[1:])
    return f"key {key} of the samples the transform returned"
