"""Constructor settings of ``StreamingDataset``, checked (``optionchecks.py``) and resolved.

Order-defining settings (they decide which row sits at each position) are recorded
in every state dict; the rest are I/O settings that never change the order.
``Options`` also says how the sizes the user did not give follow the table: its
rows' bytes (``sized_for``), the default ``num_splits`` (``with_default_splits``) and
a checkpoint's plan (the ``adopting`` methods).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .cachesettings import CacheSettings
from .plan import PLAN_FORMAT
from .profiles import DEFAULT_PROFILE, Profile, sized
from .splits import default_splits, sizes_for

__all__ = [
    "DEFAULT_BLOCK_ROWS",
    "DEFAULT_IO_QUEUE_DEPTH",
    "DEFAULT_READ_BATCH_SIZE",
    "DEFAULT_SHUFFLE_BUFFER_SIZE",
    "DEFAULT_TRANSFORM_PARALLELISM",
    "Options",
]

DEFAULT_BLOCK_ROWS = DEFAULT_PROFILE.block_rows
DEFAULT_SHUFFLE_BUFFER_SIZE = DEFAULT_PROFILE.shuffle_buffer_size
DEFAULT_READ_BATCH_SIZE = 64
DEFAULT_IO_QUEUE_DEPTH = 4
DEFAULT_TRANSFORM_PARALLELISM = 4
"""Transform threads when ``transform_parallelism`` is None (fewer on smaller machines)."""


@dataclass(frozen=True)
class Options:
    """Validated constructor settings (``rank``, ``world_size`` already resolved)."""

    num_splits: int
    world_size: int
    rank: int
    epoch: int
    shuffle: bool
    shuffle_seed: int
    block_rows: int
    shuffle_buffer_size: int
    shuffle_clump_size: int | None
    read_batch_size: int
    io_queue_depth: int
    prefetch_batches: int | None
    transform_parallelism: int | None
    transform_queue_depth: int | None
    version: int | None
    filter: str | None
    transform: Callable[..., Any] | None
    on_transform_error: str | Callable[[Exception], bool]
    columns: tuple[str, ...] | None
    pack_sequences: int | None = None
    eos_id: int | None = None
    pad_id: int | None = None
    blocks_per_epoch: int | str | None = None
    evaluation: bool = False
    endless: bool = False
    transform_rng: bool = False
    follow_latest: bool = False
    blobs: str = "bytes"
    """What a sample holds for a blob column: ``"bytes"`` or ``"handles"``; never order-defining."""
    profile: Profile = DEFAULT_PROFILE
    """The storage profile, resolved (its I/O settings apply; the plan's may be overridden)."""
    profile_plan: bool = False
    """True when neither ``block_rows`` nor ``shuffle_buffer_size`` was given."""
    user_sizes: tuple[str, ...] = ()
    """Which of ``block_rows`` and ``shuffle_buffer_size`` the user gave (never sized)."""
    cache: CacheSettings | None = None
    """The local cache of a table in a bucket (``cache_dir``, ``cache_limit``); never order-defining."""
    plan_format: int = PLAN_FORMAT
    """The plan format new plans are built in; a checkpoint's older one is adopted."""
    splits_defaulted: bool = False
    """True when ``num_splits`` was not given: chosen once the rows are known
    (``with_default_splits``) and adopted from a checkpoint (``adopting``)."""

    @property
    def io_threads(self) -> int:
        """Threads reading windows (as many again run their takes): ``io_queue_depth``,
        at least the storage profile's minimum (16 for object storage: hides its round trips)."""
        return max(self.io_queue_depth, self.profile.min_io_threads)

    def sized_for(self, row_bytes: float | None) -> Options:
        """These options with the block, buffer and takes the user did not give sized
        for rows of ``row_bytes`` bytes (see ``profiles.sized``).

        ``block_rows`` and ``shuffle_buffer_size`` given explicitly are kept as they
        are (a buffer smaller than the given block becomes one block); the take size
        is an I/O setting, always sized. Every rank reads the same snapshot's
        metadata (and the same first rows), so every rank sizes the same way.
        """
        # the profile as these options hold it: plain ints (the profile may hold a numpy
        # integer the user gave, which would overflow in the arithmetic)
        base = dataclasses.replace(
            self.profile, block_rows=self.block_rows, shuffle_buffer_size=self.shuffle_buffer_size
        )
        fitted = sized(base, row_bytes)
        block = self.block_rows if "block_rows" in self.user_sizes else fitted.block_rows
        if "shuffle_buffer_size" in self.user_sizes:
            buffer = self.shuffle_buffer_size
        else:
            buffer = max(block, fitted.shuffle_buffer_size)
        profile = dataclasses.replace(fitted, block_rows=block, shuffle_buffer_size=buffer)
        return dataclasses.replace(self, profile=profile, block_rows=block, shuffle_buffer_size=buffer)

    def with_default_splits(self, rows: int, *, row_bytes: float | None) -> Options:
        """These options with ``num_splits`` chosen for ``rows`` planned rows of about
        ``row_bytes`` bytes (``splits.default_splits``), when it was not given.

        Kept at one split per rank for packing (``blocks_per_epoch`` counts blocks
        per split) and for evaluation (nothing resumes; every row counts). Above one
        split per rank, the sizes the user did not give follow S (``splits.sizes_for``):
        the buffer grows within its bytes, the block shrinks so that one block of
        every split fits the buffer.
        """
        if not self.splits_defaulted or self.pack_sequences is not None or self.evaluation:
            return self
        given = self.user_sizes
        buffer = self.shuffle_buffer_size
        if "shuffle_buffer_size" not in given and row_bytes:
            buffer = max(buffer, int(self.profile.buffer_bytes // row_bytes))  # what its bytes allow
        chosen = default_splits(rows=rows, world_size=self.world_size, buffer_rows=buffer)
        if chosen == self.world_size:
            return self
        block, buffer = sizes_for(
            chosen,
            block_rows=self.block_rows,
            buffer_rows=self.shuffle_buffer_size,
            allowed_rows=buffer,
            given=given,
        )
        profile = dataclasses.replace(self.profile, block_rows=block, shuffle_buffer_size=buffer)
        return dataclasses.replace(
            self, num_splits=chosen, block_rows=block, shuffle_buffer_size=buffer, profile=profile
        )

    def adopting_splits(self, num_splits: int, *, block_rows: int) -> Options:
        """These options with a checkpoint's ``num_splits``, if this dataset's was defaulted.

        A dataset built without ``num_splits`` resumes a checkpoint of any S its
        world size divides: one written when the table had other rows (so another
        default), with another world size's default, or by an earlier release (one
        split per rank). Its block comes with it unless the user gave ``block_rows``
        (``adopting`` then takes the window). A given ``num_splits`` (or packing,
        whose ``blocks_per_epoch`` counts per split) is returned unchanged: a
        mismatch is then refused.

        Raises:
            ValueError: the world size does not divide the checkpoint's ``num_splits``.
        """
        if not self.splits_defaulted or self.pack_sequences is not None or num_splits == self.num_splits:
            return self
        if num_splits % self.world_size:
            sizes = [size for size in range(1, min(num_splits, 64) + 1) if num_splits % size == 0]
            raise ValueError(
                f"the checkpoint has num_splits={num_splits}, which world_size={self.world_size} does "
                f"not divide: every rank must own as many splits; resume it on a world size that "
                f"divides {num_splits} ({', '.join(map(str, sizes))}{', ...' if num_splits > 64 else ''})"
            )
        adopted = dataclasses.replace(self, num_splits=num_splits)
        if "block_rows" in self.user_sizes:
            return adopted
        profile = dataclasses.replace(self.profile, block_rows=block_rows)
        return dataclasses.replace(adopted, block_rows=block_rows, profile=profile)

    def adopting_format(self, plan_format: int) -> Options:
        """These options with a checkpoint's plan format, if this release builds it
        (every format up to ``PLAN_FORMAT``): a state of an earlier release resumes
        on the plan it was written with. A later format is left to be refused."""
        if 1 <= plan_format <= PLAN_FORMAT:
            return dataclasses.replace(self, plan_format=plan_format)
        return self

    def adopting(self, *, block_rows: int, window_rows: int) -> Options:
        """These options with a saved plan's block and window, if they came from the profile.

        A dataset whose block and buffer sizes came from its profile resumes a state
        written under another profile (a table copied from local disk to a bucket)
        with that state's plan, so the resume stays exact. ``shuffle_buffer_size``
        becomes ``window_rows * num_splits``, which gives back exactly ``window_rows``.
        Options given explicitly are returned unchanged (a mismatch is then refused),
        and so are they for a window that is not whole blocks (no plan has one): the
        block and the window are adopted together or not at all. With only
        ``block_rows`` given, the buffer was sized by the rows (which appends and
        deletes change), so the saved window is adopted when its block is that block.
        """
        only_block = self.user_sizes == ("block_rows",) and block_rows == self.block_rows
        if not (self.profile_plan or only_block) or window_rows % block_rows:
            return self
        buffer = window_rows * self.num_splits
        return dataclasses.replace(self, block_rows=block_rows, shuffle_buffer_size=buffer)

    @property
    def clump_rows(self) -> int:
        """Rows permuted together inside a window (1: every row on its own)."""
        return self.shuffle_clump_size or 1

    @property
    def transform_threads(self) -> int:
        """Threads that run ``transform`` in each iterating process."""
        if self.transform_parallelism is not None:
            return self.transform_parallelism
        return min(DEFAULT_TRANSFORM_PARALLELISM, os.cpu_count() or 1)

    @property
    def transform_depth(self) -> int:
        """Batches of a split transformed at once, the one being consumed included."""
        if self.transform_queue_depth is not None:
            return self.transform_queue_depth
        return max(2, self.transform_threads)
