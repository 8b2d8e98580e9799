"""What runs in each worker: each share finished and sent with its report, and the environment.

A worker's iterator yields its shares several to a DataLoader message, each with
the ``WorkerReport`` (the progress of the splits the worker owns) taken as it ended
(``cut.grouped``). The loader's collate wrapper (``ReportingCollate``) finishes each
share into a ``SentShare`` (collated, or its columns put in a shared-memory slot)
that carries the report. The trainer's process applies the report when ``next()``
hands the batch over, so a batch that was prefetched and never handed over is
never counted.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _compat
from ..core.progress import WorkerReport
from ..core.world import World
from . import byvalue, outputs, seeding, transfer
from .side import find_world

if TYPE_CHECKING:
    from .cut import Share

__all__ = ["ReportingCollate", "SentShare", "WorkerInit"]


@dataclass(frozen=True)
class SentShare:
    """One process's share of a loader batch and its worker's report (``None`` in the
    trainer's own process).

    ``slots`` says where the share's samples go in the batch of ``size`` samples
    (``assembly``); ``raw`` marks a share of samples the trainer collates (a
    user's ``collate_fn`` sees the whole batch). ``numpy`` marks a share whose
    numeric columns travel as numpy arrays, in the batch or (``parcel``) in a
    shared-memory slot, their keys then holding ``None``; ``packed`` one whose
    tensors travel by value (``byvalue``). ``unwrap`` turns them into tensors in
    the trainer's process. ``spanned`` names the string and binary columns that
    travel packed (``read.spans``: in the slot, or with their ``Spans``), never as
    pickled values; the trainer makes their lists once the batch is merged.
    """

    batch: Any
    report: WorkerReport | None
    slots: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    size: int = 0
    raw: bool = False
    numpy: bool = False
    parcel: transfer.Parcel | None = None
    packed: bool = False
    notice: str | None = None
    """Raised as ``SeededTransformWarning`` in the trainer (see ``seeding``)."""
    spanned: tuple[str, ...] = ()

    @property
    def count(self) -> int:
        """Samples in this share."""
        return len(self.slots)

    @property
    def worker(self) -> int:
        """The worker that sent this share (0 in the trainer's own process)."""
        return 0 if self.report is None else self.report.worker

    def unwrap(self) -> Any:
        """The share as the trainer receives it."""
        if self.notice is not None:
            seeding.warn(self.notice)
        if self.packed:
            return byvalue.unpack(self.batch)
        if not self.numpy:
            return _opened(self.batch, {}) if self.spanned else self.batch
        from ..samples.collated import to_tensors

        batch, parcel = self.batch, self.parcel
        if parcel is not None:  # numeric arrays copied out of the slot, strings unpacked from it
            return to_tensors(transfer.received(parcel, lambda arrays: _opened(batch, arrays, copy=True)))
        return to_tensors(_opened(batch, {}) if self.spanned else batch)

    def columns(self) -> dict[str, Any]:
        """A ``numpy`` share's columns as they arrived: numeric ones as numpy arrays, those
        in a shared-memory slot as views of it (copy them, then call ``done``); strings
        and binaries packed (``spanned``) are copied out already, as lists."""
        if self.notice is not None:
            seeding.warn(self.notice)
        if self.parcel is None:
            return _opened(self.batch, {}) if self.spanned else dict(self.batch)
        return _opened(self.batch, transfer.views(self.parcel))

    def done(self) -> None:
        """The columns of ``columns()`` were copied out: the worker may reuse their slot."""
        if self.parcel is not None:
            transfer.done(self.parcel)

    def pin_memory(self, device: str | None = None) -> SentShare:
        """Pin the share (called by the DataLoader's pin-memory thread); ``assembly``
        then builds the batch in pinned memory too."""
        batch = self.batch if self.raw or self.count == 0 else _compat.pin_memory(self.unwrap(), device)
        return SentShare(batch, self.report, self.slots, self.size, raw=self.raw, spanned=self.spanned)


def _opened(batch: dict[str, Any], arrays: dict[str, np.ndarray], *, copy: bool = False) -> dict[str, Any]:
    """A share's columns with those of its slot put back: arrays as they lie there (or
    ``copy``'d), packed strings and binaries (``spans.Spans``, in the slot or carrying their
    array) unpacked into new values."""
    from ..samples.spans import Spans, unpack

    return {
        key: unpack(arrays[key] if value.array is None else np.asarray(value.array), value)
        if isinstance(value, Spans)
        else (arrays[key].copy() if copy else arrays[key])
        if key in arrays
        else value
        for key, value in batch.items()
    }


_PIPE_BYTES = byvalue.MAX_BYTES
"""Batches up to this size travel from workers by value (faster than shared memory)."""


def _pipe_sized(batch: dict[str, Any]) -> bool:
    return sum(getattr(value, "nbytes", 0) for value in batch.values()) <= _PIPE_BYTES


def _spanned(batch: dict[str, Any]) -> tuple[str, ...]:
    """The columns of a finished share packed as strings and binaries (``read.spans``)."""
    from ..samples.spans import Spans

    return tuple(key for key, value in batch.items() if isinstance(value, Spans))


_REBUILT = (
    "a StreamingDataLoader's dataset and collate_fn are iterated by another DataLoader: "
    "something rebuilt the loader, e.g. accelerate's skip_first_batches, which the Hugging Face "
    "Trainer calls to skip the batches already trained when it resumes a checkpoint; such a "
    "loader can neither skip nor yield these batches. With the Trainer, mix "
    "streaming.StreamingTrainerMixin into your Trainer class (it saves the loader's state in "
    "every checkpoint and resumes from it; see docs/interop.md); elsewhere, resume with "
    "loader.load_state_dict(state) instead of skipping batches"
)


class ReportingCollate:
    """Batches one ``Share`` (a process's share of a loader batch) and attaches the
    worker's report.

    With ``columnar`` the share holds column pieces (see ``assemble``), finished
    here without per-row work; in a worker its numeric columns go through the
    ``channel``'s shared-memory ring when one is set. With ``raw`` the samples
    travel as they are and the trainer collates the whole batch.
    """

    def __init__(
        self,
        collate: Callable[[Any], Any],
        *,
        columnar: bool,
        raw: bool = False,
        transforming: seeding.Transforming | None = None,
    ) -> None:
        self.collate = collate
        self.columnar = columnar
        self.raw = raw
        self.transforming = transforming  # what a seeding worker_init_fn is told about
        self.channel: transfer.Channel | None = None

    def __getstate__(self) -> dict[str, Any]:
        """What a worker needs: with ``raw`` the trainer collates, so the user's function
        stays behind (it need not be picklable)."""
        state = dict(self.__dict__)
        if self.raw:
            state["collate"] = None
        return state

    def __call__(self, message: list[Share]) -> list[SentShare]:
        """The shares of one message: a worker's shares of one or more batches, each
        with the report taken as it ended (``None`` in the trainer's own process, whose
        cursor is already the committed one)."""
        if message and not hasattr(message[0], "report"):
            raise TypeError(_REBUILT)
        world = find_world()
        return [self._share(item, world) for item in message]

    def _share(self, item: Share, world: World) -> SentShare:
        report = item.report
        if item.first and world.in_worker and self.channel is not None:
            transfer.restart(self.channel, world.worker)  # a persistent worker's new iterator
        share = functools.partial(SentShare, slots=item.slots, size=item.size)
        if item.count == 0:
            return share(None, report)
        if self.raw:
            return share(item.items, report, raw=True)
        if not item.columnar:
            collated = outputs.collate(self.collate, item.items)  # errors name the key and sample
            if not world.in_worker:
                return share(collated, None)
            batch, packed = byvalue.pack(collated)
            return share(batch, report, packed=packed, notice=seeding.notice(self.transforming))
        from ..samples.collated import finish, layout, to_tensors
        from ..samples.spans import Spans, packable

        if not world.in_worker:
            return share(finish(item.items), None)
        channel = self.channel
        shapes = layout(item.items) if channel is not None else {}
        claimed = None
        if channel is not None and shapes:
            claimed = transfer.claim(channel, world.worker, shapes, varying=bool(packable(item.items)))
        if claimed is not None:  # numeric, string and binary columns are gathered straight into the slot
            targets = claimed[1]
            batch = finish(item.items, as_numpy=True, out=targets)
            rest = {
                key: None if key in targets and not isinstance(value, Spans) else value
                for key, value in batch.items()
            }
            return share(rest, report, numpy=True, parcel=claimed[0], spanned=_spanned(batch))
        batch = finish(item.items, as_numpy=True)  # strings and binaries packed all the same
        spanned = _spanned(batch)
        if channel is not None and not shapes:  # where a claim failed, a send would fail too
            arrays = {key: value for key, value in batch.items() if isinstance(value, np.ndarray)}
            parcel = transfer.send(channel, world.worker, arrays) if arrays else None
            if parcel is not None:
                rest = {key: None if key in arrays else value for key, value in batch.items()}
                return share(rest, report, numpy=True, parcel=parcel, spanned=spanned)
        if _pipe_sized(batch):
            return share(batch, report, numpy=True, spanned=spanned)
        return share(to_tensors(batch), report, spanned=spanned)  # large: shared memory beats the pipe


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
