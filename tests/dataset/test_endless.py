"""G15: endless datasets move into the next epoch inside the same iterator, and
resume exactly across the boundary."""

from __future__ import annotations

from collections import Counter

import pytest

from streaming import StreamingDataLoader, StreamingDataset

from helpers import ids_of, make_table

NUM_SPLITS = 4


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    """123 live rows: L = 30 for 4 splits, three rows sit out each epoch."""
    return make_table(tmp_path_factory.mktemp("endless") / "t.lance", [50, 40, 35], deleted=[3, 60])


def dataset(uri: str, **kwargs) -> StreamingDataset:
    return StreamingDataset(
        uri, num_splits=NUM_SPLITS, shuffle_seed=3, block_rows=4, shuffle_buffer_size=32, **kwargs
    )


def test_an_endless_dataset_yields_every_epoch_in_its_planned_order(uri):
    """Epoch after epoch, each in the order a finite dataset of that epoch gives."""
    iterator = iter(dataset(uri, endless=True))
    whole = NUM_SPLITS * dataset(uri).split_length
    for epoch in range(3):
        assert [int(next(iterator)["id"]) for _ in range(whole)] == ids_of(dataset(uri, epoch=epoch))


def epoch_batches(uri: str, workers: int, batch: int, epoch: int) -> int:
    return len(StreamingDataLoader(dataset(uri, epoch=epoch), batch_size=batch, num_workers=workers))


def run(loader: StreamingDataLoader, steps: int) -> tuple[list[tuple[int, list[int]]], list[dict]]:
    """(epoch, ids) of ``steps`` batches and ``loader.state_dict()`` after each."""
    iterator = iter(loader)
    batches, states = [], []
    for _ in range(steps):
        ids = next(iterator)["id"].tolist()
        batches.append((loader.dataset.epoch, ids))
        states.append(loader.state_dict())
    return batches, states


def by_epoch(batches: list[tuple[int, list[int]]]) -> dict[int, Counter]:
    counts: dict[int, Counter] = {}
    for epoch, ids in batches:
        counts.setdefault(epoch, Counter()).update(ids)
    return counts


@pytest.mark.parametrize(("workers", "batch"), [(0, 7), (2, 6)])
def test_an_endless_loader_delivers_each_epoch_exactly_once_then_the_next(uri, workers, batch):
    """Each epoch ends with its last (possibly short) batches; the same iterator goes
    on with the next, every planned row of every epoch exactly once."""
    per_epoch = epoch_batches(uri, workers, batch, 0)
    loader = StreamingDataLoader(dataset(uri, endless=True), batch_size=batch, num_workers=workers)
    batches, _ = run(loader, 2 * per_epoch + 3)
    assert [epoch for epoch, _ in batches] == [0] * per_epoch + [1] * per_epoch + [2] * 3
    counts = by_epoch(batches)
    for epoch in (0, 1):
        assert counts[epoch] == Counter(ids_of(dataset(uri, epoch=epoch))), f"epoch {epoch}"


@pytest.mark.parametrize(("workers", "batch"), [(0, 7), (2, 6)])
def test_an_endless_loader_resumes_exactly_around_the_epoch_boundary(uri, workers, batch):
    """States taken before, at and after the step that ends an epoch resume exactly
    (with workers, within the documented replay of the last logical boundary)."""
    per_epoch = epoch_batches(uri, workers, batch, 0)
    make = lambda: StreamingDataLoader(dataset(uri, endless=True), batch_size=batch, num_workers=workers)  # noqa: E731
    batches, states = run(make(), per_epoch + 4)
    allowance = make().replay_allowance() * batch
    for step in (per_epoch - 2, per_epoch - 1, per_epoch, per_epoch + 2):
        resumed = make()
        resumed.load_state_dict(states[step])
        rest, _ = run(resumed, 2 * per_epoch + 2 - step)
        counts = by_epoch(batches[: step + 1] + rest)
        for epoch in (0, 1):
            planned = Counter(ids_of(dataset(uri, epoch=epoch)))
            assert not planned - counts[epoch], f"state after step {step}: epoch {epoch} lost samples"
            replayed = sum((counts[epoch] - planned).values())
            assert replayed <= allowance, (
                f"state after step {step}: {replayed} samples of epoch {epoch} again"
            )


def test_an_endless_dataset_has_no_length_and_keeps_its_own_epochs(uri):
    """``len()`` raises ``TypeError`` (``len_counts="epoch"``: an epoch's batches); a framework's
    ``sampler.set_epoch`` is ignored, ``set_epoch`` itself still moves it."""
    data = dataset(uri, endless=True)
    loader = StreamingDataLoader(data, batch_size=4)
    for sized in (data, loader):
        with pytest.raises(TypeError, match="endless StreamingDataset has no len"):
            len(sized)
    whole = StreamingDataLoader(data, batch_size=4, len_counts="epoch")
    assert len(whole) == len(StreamingDataLoader(dataset(uri), batch_size=4)), "one epoch, no allowance"
    loader.sampler.set_epoch(5)
    assert data.epoch == 0
    data.set_epoch(2)
    assert data.epoch == 2
    with pytest.raises(ValueError, match="endless=True and evaluation=True exclude each other"):
        dataset(uri, endless=True, evaluation=True)


def test_a_finished_epoch_state_resumes_into_the_next_epoch(uri):
    """A state saying epoch 0 is fully delivered makes an endless dataset start epoch 1
    (a finite one would warn and yield nothing)."""
    finite = dataset(uri)
    ids_of(finite)
    endless = dataset(uri, endless=True)
    endless.load_state_dict(finite.state_dict())
    iterator = iter(endless)
    first = int(next(iterator)["id"])
    assert endless.epoch == 1 and first == ids_of(dataset(uri, epoch=1))[0]


@pytest.mark.parametrize(("workers", "batch"), [(0, 5), (2, 5)])
def test_a_framework_that_iterates_len_batches_per_epoch_sees_each_epoch_once(uri, workers, batch):
    """Lightning's way with ``len_counts="epoch"``: a new ``iter()`` every ``len()``
    batches. ``len()`` is exactly one epoch, so each iterator starts where an epoch
    starts, even with a batch size that ends no cycle."""
    loader = StreamingDataLoader(
        dataset(uri, endless=True), batch_size=batch, num_workers=workers, len_counts="epoch"
    )
    per_epoch = len(loader)
    assert per_epoch == epoch_batches(uri, workers, batch, 0)
    batches = []
    for framework_epoch in range(3):
        loader.sampler.set_epoch(framework_epoch)
        iterator = iter(loader)
        for _ in range(per_epoch):
            batches.append((loader.dataset.epoch, next(iterator)["id"].tolist()))
    counts = by_epoch(batches)
    for epoch in range(3):
        assert counts[epoch] == Counter(ids_of(dataset(uri, epoch=epoch))), f"epoch {epoch}"
