"""The committed progress of one dataset object: its cursor, where the run started, the last boundary. Pure.

A *run* starts at construction, ``set_epoch`` or ``load_state_dict``. A *logical
step boundary* is a moment at which every owned split that has not run out has
advanced by the same number of samples since the run started: the only moments
whose counts resume correctly on another topology, and what
``StreamingDataLoader.state_dict`` returns between them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .progress import Cursor, Mark, SplitProgress

__all__ = ["Advances", "Ledger"]


class Advances:
    """Each owned split's advance since the run started, and whether it still runs.

    Kept as counts of each advance (of running splits, of run-out splits) so that
    ``at_boundary`` costs O(1) and an update O(splits updated), whatever the
    number of splits. Pure: the caller feeds it every change of an owned split.
    """

    def __init__(self, owned: Sequence[int], start: Sequence[SplitProgress], *, total: int, by_samples: bool):
        """Track ``owned`` splits from the run's ``start``; feed each one's progress
        with ``update`` before asking ``at_boundary``."""
        self._owned = frozenset(owned)
        self._begun = [split.samples for split in start]
        self._total, self._by_samples = total, by_samples
        self._each: dict[int, tuple[int, bool]] = {}  # split: (advance, running)
        self._running: dict[int, int] = {}  # advance: how many running splits have it
        self._out: dict[int, int] = {}  # advance: how many splits that ran out have it

    def update(self, updates: Mapping[int, SplitProgress]) -> None:
        """Record where some splits stand now (splits not owned are ignored)."""
        owned, begun, each, total = self._owned, self._begun, self._each, self._total
        for split, progress in updates.items():
            if split not in owned:
                continue
            count = progress.samples if self._by_samples else progress.positions
            new = (progress.samples - begun[split], count < total)
            old = each.get(split)
            if old != new:
                if old is not None:
                    _discount(self._running if old[1] else self._out, old[0])
                counts = self._running if new[1] else self._out
                counts[new[0]] = counts.get(new[0], 0) + 1
                each[split] = new

    def at_boundary(self) -> bool:
        """``Ledger.at_boundary`` for the recorded progress."""
        if len(self._running) > 1:
            return False
        if not self._running:
            return True
        (common,) = self._running
        return not self._out or max(self._out) <= common


def _discount(counts: dict[int, int], advance: int) -> None:
    """Take one split off ``advance`` in ``counts``."""
    left = counts[advance] - 1
    if left:
        counts[advance] = left
    else:
        del counts[advance]


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
        self._boundary: Mark = ([], [], [])
        self._group_batches: dict[tuple[int, int], int] = {}  # (group, groups): batches this run
        self._advances = Advances((), (), total=0, by_samples=False)
        self._tracked = -1  # the cursor version ``_advances`` describes

    def restart(self, progress: Sequence[SplitProgress], *, total: int, by_samples: bool) -> None:
        """Start a run at ``progress``."""
        self.cursor = Cursor(progress)
        self.total, self.by_samples = total, by_samples
        self._boundary = self.cursor.mark()
        self._group_batches = {}
        self._track()

    @property
    def boundary(self) -> tuple[SplitProgress, ...]:
        """Every split's progress at the last boundary ``commit`` saw (or the run's start)."""
        return Cursor.unmark(self._boundary)

    def _track(self) -> None:
        """Describe the cursor as it stands now in ``_advances``."""
        progress = self.cursor.progress()
        self._advances = Advances(self.owned, self.cursor.start, total=self.total, by_samples=self.by_samples)
        self._advances.update({split: progress[split] for split in self.owned})
        self._tracked = self.cursor.version

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
        splits, and how many shares there are); remember it if it is a boundary.

        Costs O(len(updates)): whether the result is a boundary is decided as
        ``at_boundary`` would, from advances kept up to date split by split.
        """
        if self._tracked != self.cursor.version:  # moved by this process's own iterator
            self._track()
        self.cursor.apply(updates)
        self._tracked = self.cursor.version
        self._advances.update(updates)
        self._group_batches[group] = self._group_batches.get(group, 0) + 1
        if self._advances.at_boundary():
            self._boundary = self.cursor.mark()

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

        Call it with boundary progress. Other ranks' splits carry their count at the
        start of this run plus the smallest advance of this rank's owned splits
        since then (the cycles in which every owned split took a sample), capped at
        the split's total; their positions follow (rows only: a packed split's
        position is its anchor's document). The advances differ only after a lagged
        merge, once some owned splits have run out.
        """
        start = self.cursor.start
        advance = min(progress[split].samples - start[split].samples for split in self.owned)
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
