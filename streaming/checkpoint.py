"""The checkpoint half of ``StreamingDataset``: state_dict, load_state_dict, merge.

``Checkpointing`` is mixed into ``StreamingDataset`` only; it keeps the state
methods (consistent cuts, lockstep counts, validation before any change) apart
from construction and iteration.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from . import commit, source
from .iterate import Progress
from .merge import merge_states
from .packing import Anchor, Packing
from .plan import EpochPlan
from .state import StreamState, check_compatible, parse_state

_OPENED = ("_snapshot", "_columns", "_filter_index", "_fragments", "_plan", "_packing")
"""What ``_open`` assigns; restored when a state is refused."""

Counts = tuple[list[int], list[int], list[Anchor]]
"""(samples, positions, packing anchors) of every split."""


class Checkpointing:
    """State methods of ``StreamingDataset`` (see there for the guarantees)."""

    if TYPE_CHECKING:  # attributes and methods that StreamingDataset provides
        _progress: Progress
        _options: Any
        _plan: EpochPlan
        _snapshot: source.Snapshot
        _columns: tuple[str, ...]
        _filter_index: source.FilterIndex | None
        _fragments: tuple[list[int], list[int]]
        _packing: Packing | None
        _rank_splits: list[int]
        _epoch: int
        _shipped: bool
        _tag_snapshot: bool
        _worker_counters: dict[tuple[int, int], dict[str, float]]

        @property
        def num_splits(self) -> int: ...
        @property
        def shuffle_seed(self) -> int: ...
        def _remaining(self, *, whole: bool = False) -> list[int]: ...
        def _require_idle(self, action: str) -> None: ...
        def _open(self, snapshot: source.Snapshot, handle: Any, *, epoch: int) -> None: ...

    def _describe(
        self, samples: Sequence[int], positions: Sequence[int], anchors: Sequence[Anchor] = ()
    ) -> StreamState:
        settings = self._plan.settings
        return StreamState(
            num_splits=self.num_splits,
            shuffle=self._options.shuffle,
            shuffle_seed=self.shuffle_seed,
            epoch=self._epoch,
            block_rows=settings.block_rows,
            window_rows=settings.window_rows,
            clump_rows=settings.clump_rows,
            samples=tuple(samples),
            positions=tuple(positions),
            owned_splits=tuple(self._rank_splits),
            uri=self._snapshot.uri,
            version=self._snapshot.version,
            filter=self._options.filter,
            columns=self._columns,
            packing=self._packing_key(),
            anchors=tuple(anchors) if self._packing is not None else None,
        )

    def _packing_key(self) -> tuple[int, int, int, int] | None:
        return None if self._packing is None else dataclasses.astuple(self._packing)

    def state_dict(self) -> dict[str, Any]:
        """The position after the last completed cycle, as plain JSON data.

        Owned splits carry their exact counts; every other split carries where it
        stands if all ranks advance in lockstep, so one rank's state resumes a
        synchronous job on the same topology. Never contains credentials.
        """
        if self._shipped:
            raise RuntimeError(
                "this dataset was sent to the worker processes of a plain DataLoader, whose "
                "progress never reaches this process, so its state would be wrong; iterate it "
                "with streaming.StreamingDataLoader, which commits each batch as it is returned"
            )
        counts = self._boundary_counts()
        if counts is None:
            raise RuntimeError(
                "the splits of this rank have advanced unequally since this run started: the "
                "state is between logical steps of the DataLoader workers; consume more batches "
                "(one from every worker) and call state_dict() again, or use "
                "StreamingDataLoader.state_dict(), which returns the last logical step boundary"
            )
        return self._state_from(*counts)

    def _boundary_counts(self) -> Counts | None:
        """(samples, positions, anchors) now, if every unfinished owned split advanced equally."""
        progress = self._progress
        samples, start, remaining = progress.samples, progress.start, self._remaining()
        advances = {samples[split] - start[split] for split in self._rank_splits if remaining[split] > 0}
        return (samples, progress.positions, list(progress.anchors)) if len(advances) <= 1 else None

    def _state_from(
        self, samples: Sequence[int], positions: Sequence[int], anchors: Sequence[Anchor]
    ) -> dict[str, Any]:
        """The state dict for boundary counts, non-owned splits in lockstep."""
        progress, length, owned = self._progress, self._plan.split_length, self._rank_splits
        advance = min(samples[split] - progress.start[split] for split in owned)
        samples, positions, whole = list(samples), list(positions), self._remaining(whole=True)
        for split in range(self.num_splits):
            if split not in owned:
                samples[split] = min(whole[split], progress.start[split] + advance)
                if self._packing is None:
                    positions[split] = max(samples[split], min(length, progress.positions[split] + advance))
        return self._describe(samples, positions, anchors).to_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from ``state``: pins its snapshot and adopts its epoch and counts.

        The whole state is validated first; a refused state leaves the dataset as
        it was.

        Raises:
            ValueError: malformed state, unknown format, peer checkpoint, or any plan
                input that differs from this dataset's (the message names the
                field, both values and the fix).
            source.SnapshotGoneError: the pinned version no longer exists.
            RuntimeError: an iterator of this dataset is active.
        """
        self._require_idle("load_state_dict")
        saved = parse_state(state)
        pinned = self._snapshot.at_version(saved.version)
        handle = source.open_snapshot(pinned, fresh=True)
        before = {name: getattr(self, name) for name in _OPENED}
        try:
            self._open(pinned, handle, epoch=saved.epoch)
            current = self._describe(saved.samples, saved.positions, saved.anchors or ())
            check_compatible(saved, current, split_length=self._plan.split_length)
        except BaseException:
            for name, value in before.items():
                setattr(self, name, value)
            raise
        self._epoch = saved.epoch
        self._progress.reset(saved.samples, saved.positions, saved.anchors)
        self._shipped = False
        if self._tag_snapshot:
            source.protect(self._snapshot)

    def release_snapshot(self) -> bool:
        """Remove the tag that protects this dataset's version (see ``tag_snapshot``).

        Returns False when the version had no such tag. After this, cleaning up old
        versions may delete it, and states that pin it can no longer be resumed.
        """
        return source.release(self._snapshot)

    def _commit(self, snapshot: commit.Snapshot) -> None:
        """Adopt a worker's counts for the splits it owns (the batch reached the trainer)."""
        self._progress.apply(snapshot.splits, snapshot.samples, snapshot.positions, snapshot.anchors)
        if snapshot.counters is not None:
            self._worker_counters[(snapshot.pid, snapshot.worker)] = snapshot.counters

    @staticmethod
    def merge_state_dicts(states: Sequence[dict[str, Any]], *, allow_lag: bool = False) -> dict[str, Any]:
        """Merge every old rank's state into the one state every new rank loads.

        Each split's count comes from the state that owns it. Refuses states of
        different plans, snapshots or epochs, owners that disagree, and (unless
        ``allow_lag=True``, which accepts ranks of unequal remaining length) owned
        counts that differ between states.
        """
        return merge_states(states, allow_lag=allow_lag)
