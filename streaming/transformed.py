"""Rows of one window after a user ``transform``, in yield order."""

from __future__ import annotations

import bisect
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pyarrow as pa

from .errors import TransformContractError, TransformErrorWarning

__all__ = ["OnError", "TransformedRows"]

OnError = str | Callable[[Exception], bool]
"""``"raise"``, ``"skip"``, ``"warn"`` or ``handler(exception) -> bool`` (True drops the row)."""


class TransformedRows:
    """The rows of one window after a user ``transform``, in yield order.

    A batch the transform raises on is retried row by row (unless ``on_error`` is
    ``"raise"``); rows that still fail are dropped and remembered, so readers can
    tell positions passed from samples delivered.
    """

    def __init__(
        self,
        table: pa.Table,
        order: np.ndarray,
        transform: Callable[[pa.RecordBatch], Iterable[Any]],
        *,
        batch_rows: int,
        on_error: OnError = "raise",
    ) -> None:
        ordered = table.take(pa.array(order))
        self._samples: list[Any] = []
        self._skipped: list[int] = []  # positions in this window whose row was dropped
        for batch in ordered.to_batches(max_chunksize=batch_rows):
            try:
                self._samples.extend(_apply(transform, batch))
            except TransformContractError:
                raise
            except Exception:
                if on_error == "raise":
                    raise
                self._retry_rows(transform, batch, on_error)  # the user decides per row

    def _retry_rows(
        self, transform: Callable[[pa.RecordBatch], Iterable[Any]], batch: pa.RecordBatch, on_error: OnError
    ) -> None:
        failures: list[Exception] = []
        for index in range(batch.num_rows):
            try:
                self._samples.extend(_apply(transform, batch.slice(index, 1)))
            except TransformContractError:
                raise
            except Exception as error:
                if callable(on_error) and not on_error(error):
                    raise
                failures.append(error)
                self._skipped.append(len(self._samples))
                self._samples.append(None)
        if failures and on_error == "warn":
            warnings.warn(
                f"transform {_qualname(transform)} failed on {len(failures)} of {batch.num_rows} "
                f"rows of a batch; they were skipped (first error: {failures[0]!r})",
                TransformErrorWarning,
                stacklevel=2,
            )

    def __len__(self) -> int:
        return len(self._samples)

    def samples(self, start: int, stop: int) -> list[Any]:
        """Transformed samples for rows [start, stop); a dropped row gives ``None``."""
        return self._samples[start:stop]

    def kept(self, start: int, stop: int) -> list[int] | None:
        """Offsets from ``start`` of the rows in [start, stop) that were not dropped.

        ``None`` when no row in the range was dropped (the common case).
        """
        first = bisect.bisect_left(self._skipped, start)
        if first == len(self._skipped) or self._skipped[first] >= stop:
            return None
        dropped = set(self._skipped[first : bisect.bisect_left(self._skipped, stop)])
        return [offset - start for offset in range(start, stop) if offset not in dropped]


def _apply(transform: Callable[[pa.RecordBatch], Iterable[Any]], batch: pa.RecordBatch) -> list[Any]:
    produced = list(transform(batch))
    if len(produced) != batch.num_rows:
        raise TransformContractError(
            f"transform {_qualname(transform)} returned {len(produced)} samples for "
            f"a batch of {batch.num_rows} rows; it must return exactly one sample "
            "per row (filter rows with the filter= argument instead)"
        )
    return produced


def _qualname(function: object) -> str:
    module = getattr(function, "__module__", None)
    name = getattr(function, "__qualname__", type(function).__qualname__)
    return f"{module}.{name}" if module else str(name)
