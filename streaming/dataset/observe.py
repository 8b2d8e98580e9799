"""The read-only observability attributes ``lancedb.streaming`` users read, from ``stats()``."""

from __future__ import annotations

__all__ = ["Observed"]


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
