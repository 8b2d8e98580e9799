"""Loader states at every step: exact (nothing replayed), accepted by merge, equal ranks anywhere.

Every batch is assembled from all workers' shares, so ``loader.state_dict()`` after
any batch counts exactly what the trainer received (G5, G6, G7), whatever
``num_workers``. Batch sizes here are not multiples of the splits an iterator owns,
so most states are taken inside a cycle. A resume on a world size that splits that
partial cycle unevenly gives back at most one sample per rank, so that every rank
has as many samples left (docs/workers.md).
"""

from __future__ import annotations

import warnings
from collections import Counter

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from streaming import EpochCompleteWarning, StreamingDataLoader, StreamingDataset, UnownedSplitsWarning

from helpers import ids_of, make_table

NUM_SPLITS = 12


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    """305 live rows: L = 25 for 12 splits, five surplus rows."""
    return make_table(tmp_path_factory.mktemp("replay") / "t.lance", [100, 105, 100])


def dataset(uri: str, **kwargs) -> StreamingDataset:
    return StreamingDataset(
        uri, num_splits=NUM_SPLITS, shuffle_seed=4, block_rows=4, shuffle_buffer_size=96, **kwargs
    )


def every_step(
    uri: str, workers: int, batch: int, context: str | None = None
) -> tuple[list[list[int]], list[dict]]:
    """The batches of one epoch and ``loader.state_dict()`` after each of them."""
    run = StreamingDataLoader(
        dataset(uri),
        batch_size=batch,
        num_workers=workers,
        timeout=120 if workers else 0,
        multiprocessing_context=context,
    )
    batches, states = [], []
    for item in run:
        batches.append(item["id"].tolist())
        states.append(run.state_dict())
    return batches, states


@pytest.mark.parametrize(
    ("workers", "batch", "context"),
    [(0, 7, None), (2, 7, None), (3, 7, None), (4, 5, None), (2, 12, None), (3, 5, "spawn")],
)
def test_every_state_is_exact_merges_and_keeps_ranks_equal(uri, workers, batch, context):
    """Forkserver (the default) and spawn workers; k = 0, 2, 3, 4: after every batch the
    state counts what was delivered; it resumes on one rank with nothing repeated, and on
    2, 3 and 4 ranks with equal lengths, repeating at most one sample per rank."""
    batches, states = every_step(uri, workers, batch, context)
    assert batches == every_step(uri, 0, batch)[0], "the same batches as num_workers=0 (G3)"
    planned = Counter(ids_of(dataset(uri)))
    delivered = 0
    for step, (got, state) in enumerate(zip(batches, states, strict=True)):
        delivered += len(got)
        assert sum(state["samples_consumed_per_split"]) == delivered, f"step {step}: the state is not exact"
        merged = StreamingDataset.merge_state_dicts([state])  # never refuses the loader's own state
        before = Counter(i for batch_ids in batches[: step + 1] for i in batch_ids)
        for world_size in (1, 2, 3, 4):
            rest, lengths = Counter(), []
            for rank in range(world_size):
                resumed = dataset(uri, rank=rank, world_size=world_size)
                resumed.load_state_dict(merged)
                lengths.append(len(resumed))
                if step % 9 == 4 or step == len(batches) - 1:
                    rest += Counter(ids_of(resumed) if len(resumed) else [])  # a finished epoch would warn
            assert len(set(lengths)) == 1, f"step {step}: ranks of {world_size} get {lengths}"
            if step % 9 == 4 or step == len(batches) - 1:
                again = before + rest
                assert not planned - again, f"step {step}, {world_size} ranks: samples lost"
                repeated = sum((again - planned).values())
                assert repeated <= (world_size - 1 if world_size > 1 else 0), (
                    f"step {step}, {world_size} ranks: {repeated} samples repeated"
                )


@pytest.mark.parametrize(("workers", "batch"), [(0, 7), (2, 7), (3, 7), (2, 12)])
def test_len_counts_epoch_covers_what_a_resumed_loader_yields(uri, workers, batch):
    """What Lightning relies on: after running ``step + 1`` batches and resuming, it
    asks len() - (step + 1) more, which must cover what the loader still yields."""
    _, states = every_step(uri, workers, batch)
    for step, state in enumerate(states):
        lightning_view = _loaded(uri, state, batch=batch, workers=workers, len_counts="epoch")
        really = _loaded(uri, state, batch=batch, workers=workers)  # len(): what it yields
        assert len(lightning_view) - (step + 1) >= len(really), f"step {step}: Lightning would stop early"


def _loaded(
    uri: str, state: dict, *, batch: int, workers: int, len_counts: str = "remaining"
) -> StreamingDataLoader:
    data = dataset(uri)
    data.load_state_dict(state)
    return StreamingDataLoader(data, batch_size=batch, num_workers=workers, len_counts=len_counts)


# -- states after a give-back resume (hypothesis over topologies and stopping steps) --


def _lockstep(datasets: list[StreamingDataset], per_rank: int) -> tuple[list[int], list[dict]]:
    """Every rank takes ``per_rank`` samples, as synchronous steps would: the ids of all
    ranks, and each rank's state."""
    taken: list[int] = []
    for data in datasets:
        iterator = iter(data)
        taken += [int(next(iterator)["id"]) for _ in range(min(per_rank, len(data)))]
        iterator.close()
    return taken, [data.state_dict() for data in datasets]


def _ranks(uri: str, state: dict | None, world_size: int) -> list[StreamingDataset]:
    result = []
    for rank in range(world_size):
        data = dataset(uri, rank=rank, world_size=world_size)
        if state is not None:
            data.load_state_dict(state)
        result.append(data)
    return result


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    first=st.sampled_from([1, 2, 3, 4, 6]),
    second=st.sampled_from([1, 2, 3, 4, 6]),
    steps=st.tuples(st.integers(0, 30), st.integers(0, 30)),
    chosen=st.sets(st.integers(0, 5), min_size=1),
)
@example(first=2, second=3, steps=(1, 2), chosen={0})
@example(first=2, second=3, steps=(1, 2), chosen={0, 1})
def test_any_ranks_state_after_a_give_back_resumes_with_nothing_lost(uri, first, second, steps, chosen):
    """2 -> 3 -> 1 ranks and every other pair: after a resume that gives back part of a
    partial cycle, any one rank's state, and a merge of any subset of ranks, resumes on
    one rank with nothing lost; repeated are only the given-back samples (at most one per
    rank of the second world size)."""
    planned = Counter(ids_of(dataset(uri)))
    taken, states = _lockstep(_ranks(uri, None, first), steps[0])
    delivered = Counter(taken)
    taken, states = _lockstep(_ranks(uri, StreamingDataset.merge_state_dicts(states), second), steps[1])
    delivered += Counter(taken)
    subset = [states[rank] for rank in sorted(chosen) if rank < second] or [states[0]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnownedSplitsWarning)  # the rest: lockstep counts
        resume = subset[0] if len(subset) == 1 else StreamingDataset.merge_state_dicts(subset)
    last = dataset(uri)
    last.load_state_dict(resume)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EpochCompleteWarning)
        delivered += Counter(ids_of(last))
    lost = planned - delivered
    assert not lost, f"{first} -> {second} ranks after {steps}, states {sorted(chosen)}: lost {sorted(lost)}"
    repeated = sum((delivered - planned).values())
    assert repeated <= second - 1, f"{first} -> {second} ranks after {steps}: {repeated} repeated"
