"""What training frameworks expect of a loader, in one place.

Two facts about the frameworks users train with, each kept here so the loaders
read as plain code:

- **Who counts epochs.** Lightning (and Fabric), Hugging Face ``transformers``
  and ``accelerate`` take ``len(loader)`` as the batches of a whole epoch and keep
  their own count of the batches already run: after a restore they run
  ``len()`` minus that count. ``counts_epochs()`` tells whether the code asking
  for ``len()`` right now is such a framework (by the module of the first caller
  outside this package), which is what ``len_counts="auto"`` follows.
- **What Accelerate looks for.** ``Accelerator.prepare`` rebuilds every
  ``DataLoader`` it is given unless the loader says it was prepared already
  (``_is_accelerate_prepared``), and ``save_state``/``load_state`` save a loader's
  own ``state_dict()`` when it says it is stateful (``use_stateful_dataloader``).
  A rebuilt loader would iterate the dataset as a plain DataLoader, which can
  neither commit a worker's progress nor yield our batches; ours needs no
  rebuilding (each rank already reads only its own splits).

Pure Python: no torch, no Lance.
"""

from __future__ import annotations

from types import FrameType

from .. import _compat

__all__ = ["ACCELERATE_FLAGS", "EPOCH_COUNTING_FRAMEWORKS", "counts_epochs"]

EPOCH_COUNTING_FRAMEWORKS = (
    "lightning",
    "pytorch_lightning",
    "lightning_fabric",
    "transformers",
    "accelerate",
)
"""Top-level packages whose loops take ``len(loader)`` as the whole epoch."""

ACCELERATE_FLAGS = {"_is_accelerate_prepared": True, "use_stateful_dataloader": True}
"""Class attributes that make ``Accelerator.prepare`` keep the loader as it is and
``save_state``/``load_state`` save and restore its ``state_dict()`` (accelerate 1.x;
``tests/jobs/test_accelerate.py`` checks both against the installed version)."""

_OWN = __name__.split(".")[0]
_DEPTH = 12  # frames searched for the first caller outside this package


def counts_epochs() -> bool:
    """True when the first caller outside this package is an epoch-counting framework."""
    frame: FrameType | None = _compat.caller_frame()
    for _ in range(_DEPTH):
        if frame is None:
            return False
        package = str(frame.f_globals.get("__name__", "")).split(".")[0]
        if package != _OWN:
            return package in EPOCH_COUNTING_FRAMEWORKS
        frame = frame.f_back
    return False
