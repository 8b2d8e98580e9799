"""Constructor settings of ``StreamingDataset``: one table of checks, one error format.

Order-defining settings (they decide which row sits at each position) are recorded
in every state dict; the rest are I/O settings that never change the order.
"""

from __future__ import annotations

import dataclasses
import operator
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .cachesettings import CacheSettings
from .checks import (
    Field,
    either,
    first_refused,
    is_bool,
    is_int,
    non_negative,
    one_of,
    optional,
    positive,
    type_fix,
)
from .profiles import DEFAULT_PROFILE, Profile, sized

__all__ = [
    "DEFAULT_BLOCK_ROWS",
    "DEFAULT_IO_QUEUE_DEPTH",
    "DEFAULT_READ_BATCH_SIZE",
    "DEFAULT_SHUFFLE_BUFFER_SIZE",
    "DEFAULT_TRANSFORM_PARALLELISM",
    "Options",
    "as_epoch",
    "check_handle_options",
    "check_options",
]

DEFAULT_BLOCK_ROWS = DEFAULT_PROFILE.block_rows
DEFAULT_SHUFFLE_BUFFER_SIZE = DEFAULT_PROFILE.shuffle_buffer_size
DEFAULT_READ_BATCH_SIZE = 64
DEFAULT_IO_QUEUE_DEPTH = 4
DEFAULT_TRANSFORM_PARALLELISM = 4
"""Transform threads when ``transform_parallelism`` is None (fewer on smaller machines)."""


_INT64 = (-(1 << 63), (1 << 63) - 1)


def _token(value: object) -> bool:
    """A token id the packed output (int64) holds; negative ids such as -100 are common."""
    return is_int(value) and _INT64[0] <= value <= _INT64[1]  # type: ignore[operator]


def _columns(value: object) -> bool:
    """A non-empty list (or tuple) of distinct column names."""
    return (
        isinstance(value, (list, tuple))
        and len(value) > 0
        and all(isinstance(column, str) for column in value)
        and len(set(value)) == len(value)
    )


_POSITIVE = "greater than 0 (an integer)"
_OPTIONAL_POSITIVE = "greater than 0 (an integer) or None"
_BOOL = "True or False"
_optional_positive = optional(positive)

# What each setting must be, and what to pass instead (formatted with the settings).
_CHECKS: tuple[Field, ...] = (
    Field(
        "num_splits",
        positive,
        _POSITIVE,
        "a multiple of world_size such as num_splits={world_size}, or None (one per rank)",
    ),
    Field("world_size", positive, _POSITIVE, "world_size=1 or more (the number of ranks), or None"),
    Field("rank", non_negative, "an integer in [0, world_size)", "rank=0 up to world_size - 1, or None"),
    Field("epoch", non_negative, "a non-negative integer", "epoch=0 or more"),
    Field("shuffle", is_bool, _BOOL, "shuffle=True or shuffle=False"),
    Field(
        "shuffle_seed",
        non_negative,
        "a non-negative integer (or None to draw one)",
        "an integer such as shuffle_seed=0, or None to draw one",
    ),
    Field("block_rows", positive, _POSITIVE, "block_rows=1 or more, or None (the storage profile's)"),
    Field(
        "shuffle_buffer_size", positive, _POSITIVE, "a row count such as shuffle_buffer_size=8192, or None"
    ),
    Field(
        "shuffle_clump_size", _optional_positive, _OPTIONAL_POSITIVE, "shuffle_clump_size=1 or more, or None"
    ),
    Field("read_batch_size", positive, _POSITIVE, "read_batch_size=1 or more"),
    Field("io_queue_depth", positive, _POSITIVE, "io_queue_depth=1 or more"),
    Field("prefetch_batches", _optional_positive, _OPTIONAL_POSITIVE, "prefetch_batches=1 or more, or None"),
    Field(
        "transform_parallelism",
        _optional_positive,
        _OPTIONAL_POSITIVE,
        "transform_parallelism=1 or more, or None",
    ),
    Field(
        "transform_queue_depth",
        _optional_positive,
        _OPTIONAL_POSITIVE,
        "transform_queue_depth=1 or more, or None",
    ),
    Field(
        "version",
        _optional_positive,
        "a positive Lance version number or None",
        "a version the table has (table.list_versions()), or None for the latest",
    ),
    Field(
        "filter",
        optional(lambda v: isinstance(v, str) and v.strip() != ""),
        "an SQL predicate string or None",
        "an SQL predicate such as filter='label > 0', or None",
    ),
    Field("transform", optional(callable), "a callable or None", "a function of a RecordBatch, or None"),
    Field(
        "pack_sequences",
        _optional_positive,
        "a positive integer (tokens per block) or None",
        "the tokens per block such as pack_sequences=2048, or None",
    ),
    Field(
        "eos_id",
        optional(_token),
        "a token id (an integer that int64 holds) or None",
        "the tokenizer's end-of-document id",
    ),
    Field(
        "pad_id",
        optional(_token),
        "a token id (an integer that int64 holds, -100 for example) or None",
        "the tokenizer's padding id (or -100)",
    ),
    Field(
        "blocks_per_epoch",
        optional(either(one_of(("auto",)), positive)),
        "a positive integer, 'auto' or None",
        "a multiple of num_splits, or blocks_per_epoch='auto'",
    ),
    Field(
        "on_transform_error",
        either(one_of(("raise", "skip", "warn", "replace")), callable),
        "'raise', 'skip', 'warn', 'replace' or a callable handler(exception) -> bool",
        "one of those",
    ),
    Field("evaluation", is_bool, _BOOL, "evaluation=True or evaluation=False"),
    Field("endless", is_bool, _BOOL, "endless=True or endless=False"),
    Field("transform_rng", is_bool, _BOOL, "transform_rng=True or transform_rng=False"),
    Field("follow_latest", is_bool, _BOOL, "follow_latest=True or follow_latest=False"),
    Field(
        "blobs",
        one_of(("bytes", "handles")),
        "'bytes' or 'handles'",
        "blobs='bytes' (each blob's bytes) or blobs='handles' (a lazy file-like handle per blob)",
    ),
    Field(
        "columns",
        optional(_columns),
        "a non-empty list of distinct column names or None",
        "columns=['id', ...] (each name once), or None for every column",
    ),
)


def _refusal(field: Field, values: dict[str, Any]) -> str:
    """The message for a refused setting: the field, the value and the fix."""
    name, value = field.name, values[field.name]
    instead = type_fix(name, value, field.check) or field.fix.format(**values)
    return f"{name} must be {field.expected}, got {value!r}; pass {instead}"


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


def _check_packing(values: dict[str, Any]) -> None:
    """Packing needs all its settings, no transform, and a budget S divides."""
    keys = ("eos_id", "pad_id", "blocks_per_epoch")
    if values["pack_sequences"] is None:
        for name in keys:
            if values[name] is not None:
                raise ValueError(
                    f"{name}={values[name]!r} is only used with pack_sequences; set both or neither"
                )
        return
    for name in keys:
        if values[name] is None:
            raise ValueError(f"pack_sequences needs {name}; pass {name}= as well (see docs/packing.md)")
    if values["transform"] is not None:
        raise ValueError("pack_sequences cannot be combined with transform; pack the raw token column")
    blocks, splits = values["blocks_per_epoch"], values["num_splits"]
    if blocks != "auto" and blocks % splits:
        example = blocks - blocks % splits or splits
        raise ValueError(
            f"blocks_per_epoch={blocks} is not divisible by num_splits={splits}; every split emits "
            f"the same number of blocks, so pass a multiple of {splits} (for example {example})"
        )


_HANDLE_CHECKS: tuple[Field, ...] = (
    Field(
        "storage_options",
        optional(lambda v: isinstance(v, Mapping) and all(isinstance(k, str) for k in v)),
        "a dict of object-store options (str keys) or None",
    ),
    Field("tag_snapshot", is_bool, "True or False"),
    Field("connection_factory", optional(callable), "a callable factory(table_name) or None"),
)


def check_handle_options(values: dict[str, Any]) -> None:
    """Check the settings that say how to open the table (never recorded in a state).

    Raises:
        ValueError: one has the wrong type; the message never shows option values,
            which may be credentials.
    """
    field = first_refused(values, _HANDLE_CHECKS)
    if field is not None:
        raise ValueError(f"{field.name} must be {field.expected}, got a {type(values[field.name]).__name__}")


def as_epoch(epoch: object) -> int:
    """``epoch`` as an int; ``ValueError`` unless a non-negative integer.

    Anything ``operator.index`` takes counts (numpy integers, 0-d integer arrays and
    tensors, which frameworks pass to ``set_epoch``), but not a bool.
    """
    try:
        value = None if isinstance(epoch, bool) else operator.index(epoch)  # type: ignore[arg-type]
    except TypeError:
        value = None
    if value is None or value < 0:
        raise ValueError(f"epoch must be a non-negative integer, got {epoch!r}; pass epoch=0 or more")
    return value


def check_options(values: dict[str, Any]) -> Options:
    """Validate constructor settings and return them as ``Options``.

    Raises:
        ValueError: a setting is out of range, naming it, its value and the fix.
    """
    field = first_refused(values, _CHECKS)
    if field is not None:
        raise ValueError(_refusal(field, values))
    for name in (field.name for field in _CHECKS if is_int(values[field.name])):
        values[name] = int(values[name])  # numpy integers become plain ints (JSON states)
    if values["rank"] >= values["world_size"]:
        raise ValueError(
            f"rank must be in [0, world_size={values['world_size']}), got rank={values['rank']}; pass "
            f"rank=0 up to {values['world_size'] - 1}, or None to read it from torch.distributed"
        )
    _check_packing(values)
    if values["transform_rng"] and values["transform"] is None:
        raise ValueError("transform_rng=True needs a transform= that takes (batch, rngs); pass one")
    if values["endless"] and values["evaluation"]:
        raise ValueError(
            "endless=True and evaluation=True exclude each other: an evaluation pass ends "
            "with its epoch; pass one of them"
        )
    columns = values["columns"]
    return Options(**{**values, "columns": tuple(columns) if columns is not None else None})
