"""The committed progress of one dataset object: its cursor and where the run started. Pure.

A *run* starts at construction, ``set_epoch`` or ``load_state_dict``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .order import RankOrder
from .progress import Cursor, SplitProgress

__all__ = ["Ledger"]


class Ledger:
    """Progress of every split as committed in this process, with the run's start.

    ``total`` is what each split holds in the epoch (rows, or packed blocks with
    ``by_samples``); a split has run out when its positions (its samples, for
    blocks) reach it. ``restart`` starts the first run.
    """

    def __init__(self, owned: Sequence[int]) -> None:
        self.owned = tuple(owned)
        self.cursor = Cursor(())
        self.total, self.by_samples = 0, False

    def restart(self, progress: Sequence[SplitProgress], *, total: int, by_samples: bool) -> None:
        """Start a run at ``progress``."""
        self.cursor = Cursor(progress)
        self.total, self.by_samples = total, by_samples

    def remaining(self) -> list[int]:
        """Samples (or blocks) each split has left in this epoch."""
        counts = self.cursor.samples if self.by_samples else self.cursor.positions
        return [self.total - count for count in counts]

    def commit(self, updates: Mapping[int, SplitProgress]) -> None:
        """Adopt the progress of a worker's splits: its share was handed to the trainer."""
        self.cursor.apply(updates)

    def lockstep(self, progress: Sequence[SplitProgress], *, split_length: int) -> tuple[SplitProgress, ...]:
        """``progress`` with every split of other ranks where lockstep training puts it.

        In synchronous training every rank hands out as many samples per step, each
        in the same order (``core.order.RankOrder``: by level, then split). So
        another rank has handed out, since the run started, as many samples as this
        rank's owned splits advanced in total, in its own order from its own start:
        that fixes each of its splits' count, a partial cycle and a lagged start
        included (capped at the split's total). Positions follow (rows only: a
        packed split's position is its anchor's document).
        """
        start, owned = self.cursor.start, self.owned
        world_size = owned[1] - owned[0] if len(owned) > 1 else len(start)
        delivered = sum(progress[split].samples - start[split].samples for split in owned)
        result = list(progress)
        for rank in range(world_size):
            splits = list(range(rank, len(start), world_size))
            if splits == list(owned):
                continue
            starts = [min(self.total, start[split].samples) for split in splits]
            order = RankOrder(starts, [max(self.total, begun) for begun in starts])
            for split, advance in zip(splits, order.counts(delivered).tolist(), strict=True):
                begun = start[split]
                samples = begun.samples + advance
                positions = begun.positions
                if not self.by_samples:
                    positions = max(samples, min(split_length, positions + advance))
                result[split] = SplitProgress(samples, positions, begun.anchor)
        return tuple(result)
