"""The ``gpu`` suite's training step: the PNG rows it trains on, their decoding (the
dataset's transform), a small conv net and the ``Trainer`` that times its steps (on CUDA
from CUDA events, on CPU by the wall clock)."""

from __future__ import annotations

import functools
import io
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import torch
from torch import nn

SIDE = 64
BLOCK = 8  # an image is (SIDE / BLOCK)^2 seeded colour blocks plus noise
IMAGES = 256
CLASSES = 10
IN_FLIGHT = 2
"""Steps the CPU may queue on the GPU ahead of the one that finished, as a loss.item() would bound."""


@functools.cache
def _pngs() -> tuple[bytes, ...]:
    """``IMAGES`` distinct 64x64 RGB PNGs from one seeded generator."""
    from PIL import Image

    rng = np.random.default_rng(27)
    encoded = []
    for _ in range(IMAGES):
        blocks = rng.integers(0, 256, (SIDE // BLOCK, SIDE // BLOCK, 3)).astype(np.int16)
        pixels = np.repeat(np.repeat(blocks, BLOCK, axis=0), BLOCK, axis=1) + rng.integers(
            -6, 7, (SIDE,) * 2 + (3,)
        )
        buffer = io.BytesIO()
        Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(buffer, format="PNG")
        encoded.append(buffer.getvalue())
    return tuple(encoded)


def png_chunk(start: int, count: int) -> pa.Table:
    """Rows of (id int64, label int32, png binary), the PNGs cycled by id."""
    ids = np.arange(start, start + count, dtype=np.int64)
    images = _pngs()
    blobs = pa.array([images[i % IMAGES] for i in ids.tolist()], pa.binary())
    return pa.table({"id": ids, "label": (ids % CLASSES).astype(np.int32), "png": blobs})


def decode(batch: pa.RecordBatch) -> list[dict[str, Any]]:
    """Every row's PNG decoded with Pillow to a 64x64x3 uint8 array, with its label."""
    from PIL import Image

    labels, blobs = batch.column("label").to_pylist(), batch.column("png").to_pylist()
    return [
        {"image": np.array(Image.open(io.BytesIO(blob)).convert("RGB")), "label": label}
        for label, blob in zip(labels, blobs, strict=True)
    ]


def make_model() -> nn.Module:
    """A small conv net: 4x4 patches to 32 channels, a strided 3x3 conv to 64, pooled, a linear head."""
    return nn.Sequential(
        nn.Conv2d(3, 32, kernel_size=4, stride=4),
        nn.ReLU(),
        nn.Conv2d(32, 64, kernel_size=3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, CLASSES),
    )


@dataclass
class Trainer:
    """The model, its optimizer and the time spent in steps since ``reset``.

    On CUDA each step is bracketed by CUDA events (the GPU's time in it) and the
    CPU waits for the step ``IN_FLIGHT`` before the last; on CPU the step's wall time counts.
    """

    device: torch.device
    model: nn.Module = field(init=False)
    optimizer: torch.optim.Optimizer = field(init=False)
    _events: list[tuple[Any, Any]] = field(default_factory=list)
    _recent: deque[Any] = field(default_factory=deque)
    _step_s: float = 0.0

    def __post_init__(self) -> None:
        self.model = make_model().to(self.device)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)

    def _step(self, batch: dict[str, torch.Tensor]) -> None:
        images = batch["image"].to(self.device, non_blocking=True).permute(0, 3, 1, 2).float().div_(255)
        labels = batch["label"].to(self.device, non_blocking=True).long()
        loss = nn.functional.cross_entropy(self.model(images), labels)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()

    def step(self, batch: dict[str, torch.Tensor], *, counted: bool) -> None:
        """One training step on ``batch``; its time is added when ``counted``."""
        if self.device.type != "cuda":
            began = time.perf_counter()
            self._step(batch)
            self._step_s += (time.perf_counter() - began) if counted else 0.0
            return
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        self._step(batch)
        end.record()
        if counted:
            self._events.append((start, end))
        self._recent.append(end)
        if len(self._recent) > IN_FLIGHT:
            self._recent.popleft().synchronize()

    def busy_seconds(self) -> float:
        """Seconds of the counted steps (GPU time on CUDA, after waiting for all of them)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            return self._step_s + sum(start.elapsed_time(end) for start, end in self._events) / 1000
        return self._step_s

    def reset(self) -> None:
        """Forget the counted steps (the next configuration starts at zero)."""
        self.busy_seconds()
        self._events.clear()
        self._recent.clear()
        self._step_s = 0.0

    def warm_up(self, batch_size: int) -> None:
        """Two uncounted steps on made-up data (CUDA context, kernels, allocator)."""
        made_up = {
            "image": torch.zeros((batch_size, SIDE, SIDE, 3), dtype=torch.uint8),
            "label": torch.zeros(batch_size, dtype=torch.int64),
        }
        for _ in range(2):
            self.step(made_up, counted=False)
        self.reset()
