"""The checks of ``StreamingDataset``'s settings: one table of checks, one error format.

Every refusal names the setting, the value and the fix. Pure: no torch, no Lance.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

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
from .options import Options

__all__ = ["as_epoch", "check_handle_options", "check_options"]

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
        "a multiple of world_size such as num_splits={world_size}, or None (chosen for the table)",
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
