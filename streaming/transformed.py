"""Rows of one window after a user ``transform``, in yield order."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pyarrow as pa


class TransformedRows:
    """The rows of one window after a user ``transform``, in yield order."""

    def __init__(
        self,
        table: pa.Table,
        order: np.ndarray,
        transform: Callable[[pa.RecordBatch], Iterable[Any]],
        *,
        batch_rows: int,
    ) -> None:
        ordered = table.take(pa.array(order))
        self._samples: list[Any] = []
        for batch in ordered.to_batches(max_chunksize=batch_rows):
            produced = list(transform(batch))
            if len(produced) != batch.num_rows:
                raise ValueError(
                    f"transform {_qualname(transform)} returned {len(produced)} samples for "
                    f"a batch of {batch.num_rows} rows; it must return exactly one sample "
                    "per row (filter rows with the filter= argument instead)"
                )
            self._samples.extend(produced)

    def __len__(self) -> int:
        return len(self._samples)

    def samples(self, start: int, stop: int) -> list[Any]:
        """Transformed samples for rows [start, stop)."""
        return self._samples[start:stop]


def _qualname(function: object) -> str:
    module = getattr(function, "__module__", None)
    name = getattr(function, "__qualname__", type(function).__qualname__)
    return f"{module}.{name}" if module else str(name)
