"""Which of several processes reads which rows of a window: an I/O decision, never an order one. Pure.

A rank's k DataLoader workers read the rank's windows together: each reads only its
*block slots* (``Part``), so each row is read once and every worker reads about 1/k of
every window whatever the split count. The plan (``core.plan``) decides which row sits
at every position; a ``Part`` only decides who reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["NOT_READ", "Part"]


@dataclass(frozen=True)
class Part:
    """Reader ``reader`` of ``readers`` processes that read a rank's windows together.

    Each reads only its *block slots*: slot ``i`` of split ``s`` (the i-th block the
    split visits) is reader ``(i + s // world_size) % readers``'s (``s // world_size``
    is the split's place among its rank's splits, r, r + W, ...). A window's rows are
    whole blocks, so every reader reads about ``1 / readers`` of every window in runs
    of consecutive rows, each row is read by exactly one reader, and the slots rotate
    with the split's place so that readers of splits with few blocks still share the
    work. Which reader reads a row decides nothing about the order: the plan does.
    """

    reader: int
    readers: int
    world_size: int = 1

    def owns(self, slots: np.ndarray, splits: np.ndarray) -> np.ndarray:
        """Whether each (block slot, split) pair is this reader's."""
        result: np.ndarray = (slots + splits // self.world_size) % self.readers == self.reader
        return result


NOT_READ = -1
"""A window's gather entry for a row another reader reads (``Part``)."""
