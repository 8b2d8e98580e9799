"""``StreamingDataset``'s keywords, declared once: every name and its default.

The facade's signature (``dataset/dataset.py``) writes them out with their types, for
users, editors and mypy, and its docstring documents each one (what docs/api.md
shows); everything else reads them from here: the facade hands ``given(locals())``
to its engine, and the command line builds a dataset's engine from ``DEFAULTS``
without importing torch. ``tests/project/test_keywords.py`` holds the signature, the
docstring and the checks (``core/options.py`` and the modules that resolve a
keyword) to this table, so a new option is one entry here, one parameter and one
paragraph there, and one check.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .options import DEFAULT_IO_QUEUE_DEPTH, DEFAULT_READ_BATCH_SIZE

__all__ = ["DEFAULTS", "given"]

DEFAULTS: dict[str, Any] = {
    "num_splits": None,
    "shuffle": True,
    "shuffle_seed": 0,
    "epoch": 0,
    "rank": None,
    "world_size": None,
    "read_batch_size": DEFAULT_READ_BATCH_SIZE,
    "io_queue_depth": DEFAULT_IO_QUEUE_DEPTH,
    "prefetch_batches": None,
    "columns": None,
    "shuffle_clump_size": None,
    "filter": None,
    "transform": None,
    "transform_parallelism": None,
    "transform_queue_depth": None,
    "pack_sequences": None,
    "eos_id": None,
    "pad_id": None,
    "blocks_per_epoch": None,
    "on_transform_error": "raise",
    "connection_factory": None,
    "worker_info_override": None,
    "version": None,
    "storage_options": None,
    "block_rows": None,
    "shuffle_buffer_size": None,
    "storage_profile": "auto",
    "tag_snapshot": False,
    "evaluation": False,
    "endless": False,
    "transform_rng": False,
    "follow_latest": False,
    "cache_dir": None,
    "cache_limit": None,
    "blobs": "bytes",
}
"""Every keyword of ``StreamingDataset`` and its default, in the signature's order."""


def given(values: Mapping[str, Any]) -> dict[str, Any]:
    """The value of every keyword in ``values`` (the facade's ``locals()``), in ``DEFAULTS``' order.

    Raises:
        TypeError: ``values`` lacks a declared keyword (the facade's signature and
            ``DEFAULTS`` disagree).
    """
    missing = [name for name in DEFAULTS if name not in values]
    if missing:
        raise TypeError(f"StreamingDataset's signature lacks the declared keywords {missing}")
    return {name: values[name] for name in DEFAULTS}
