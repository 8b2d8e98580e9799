"""Shared pieces of the mixture tests: two real tables, their sources, and runs by topology."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import lance

from streaming import StreamingDataLoader, StreamingDataset, StreamingMixture

from helpers import json_roundtrip, make_table, table_data

SPLITS = 12  # both sources: any world size dividing 12 resumes any other
GLOBAL_BATCH = 48  # four units of 12
B_IDS = 100_000  # ids of source b start here
WEIGHTS = {"a": 0.7, "b": 0.3}


def make_tables(folder: Path) -> dict[str, str]:
    """Source a: 377 live rows over three fragments (L = 31); source b: 130 rows (L = 10)."""
    a = make_table(folder / "a.lance", [150, 130, 100], deleted=[3, 77, 201])
    b = str(folder / "b.lance")
    lance.write_dataset(table_data(B_IDS, 70), b)
    lance.write_dataset(table_data(B_IDS + 70, 60), b, mode="append")
    return {"a": a, "b": b}


def source_of(sample_id: int) -> str:
    return "b" if sample_id >= B_IDS else "a"


def sources(
    uris: dict[str, str], rank: int = 0, world_size: int = 1, **options: Any
) -> dict[str, StreamingDataset]:
    """Both sources for one rank; ``options`` go to every source (``a_options`` only to a)."""
    a_options = options.pop("a_options", {})
    return {
        name: StreamingDataset(
            uri,
            num_splits=SPLITS,
            rank=rank,
            world_size=world_size,
            block_rows=4,
            shuffle_buffer_size=96,
            **options,
            **(a_options if name == "a" else {}),
        )
        for name, uri in uris.items()
    }


def mixture(
    uris: dict[str, str],
    rank: int = 0,
    world_size: int = 1,
    *,
    weights: dict[str, float] | None = None,
    stop: str = "never",
    seed: int | None = 0,
    **options: Any,
) -> StreamingMixture:
    return StreamingMixture(
        sources(uris, rank, world_size, **options),
        weights=weights or WEIGHTS,
        global_batch_size=GLOBAL_BATCH,
        stop=stop,
        seed=seed,
    )


def ids(batch: Any) -> list[int]:
    return [int(value) for value in batch["id"]]


def run_job(
    make: Callable[[int, int], StreamingMixture],
    world_size: int,
    *,
    workers: int = 0,
    steps: int | None = None,
    state: dict[str, Any] | None = None,
    context: str | None = None,
    on_step: Callable[[int, list[StreamingMixture]], None] | None = None,
) -> list[list[int]]:
    """Global batches of a job of ``world_size`` ranks driven in lockstep in this process.

    Each global batch is the sorted ids of every rank's batch of that step. Every
    rank's batch must have ``GLOBAL_BATCH / world_size`` samples. ``on_step(t, mixtures)``
    runs after step t (1-based) on every rank.
    """
    mixtures = [make(rank, world_size) for rank in range(world_size)]
    if state is not None:
        for mix in mixtures:
            mix.load_state_dict(json_roundtrip(state))
    loaders = [
        StreamingDataLoader(
            mix,
            batch_size=GLOBAL_BATCH // world_size,
            num_workers=workers,
            multiprocessing_context=context,
            timeout=120 if workers else 0,
        )
        for mix in mixtures
    ]
    iterators = [iter(loader) for loader in loaders]
    batches: list[list[int]] = []
    try:
        while steps is None or len(batches) < steps:
            try:
                per_rank = [ids(next(iterator)) for iterator in iterators]
            except StopIteration:
                break
            assert all(len(batch) == GLOBAL_BATCH // world_size for batch in per_rank), per_rank
            batches.append(sorted(i for batch in per_rank for i in batch))
            if on_step is not None:
                on_step(len(batches), mixtures)
    finally:
        for iterator in iterators:
            iterator.close()
    return batches


def merged_state(mixtures: list[StreamingMixture]) -> dict[str, Any]:
    return StreamingMixture.merge_state_dicts([json_roundtrip(mix.state_dict()) for mix in mixtures])
