"""What users read of a dataset: its settings and plan (``Described``), and the read-only
observability attributes ``lancedb.streaming`` users read, from ``stats()`` (``Observed``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ..core.options import Options
    from ..core.plan import EpochPlan
    from ..samples.view import TableView

__all__ = ["Described", "Describing", "Observed"]


class Describing(Protocol):
    """What ``Described`` reads of an engine."""

    @property
    def options(self) -> Options:
        """The settings in use."""
        ...

    @property
    def view(self) -> TableView:
        """The view of the snapshot this epoch is planned on."""
        ...

    @property
    def splits(self) -> Sequence[int]:
        """Splits of this rank."""
        ...


class Described:
    """The read-only settings and plan of a dataset, written once for the engine and for the
    user's class: each is read from an engine (``_engine_described()``: the engine itself, or
    the user's dataset's), from its settings (``options``), the view of the snapshot this
    epoch is planned on (``view``) or its rank's splits (``splits``)."""

    def _engine_described(self) -> Describing:
        """The engine these read: the engine itself, or the user's dataset's."""
        raise NotImplementedError  # pragma: no cover - provided by the engine and the dataset

    @property
    def epoch(self) -> int:
        """The current epoch."""
        return self._engine_described().view.epoch

    @property
    def num_splits(self) -> int:
        """S, the number of splits."""
        return self._engine_described().options.num_splits

    @property
    def shuffle_seed(self) -> int:
        """The seed in use (drawn when constructed with ``shuffle_seed=None``)."""
        return self._engine_described().options.shuffle_seed

    @property
    def split_length(self) -> int:
        """L, the rows of every split in this epoch."""
        return self._engine_described().view.plan.split_length

    @property
    def plan(self) -> EpochPlan:
        """This epoch's plan (``streaming.core.plan.EpochPlan``): which row sits at each position."""
        return self._engine_described().view.plan

    @property
    def rank(self) -> int:
        """This dataset's rank."""
        return self._engine_described().options.rank

    @property
    def world_size(self) -> int:
        """The number of ranks."""
        return self._engine_described().options.world_size

    @property
    def columns(self) -> list[str]:
        """The columns read, resolved against the snapshot."""
        return list(self._engine_described().view.columns)

    @property
    def table_uri(self) -> str:
        """URI of the table (never includes credentials)."""
        return self._engine_described().view.snapshot.uri

    @property
    def version(self) -> int:
        """The Lance version read."""
        return self._engine_described().view.snapshot.version

    @property
    def evaluation(self) -> bool:
        """True for a dataset built for evaluation passes (restarts at every ``iter()``)."""
        return self._engine_described().options.evaluation

    @property
    def endless(self) -> bool:
        """True for a dataset that moves into the next epoch by itself."""
        return self._engine_described().options.endless

    def owned_splits(self) -> list[int]:
        """Splits of this rank: rank, rank + world_size, ..."""
        return list(self._engine_described().splits)


class Observed:
    """Eight read-only attributes with the meaning ``lancedb.streaming`` gives them.

    Each is one entry of ``stats()``: summed over this process and the DataLoader
    workers whose batches reached it (a worker's figures are as of its latest
    delivered batch). Totals accumulate over the object's life and are never
    reset; the queue figures describe the running iterator and are 0 while none
    runs in this process.
    """

    def stats(self) -> dict[str, float]:  # pragma: no cover - provided by the dataset
        raise NotImplementedError

    @property
    def bytes_loaded(self) -> int:
        """Bytes of Arrow data read from the table, before any transform."""
        return int(self.stats()["bytes_read"])

    @property
    def fetch_time(self) -> float:
        """Seconds spent reading from the table, summed over the read threads."""
        return float(self.stats()["read_seconds"])

    @property
    def transform_time(self) -> float:
        """Seconds spent in ``transform``, summed over the transform threads; without
        a transform, in converting the Arrow columns read to samples (the stage a
        transform replaces), as in ``lancedb.streaming``."""
        stats = self.stats()
        return float(stats["transform_seconds"] + stats["convert_seconds"])

    @property
    def rows_skipped(self) -> int:
        """Rows ``transform`` failed on: dropped (``on_transform_error`` ``"skip"``,
        ``"warn"``, a handler) or, with ``"replace"``, replaced.

        Counted when the transform runs, so it may include rows of batches
        transformed ahead and not yet delivered; ``stats()["rows_skipped"]``
        counts the dropped rows the delivered samples passed, this epoch.
        """
        return int(self.stats()["rows_dropped"])

    @property
    def consumed_rows(self) -> int:
        """Samples of this rank delivered in this epoch (committed counts)."""
        return int(self.stats()["rows_delivered"])

    @property
    def raw_queue_depth(self) -> int:
        """Rows read and waiting for the transform (0 without a transform).

        Persistently high: the transform, not the reads, sets the pace.
        """
        return int(self.stats()["raw_rows"])

    @property
    def prefetch_queue_depth(self) -> int:
        """Rows read (and transformed, if there is a transform) and ready to hand out,
        including those the iterator has taken out of their windows for the cycles
        in progress (counted by whole cycles), as in ``lancedb.streaming``."""
        return int(self.stats()["ready_rows"])

    @property
    def unscanned_rows(self) -> int:
        """Rows of the running iterator's splits not yet requested from the table."""
        return int(self.stats()["unscanned_rows"])
