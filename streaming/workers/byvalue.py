"""Small collated tensors travel from a worker by value, not one shared-memory file each.

torch sends every tensor of a worker's batch through shared memory: one file
made, sized and mapped, and one file descriptor passed per tensor. A transform
that returns Python lists gives ``default_collate`` a list per row, which it
turns into one small tensor per list element (128 tensors a batch for a
128-float vector), and those files cost the worker path far more than the data.

``pack`` swaps each plain CPU tensor of a batch for a ``ByValue`` holding the
same memory as a numpy array, which pickles as bytes in the message; ``unpack``
in the trainer gives back tensors of the same dtype, shape and values. Only
plain ``dict``, ``list`` and ``tuple`` containers are walked (anything else, a
namedtuple or a custom class, travels as before), and a batch is left alone
when a tensor could not come back identical (a subclass, a view, gradients, a
dtype numpy lacks, a tensor that appears twice) or when it is large, where
shared memory is the faster way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["ByValue", "pack", "unpack"]

MAX_BYTES = 8 << 20
"""Batches whose tensors hold more than this keep torch's shared-memory path (for every
worker batch: the columnar path uses the same limit)."""

_DTYPES = frozenset(
    {
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.float32,
        torch.float64,
        torch.complex64,
        torch.complex128,
    }
)


@dataclass(frozen=True)
class ByValue:
    """A tensor's values as a numpy array, pickled into the worker's message."""

    array: np.ndarray


def _sendable(tensor: torch.Tensor) -> bool:
    return (
        type(tensor) is torch.Tensor
        and tensor.device.type == "cpu"
        and tensor.layout == torch.strided
        and not tensor.requires_grad
        and tensor.dtype in _DTYPES
        and tensor.is_contiguous()
        and tensor.storage_offset() == 0
        and tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size()
    )


class _Packer:
    def __init__(self) -> None:
        self.bytes = 0
        self.storages: set[int] = set()
        self.unsuitable = False
        """A tensor would not come back identical (or the batch is large): send it as it is."""

    def pack(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return self._tensor(value)
        if type(value) is dict:
            return {key: self.pack(item) for key, item in value.items()}
        if type(value) is list:
            return [self.pack(item) for item in value]
        if type(value) is tuple:
            return tuple(self.pack(item) for item in value)
        return value

    def _tensor(self, tensor: torch.Tensor) -> ByValue | torch.Tensor:
        storage = tensor.untyped_storage().data_ptr() if _sendable(tensor) else None
        # Two tensors sharing memory would be split apart by pickling them one by one.
        shared = storage in self.storages and tensor.numel() > 0
        self.bytes += tensor.numel() * tensor.element_size()
        if storage is None or shared or self.bytes > MAX_BYTES:
            self.unsuitable = True
            return tensor
        self.storages.add(storage)
        return ByValue(tensor.numpy())


def pack(batch: Any) -> tuple[Any, bool]:
    """``(batch with its tensors as ByValue, True)``, or ``(batch, False)`` left as it was."""
    packer = _Packer()
    packed = packer.pack(batch)
    return (batch, False) if packer.unsuitable else (packed, True)


def unpack(batch: Any) -> Any:
    """The batch ``pack`` was given, with tensors again (owning the received memory)."""
    if isinstance(batch, ByValue):
        return torch.from_numpy(batch.array)
    if type(batch) is dict:
        return {key: unpack(item) for key, item in batch.items()}
    if type(batch) is list:
        return [unpack(item) for item in batch]
    if type(batch) is tuple:
        return tuple(unpack(item) for item in batch)
    return batch
