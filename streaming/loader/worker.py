"""What crosses the worker boundary: each batch with its worker's progress, and the environment.

Inside a DataLoader worker, ``torch.utils.data.get_worker_info().dataset`` is that
worker's copy of the ``StreamingDataset``. The loader's collate wrapper runs right
after the samples of a batch were drawn; it asks that copy for a ``WorkerReport``
(the progress of the splits the worker owns) and sends it with the batch. The
trainer's process applies the report when ``next()`` hands the batch over, so a
batch that was prefetched and never handed over is never counted.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from .. import _compat
from ..core.progress import WorkerReport
from . import byvalue, outputs, seeding, transfer

if TYPE_CHECKING:
    from ..dataset.host import DatasetHost

__all__ = ["ReportingCollate", "WorkerBatch", "WorkerInit"]


@dataclass(frozen=True)
class WorkerBatch:
    """A collated batch and its worker's report (``None`` in the trainer's own process).

    ``numpy`` marks a batch whose numeric columns travel as numpy arrays, in the
    batch or (``parcel``) in a shared-memory slot, their keys then holding ``None``;
    ``packed`` one whose tensors travel by value (``byvalue``). ``unwrap`` turns
    them into tensors in the trainer's process.
    """

    batch: Any
    report: WorkerReport | None
    numpy: bool = False
    parcel: transfer.Parcel | None = None
    packed: bool = False
    notice: str | None = None
    """Raised as ``SeededTransformWarning`` in the trainer (see ``seeding``)."""

    def unwrap(self) -> Any:
        """The batch as the trainer receives it."""
        if self.notice is not None:
            seeding.warn(self.notice)
        if self.packed:
            return byvalue.unpack(self.batch)
        if not self.numpy:
            return self.batch
        from ..read.assemble import to_tensors

        batch = self.batch
        if self.parcel is not None:
            arrays = transfer.receive(self.parcel)
            batch = {key: arrays.get(key, value) for key, value in batch.items()}
        return to_tensors(batch)

    def pin_memory(self, device: str | None = None) -> WorkerBatch:
        """Pin the batch (called by the DataLoader's pin-memory thread)."""
        return WorkerBatch(_compat.pin_memory(self.unwrap(), device), self.report)


_PIPE_BYTES = byvalue.MAX_BYTES
"""Batches up to this size travel from workers by value (faster than shared memory)."""


def _pipe_sized(batch: dict[str, Any]) -> bool:
    return sum(getattr(value, "nbytes", 0) for value in batch.values()) <= _PIPE_BYTES


class ReportingCollate:
    """Wraps a collate function: collate, then attach the worker's report.

    With ``columnar`` the item is already a whole batch of column pieces (see
    ``assemble``), finished here without per-row work; in a worker its numeric
    columns go through the ``channel``'s shared-memory ring when one is set.
    """

    def __init__(self, collate: Callable[[Any], Any], *, columnar: bool) -> None:
        self.collate = collate
        self.columnar = columnar
        self.channel: transfer.Channel | None = None

    def __call__(self, samples: Any) -> WorkerBatch:
        from torch.utils.data import get_worker_info

        worker = get_worker_info()
        # In the trainer's own process (num_workers=0) the dataset's cursor is
        # already the committed one; only worker processes send reports.
        report = None if worker is None else cast("DatasetHost", worker.dataset).worker_report()
        if not self.columnar:
            collated = outputs.collate(self.collate, samples)  # errors name the key and sample
            if worker is None:
                return WorkerBatch(collated, None)
            batch, packed = byvalue.pack(collated)
            return WorkerBatch(batch, report, packed=packed, notice=seeding.notice(worker.dataset))
        from ..read.assemble import finish, to_tensors

        batch = finish(samples, as_numpy=worker is not None)
        if worker is None:
            return WorkerBatch(batch, None)
        if self.channel is not None:
            arrays = {key: value for key, value in batch.items() if isinstance(value, np.ndarray)}
            parcel = transfer.send(self.channel, worker.id, arrays) if arrays else None
            if parcel is not None:
                rest = {key: None if key in arrays else value for key, value in batch.items()}
                return WorkerBatch(rest, report, numpy=True, parcel=parcel)
        if _pipe_sized(batch):
            return WorkerBatch(batch, report, numpy=True)
        return WorkerBatch(to_tensors(batch), report)  # large: shared memory beats the pipe


class WorkerInit:
    """The loader's ``worker_init_fn``: the trainer's environment, then the user's function.

    A fork server keeps the environment of the moment it started; workers forked
    from it later would miss variables the trainer set since (credentials, flags).
    The environment is captured when this object is pickled for a worker, which
    happens as each iterator starts its workers, and installed in the worker
    before anything else runs there. It travels only in memory, to this job's
    own worker processes.
    """

    def __init__(self, user: Callable[[int], None] | None) -> None:
        self.user = user
        self.environment: dict[str, str] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"user": self.user, "environment": dict(os.environ)}

    def __call__(self, worker_id: int) -> None:
        if self.environment is not None and dict(os.environ) != self.environment:
            os.environ.clear()
            os.environ.update(self.environment)
        if self.user is not None:
            seeding.run_user_init(self.user, worker_id)
