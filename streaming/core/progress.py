"""Where each split stands (``SplitProgress``) and the cursor an iterator advances. Pure.

``SplitProgress`` is the one value for a split's progress: what an iterator
advances, what a worker's batch carries to the trainer, what a state serialises
and what a merge compares. ``Cursor`` holds one per split for a dataset object;
conversions to and from plain data happen in ``state.StreamState`` only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Anchor", "Cursor", "Mark", "Passed", "SplitProgress", "WorkerReport", "fresh"]

Anchor = tuple[int, int, int]
"""Packing only: (blocks emitted, next document, token offset in it) of one split."""

Passed = list[int] | None
"""Positions a split has passed after 0, 1, ... cycles (``None``: one per cycle)."""


Mark = tuple[list[int], list[int], list[Anchor | None]]
"""A cursor's samples, positions and anchors at one moment (``Cursor.mark``)."""


@dataclass(frozen=True)
class SplitProgress:
    """Where one split stands: samples delivered and plan positions passed.

    ``positions >= samples`` (rows a transform dropped are passed, not delivered).
    With packing, ``samples`` counts blocks and ``anchor`` says where the next
    block starts in the split's token stream.
    """

    samples: int = 0
    positions: int = 0
    anchor: Anchor | None = None


def fresh(num_splits: int, *, packing: bool = False) -> tuple[SplitProgress, ...]:
    """The progress of an epoch nobody has read yet."""
    start = SplitProgress(anchor=(0, 0, 0)) if packing else SplitProgress()
    return (start,) * num_splits


class Cursor:
    """The progress of every split of one dataset object, as its iterator advances it.

    An iterator moves several splits by one sample per completed cycle; to keep
    that cheap, the splits of the current *stride* (``begin``) advance together by
    ``cycles`` (the first ``within`` of them one more: a partial cycle) and are
    folded in on read. ``start`` is the progress at the start of
    this run (construction, ``set_epoch`` or ``load_state_dict``). ``version``
    changes whenever a method changes the stored counts (a stride's ``cycles``
    are not stored until ``fold``).
    """

    def __init__(self, progress: Sequence[SplitProgress]) -> None:
        self.start: tuple[SplitProgress, ...] = tuple(progress)
        self.version = 0
        self._samples = [split.samples for split in progress]
        self._positions = [split.positions for split in progress]
        self._anchors: list[Anchor | None] = [split.anchor for split in progress]
        self._moving: list[int] = []
        self._passed: list[Passed] = []
        self.cycles = 0
        self.within = 0
        """Samples of the stride's current cycle handed out (its first splits are one ahead)."""

    def __len__(self) -> int:
        return len(self._samples)

    @property
    def samples(self) -> list[int]:
        """Samples delivered per split, a partial cycle included."""
        result = list(self._samples)
        cycles, within = self.cycles, self.within
        for index, split in enumerate(self._moving):
            result[split] += cycles + (index < within)
        return result

    @property
    def positions(self) -> list[int]:
        """Plan positions passed per split."""
        result = list(self._positions)
        cycles, within = self.cycles, self.within
        for index, (split, passed) in enumerate(zip(self._moving, self._passed, strict=True)):
            done = cycles + (index < within)
            result[split] += done if passed is None else passed[done]
        return result

    def progress(self, splits: Sequence[int] | None = None) -> tuple[SplitProgress, ...]:
        """The progress of ``splits`` (default: every split), in that order."""
        return self.unmark((self.samples, self.positions, self._anchors), splits)

    def apply(self, updates: Mapping[int, SplitProgress]) -> None:
        """Overwrite the progress of some splits (a worker's batch reached the trainer).

        Only for a cursor no iterator of this process advances.
        """
        if self._moving:
            raise RuntimeError("apply() while an iterator of this process advances the cursor")
        self.version += 1
        for split, progress in updates.items():
            self._samples[split] = progress.samples
            self._positions[split] = progress.positions
            self._anchors[split] = progress.anchor

    @staticmethod
    def unmark(mark: Mark, splits: Sequence[int] | None = None) -> tuple[SplitProgress, ...]:
        """The progress a ``mark`` holds for ``splits`` (default: every split)."""
        samples, positions, anchors = mark
        chosen = range(len(samples)) if splits is None else splits
        return tuple(SplitProgress(samples[s], positions[s], anchors[s]) for s in chosen)

    def mark(self) -> Mark:
        """Where every split stands now; cheaper than ``progress()`` on a hot path."""
        return self.samples, self.positions, list(self._anchors)

    def restore(self, mark: Mark) -> None:
        """Go back to a ``mark`` (no stride open)."""
        if self._moving:
            raise RuntimeError("restore() while an iterator of this process advances the cursor")
        samples, positions, anchors = mark
        self.version += 1
        self._samples, self._positions, self._anchors = list(samples), list(positions), list(anchors)

    def advance(self, splits: Sequence[int], cycles: int) -> None:
        """Count ``cycles`` more completed cycles for ``splits`` (no stride open)."""
        self.version += 1
        samples, positions = self._samples, self._positions
        for split in splits:
            samples[split] += cycles
            positions[split] += cycles

    def move_anchors(self, anchors: Mapping[int, Anchor]) -> None:
        """Packing: adopt each split's new anchor (its block count and document)."""
        self.version += 1
        for split, anchor in anchors.items():
            self._anchors[split] = anchor
            self._samples[split], self._positions[split] = anchor[0], anchor[1]

    def anchor(self, split: int) -> Anchor:
        """Packing: where ``split``'s next block starts."""
        return self._anchors[split] or (0, 0, 0)

    def begin(self, splits: Sequence[int], passed: Sequence[Passed] | None = None) -> None:
        """Open a stride in which ``splits`` advance one sample per completed cycle.

        ``passed[i]`` (if given and not ``None``) lists the positions split i has
        passed after 0, 1, ... cycles; otherwise positions move with the samples.
        """
        self.fold()
        self._moving = list(splits)
        self._passed = list(passed) if passed is not None else [None] * len(splits)

    def fold(self) -> None:
        """Close the open stride into the stored counts."""
        self.version += 1
        self._samples, self._positions = self.samples, self.positions
        self._moving, self._passed, self.cycles, self.within = [], [], 0, 0


@dataclass(frozen=True)
class WorkerReport:
    """The progress of the splits one worker owns, after the samples of one batch: what
    a worker's batch carries to the trainer, which commits it when the batch is handed over."""

    worker: int
    pid: int
    progress: Mapping[int, SplitProgress]
    counters: dict[str, float]
