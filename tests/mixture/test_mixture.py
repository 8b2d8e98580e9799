"""Mixtures on real tables: proportions, topologies, exact resume, reweighting, stop rules. (G17)"""

from __future__ import annotations

import math
from collections import Counter
from functools import partial
from itertools import islice

import numpy as np
import pyarrow as pa
import pytest
import torch
from torch.utils.data import DataLoader, default_collate

from streaming import EpochCompleteWarning, StreamingDataLoader, StreamingDataset

from helpers import ids_of, json_roundtrip, live_ids
from mixtures import (
    GLOBAL_BATCH,
    SPLITS,
    WEIGHTS,
    ids,
    make_tables,
    merged_state,
    mixture,
    run_job,
    source_of,
)

UNIT = SPLITS  # the gcd of the sources' split counts


@pytest.fixture(scope="module")
def uris(tmp_path_factory) -> dict[str, str]:
    return make_tables(tmp_path_factory.mktemp("mix"))


def per_source(batch: list[int]) -> dict[str, int]:
    counts = Counter(source_of(i) for i in batch)
    return {name: counts[name] for name in WEIGHTS}


def test_batches_are_the_same_on_every_world_size_and_worker_count(uris):
    """Per-batch counts and the very samples of every global batch: W = 1..4, k = 0 and 2."""
    make = partial(mixture, uris, stop="first_exhausted")
    reference = run_job(make, 1)
    assert len(reference) == len(make(0, 1)) // GLOBAL_BATCH > 5
    for world_size in (1, 2, 3, 4):
        for workers in (0, 2):
            got = run_job(make, world_size, workers=workers)
            assert [per_source(batch) for batch in got] == [per_source(batch) for batch in reference], (
                f"world_size={world_size} num_workers={workers}: per-batch counts differ"
            )
            assert got == reference, f"world_size={world_size} num_workers={workers}: batches differ"


def test_every_rank_takes_the_same_number_of_each_source(uris):
    for world_size in (2, 3, 4):
        mixtures = [mixture(uris, rank, world_size) for rank in range(world_size)]
        loaders = [iter(StreamingDataLoader(mix, batch_size=GLOBAL_BATCH // world_size)) for mix in mixtures]
        for step in range(12):
            counts = [per_source(ids(next(loader))) for loader in loaders]
            assert all(count == counts[0] for count in counts), f"step {step}: {counts}"


def test_shares_over_one_and_ten_epochs_of_the_smallest_source(uris):
    """Each source's share stays within one unit of its weight at every batch, for ten
    epochs of b; every epoch of a source delivers each of its planned rows once."""
    b_epoch = SPLITS * (130 // SPLITS)
    steps = math.ceil(10 * b_epoch / (GLOBAL_BATCH * WEIGHTS["b"])) + 1
    loader = StreamingDataLoader(mixture(uris, seed=None), batch_size=GLOBAL_BATCH)
    batches = [ids(batch) for batch in islice(loader, steps)]  # in delivery order, sources apart
    delivered = {"a": [], "b": []}
    for step, batch in enumerate(batches, start=1):
        for name, count in per_source(batch).items():
            exact = GLOBAL_BATCH * WEIGHTS[name]
            assert count % UNIT == 0 and abs(count - exact) < UNIT, (step, name, count)
        for sample in batch:
            delivered[source_of(sample)].append(sample)
        for name in WEIGHTS:  # cumulative: within one unit of the exact share
            assert abs(len(delivered[name]) - step * GLOBAL_BATCH * WEIGHTS[name]) < UNIT, (step, name)
    assert len(delivered["b"]) >= 10 * b_epoch
    single = {
        name: ids_of(StreamingDataset(uri, num_splits=SPLITS, block_rows=4, shuffle_buffer_size=96))
        for name, uri in uris.items()
    }
    for name, samples in delivered.items():
        size = len(single[name])
        for epoch in range(len(samples) // size):
            chunk = samples[epoch * size : (epoch + 1) * size]
            assert len(set(chunk)) == size, f"{name} epoch {epoch} repeats a row"
            assert set(chunk) <= live_ids(uris[name]), f"{name} epoch {epoch} delivers a deleted row"
    assert sorted(delivered["b"][:b_epoch]) == sorted(single["b"])


def test_resume_from_every_step_through_json_and_merge_on_another_topology(uris):
    """Two ranks stop after every step (also the steps where a source crosses its epoch);
    the merged state resumed on three ranks gives exactly the rest of the stream."""
    make = partial(mixture, uris)
    steps = 14  # b (about 14 samples per batch, 120 per epoch) crosses into epoch 1
    reference = run_job(make, 1, steps=steps)
    states = {0: merged_state([make(rank, 2) for rank in range(2)])}
    run_job(make, 2, steps=steps, on_step=lambda step, mixes: states.__setitem__(step, merged_state(mixes)))
    crossed = [step for step, state in states.items() if state["sources"]["b"]["epoch"] == 1]
    assert crossed, "the run never crossed an epoch of b"
    for step, state in states.items():
        assert state["step"] == step
        rest = run_job(make, 3, steps=steps - step, state=state)
        assert reference[:step] + rest == reference, f"resumed after step {step}: the rest differs"


@pytest.mark.parametrize(("old", "new", "context"), [((2, 2), (3, 2), None), ((4, 0), (1, 2), "spawn")])
def test_resume_with_worker_processes_on_another_topology(uris, old, new, context):
    make = partial(mixture, uris)
    reference = run_job(make, 1, steps=12)
    saved = {}
    run_job(
        make,
        old[0],
        workers=old[1],
        steps=5,
        on_step=lambda s, mixes: saved.__setitem__(s, merged_state(mixes)),
    )
    rest = run_job(make, new[0], workers=new[1], steps=7, state=saved[5], context=context)
    assert reference[:5] + rest == reference


def test_a_state_taken_two_epochs_in_resumes_exactly(uris):
    make = partial(mixture, uris)
    states = {}
    reference = run_job(
        make, 1, steps=24, on_step=lambda s, mixes: states.__setitem__(s, merged_state(mixes))
    )
    step = min(step for step, state in states.items() if state["sources"]["b"]["epoch"] == 2)
    assert reference[:step] + run_job(make, 2, steps=24 - step, state=states[step]) == reference


def test_a_reweighted_resume_loses_and_repeats_nothing(uris):
    """Every source's delivered rows are a prefix of its own plan; only the future changes."""
    make = partial(mixture, uris, stop="first_exhausted")
    first = make(0, 1)
    iterator = iter(StreamingDataLoader(first, batch_size=GLOBAL_BATCH))
    before = [ids(next(iterator)) for _ in range(4)]
    state = json_roundtrip(first.state_dict())
    iterator.close()
    heavier_b = {"a": 0.2, "b": 0.8}
    refused = mixture(uris, weights=heavier_b, stop="first_exhausted")
    with pytest.raises(ValueError, match=r"weights=.*reweight=True"):
        refused.load_state_dict(state)
    loader = StreamingDataLoader(
        mixture(uris, weights=heavier_b, stop="first_exhausted"), batch_size=GLOBAL_BATCH
    )
    with pytest.raises(ValueError, match=r"weights=.*reweight=True"):
        loader.load_state_dict(state)  # docs/mixtures.md: the loader reweights only when asked, too
    loader.load_state_dict(state, reweight=True)
    assert loader.state_dict()["step"] == 4
    resumed = mixture(uris, weights=heavier_b, stop="first_exhausted")
    resumed.load_state_dict(state, reweight=True)
    assert resumed.step == 4
    after = [ids(batch) for batch in StreamingDataLoader(resumed, batch_size=GLOBAL_BATCH)]
    for batch in after:
        assert per_source(batch)["b"] >= 36, "the new weights do not decide the later batches"
    plans = {
        name: ids_of(StreamingDataset(uri, num_splits=SPLITS, block_rows=4, shuffle_buffer_size=96))
        for name, uri in uris.items()
    }
    for name, plan in plans.items():
        cursor = 0
        for step, batch in enumerate(before + after):
            mine = sorted(i for i in batch if source_of(i) == name)
            assert mine == sorted(plan[cursor : cursor + len(mine)]), (
                f"{name}, batch {step}: not its plan's next rows"
            )
            cursor += len(mine)


def test_stop_rules_lengths_and_new_epochs(uris):
    first = mixture(uris, stop="first_exhausted")
    length = len(first)
    loader = StreamingDataLoader(first, batch_size=GLOBAL_BATCH)
    assert len(loader) * GLOBAL_BATCH == length
    assert sum(len(ids(batch)) for batch in loader) == length
    with pytest.warns(EpochCompleteWarning, match="set_epoch"):
        assert list(loader) == []
    first.set_epoch(1)  # every source starts its next epoch; the shares carry on
    length = len(first)
    again = [i for batch in loader for i in ids(batch)]
    assert len(again) == length and len(set(again)) == length
    every = mixture(uris, stop="all_exhausted")
    samples = [i for batch in StreamingDataLoader(every, batch_size=GLOBAL_BATCH) for i in ids(batch)]
    for name in WEIGHTS:  # every source was delivered whole at least once
        mine = [i for i in samples if source_of(i) == name]
        assert len(set(mine)) >= SPLITS * every.sources[name].split_length
    endless = mixture(uris)
    with pytest.raises(TypeError, match="no len"):
        len(endless)
    with pytest.raises(TypeError, match="no len"):
        len(StreamingDataLoader(endless, batch_size=GLOBAL_BATCH))


def test_a_new_iterator_supersedes_the_old_one_and_continues(uris):
    mix = mixture(uris)
    loader = StreamingDataLoader(mix, batch_size=GLOBAL_BATCH)
    old = iter(loader)
    first = [ids(next(old)) for _ in range(2)]
    new = iter(loader)
    with pytest.raises(RuntimeError, match=r"superseded|new iterator"):
        next(old)
    reference = run_job(partial(mixture, uris), 1, steps=4)
    assert [sorted(batch) for batch in first + [ids(next(new)) for _ in range(2)]] == reference


def test_a_plain_dataloader_with_workers_cannot_give_a_state(uris):
    mix = mixture(uris)
    loader = DataLoader(
        mix, batch_size=GLOBAL_BATCH, num_workers=1, multiprocessing_context="spawn", timeout=120
    )
    next(iter(loader))
    with pytest.raises(RuntimeError, match="StreamingDataLoader"):
        mix.state_dict()


@pytest.mark.parametrize("context", ["forkserver", "spawn"])
def test_a_plain_dataloader_with_workers_iterates_every_sample_of_the_mixture(uris, context):
    """Each worker of a plain DataLoader yields its own share of every batch (the rows of
    its splits), so the epoch holds the samples num_workers=0 gives, each once."""
    reference = Counter(
        i for batch in DataLoader(mixture(uris, stop="first_exhausted"), batch_size=16) for i in ids(batch)
    )
    loader = DataLoader(
        mixture(uris, stop="first_exhausted"),
        batch_size=16,
        num_workers=2,
        multiprocessing_context=context,
        timeout=120,
    )
    got = Counter(i for batch in loader for i in ids(batch))
    assert got == reference, (
        f"{sum((got - reference).values())} extra, {sum((reference - got).values())} missing"
    )


class Noisy:
    """A transform that draws from its per-row generators (picklable)."""

    def __call__(self, batch: pa.RecordBatch, rngs: list[np.random.Generator]) -> list[dict]:
        rows = zip(batch.to_pylist(), rngs, strict=True)
        return [{"id": row["id"], "noise": int(rng.integers(1 << 30))} for row, rng in rows]


@pytest.mark.parametrize("workers", [0, 2])
def test_random_transforms_reproduce_after_a_resume_on_another_topology(uris, workers):
    """Transformed samples (random values included) are the same after a resume on two
    ranks, with or without workers (a worker transforms exactly its own rows)."""
    make = partial(mixture, uris, transform=Noisy(), transform_rng=True, columns=["id"])

    def noise(batch) -> list[tuple[int, int]]:
        return sorted(zip(ids(batch), (int(n) for n in batch["noise"]), strict=True))

    first = make(0, 1)
    iterator = iter(StreamingDataLoader(first, batch_size=GLOBAL_BATCH))
    reference = [noise(next(iterator)) for _ in range(8)]
    state = json_roundtrip(first.state_dict())
    iterator.close()
    resumed = [make(rank, 2) for rank in range(2)]
    for mix in resumed:
        mix.load_state_dict(state)
    timeout = 120 if workers else 0
    loaders = [
        iter(StreamingDataLoader(mix, batch_size=GLOBAL_BATCH // 2, num_workers=workers, timeout=timeout))
        for mix in resumed
    ]
    again = make(0, 1)
    straight = iter(StreamingDataLoader(again, batch_size=GLOBAL_BATCH))
    expected = [noise(next(straight)) for _ in range(12)]
    assert reference == expected[:8]
    for step in range(8, 12):
        got = sorted(pair for loader in loaders for pair in noise(next(loader)))
        assert got == expected[step], f"step {step}: random values differ after the resume"
    a_noise = {i: n for batch in expected for i, n in batch if source_of(i) == "a"}
    assert len(set(a_noise.values())) == len(a_noise), "per-row generators repeat"


def test_the_seed_orders_each_batch_and_never_changes_its_samples(uris):
    """Micro-batches cut from a rank's batch mix the sources; None keeps them in source order."""
    mixed = [ids(b) for b in islice(StreamingDataLoader(mixture(uris, 0, 2), batch_size=24), 6)]
    apart = [ids(b) for b in islice(StreamingDataLoader(mixture(uris, 0, 2, seed=None), batch_size=24), 6)]
    assert [sorted(batch) for batch in mixed] == [sorted(batch) for batch in apart]
    for batch in apart:
        kinds = [source_of(i) for i in batch]
        assert kinds == sorted(kinds), "seed=None must keep each source's samples together"
    halves = [{source_of(i) for i in batch[:12]} for batch in mixed]
    assert all(half == {"a", "b"} for half in halves), "a micro-batch holds one source only"


@pytest.mark.parametrize(("seed", "workers"), [(0, 0), (None, 0), (0, 2)])
def test_columnar_batches_equal_default_collate_of_the_samples(uris, seed, workers):
    """Without a transform the loader builds batches from columns; they equal the batches
    ``default_collate`` makes of the same samples (a collate_fn forces the per-sample path)."""

    def batches(collate_fn) -> list[dict]:
        loader = StreamingDataLoader(
            mixture(uris, 0, 2, seed=seed),
            batch_size=24,
            num_workers=workers,
            collate_fn=collate_fn,
            timeout=120 if workers else 0,
        )
        return list(islice(loader, 12))

    fast, slow = batches(None), batches(partial(default_collate))
    for step, (one, other) in enumerate(zip(fast, slow, strict=True)):
        assert one.keys() == other.keys()
        for key in one:
            if isinstance(one[key], torch.Tensor):
                assert one[key].dtype == other[key].dtype and torch.equal(one[key], other[key]), (step, key)
            else:
                assert one[key] == other[key], (step, key)
