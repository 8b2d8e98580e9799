"""The committed progress of one dataset object: its cursor, where the run started, the last boundary. Pure.

A *run* starts at construction, ``set_epoch`` or ``load_state_dict``. A *logical
step boundary* is a moment at which every owned split that has not run out has
advanced by the same number of samples since the run started: the only moments
whose counts resume correctly on another topology, and what
``StreamingDataLoader.state_dict`` returns between them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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
        self.boundary: tuple[SplitProgress, ...] = ()
        self.total, self.by_samples = 0, False
        self._group_batches: dict[tuple[int, int], int] = {}  # (group, groups): batches this run

    def restart(self, progress: Sequence[SplitProgress], *, total: int, by_samples: bool) -> None:
        """Start a run at ``progress``."""
        self.cursor = Cursor(progress)
        self.boundary = tuple(progress)
        self.total, self.by_samples = total, by_samples
        self._group_batches = {}

    def remaining(self) -> list[int]:
        """Samples (or blocks) each split has left in this epoch."""
        counts = self.cursor.samples if self.by_samples else self.cursor.positions
        return [self.total - count for count in counts]

    def at_boundary(self) -> bool:
        """True when every owned split has advanced equally since the run started.

        A split that has run out counts as keeping up when it stopped at or below
        the common advance of the others (it started ahead, after a lagged merge);
        one that ran out *ahead* of them (a worker's last batch came first) does not,
        or the counts would mix ends with lower values and no other topology could
        resume them with equal ranks.
        """
        remaining, samples = self.remaining(), self.cursor.samples
        advances = {split: samples[split] - self.cursor.start[split].samples for split in self.owned}
        running = {advance for split, advance in advances.items() if remaining[split] > 0}
        if len(running) > 1:
            return False
        if not running:
            return True
        (common,) = running
        return all(advance <= common for advance in advances.values())

    def commit(self, updates: Mapping[int, SplitProgress], *, group: tuple[int, int]) -> None:
        """Adopt the progress of a worker's splits (``group``: its share of the rank's
        splits, and how many shares there are); remember it if it is a boundary."""
        self.cursor.apply(updates)
        self._group_batches[group] = self._group_batches.get(group, 0) + 1
        if self.at_boundary():
            self.boundary = self.cursor.progress()

    def groups_behind_first(self, groups: int) -> tuple[int, ...]:
        """The rank's split groups, those with fewer committed batches first.

        A DataLoader serves its workers in turn, worker 0 first. An iterator that
        stopped part way through a round left the first groups one batch ahead; a
        new one that served them first again would keep them ahead for the rest
        of the epoch, and no later moment would be a logical step boundary.
        """
        batches = [self._group_batches.get((group, groups), 0) for group in range(groups)]
        return tuple(sorted(range(groups), key=lambda group: (batches[group], group)))

    def lockstep(self, progress: Sequence[SplitProgress], *, split_length: int) -> tuple[SplitProgress, ...]:
        """``progress`` with every split of other ranks where lockstep training puts it.

        Call it with boundary progress. Other ranks' splits advance by the owned
        splits' common advance since the run started, capped at the split's total;
        their positions follow (rows only: a packed split's position is its
        anchor's document).
        """
        start = self.cursor.start
        advance = max(
            progress[split].samples - start[split].samples for split in self.owned
        )  # the common one
        result = list(progress)
        for split, begun in enumerate(start):
            if split in self.owned:
                continue
            samples = min(self.total, begun.samples + advance)
            positions = begun.positions
            if not self.by_samples:
                positions = max(samples, min(split_length, positions + advance))
            result[split] = SplitProgress(samples, positions, begun.anchor)
        return tuple(result)
