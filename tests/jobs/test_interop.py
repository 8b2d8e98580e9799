"""Interop with real frameworks: torch.distributed.checkpoint and PyTorch Lightning.

Each test stops a run part way, saves through the framework, restores into fresh
objects through the framework and checks that the batches after the resume are
exactly those an uninterrupted ``StreamingDataLoader`` run still had to deliver.
Stops fall on logical step boundaries (a multiple of the worker count), so nothing
is replayed (see docs/workers.md for what a stop between boundaries replays).
Worker processes use the loader's default start method (forkserver, else spawn).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import lightning
import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing
from torch.distributed.checkpoint.stateful import Stateful

from streaming import StreamingDataLoader, StreamingDataset, gather_state_dict

from helpers import ids_of, make_table
from lightning_training import (
    BATCH,
    NUM_SPLITS,
    Crash,
    CrashAfter,
    RecordsValidation,
    dataset,
    plain_trainer,
    validation_loader,
)


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    """121 live rows: L = 30, one surplus row, 15 batches of 8 per epoch."""
    return make_table(tmp_path_factory.mktemp("interop") / "t.lance", [40, 33, 50], deleted=[5, 77])


def loader(uri: str, workers: int) -> StreamingDataLoader:
    timeout = 120 if workers else 0
    return StreamingDataLoader(dataset(uri), batch_size=BATCH, num_workers=workers, timeout=timeout)


def batch_ids(batches) -> list[list[int]]:
    return [batch["id"].tolist() for batch in batches]


def uninterrupted(uri: str, workers: int, *, epochs: int = 1) -> list[list[int]]:
    """Batches of a run that is never stopped, without any framework."""
    run, batches = loader(uri, workers), []
    for epoch in range(epochs):
        run.set_epoch(epoch)
        batches += batch_ids(run)
    return batches


def assert_exactly_the_rest(before: list[list[int]], after: list[list[int]], reference: list[list[int]]):
    """``after`` continues ``before`` with exactly the batches the reference run had left."""
    assert before == reference[: len(before)], "the run before the stop differs from the reference"
    for index, (got, want) in enumerate(zip(after, reference[len(before) :])):
        assert got == want, f"batch {len(before) + index} after the resume: got {got}, expected {want}"
    assert len(before) + len(after) == len(reference), (
        f"{len(before)} batches before the stop and {len(after)} after it; the run has {len(reference)}"
    )


# -- torch.distributed.checkpoint ------------------------------------------------


def test_the_loader_is_a_dcp_stateful(uri):
    assert isinstance(loader(uri, 0), Stateful)
    assert isinstance(dataset(uri), Stateful)


@pytest.mark.parametrize("workers", [0, 2])
def test_dcp_save_and_load_resume_exactly(uri, workers, tmp_path):
    """dcp.save the loader with a model part way; dcp.load into fresh objects; the rest follows."""
    reference = uninterrupted(uri, workers)
    assert sorted(i for batch in reference for i in batch) == sorted(ids_of(dataset(uri)))
    stop = 4  # a logical step boundary for k = 2 as well

    first, model = loader(uri, workers), torch.nn.Linear(4, 2)
    iterator = iter(first)
    before = batch_ids(next(iterator) for _ in range(stop))
    dcp.save({"model": model.state_dict(), "loader": first}, checkpoint_id=tmp_path, no_dist=True)
    del iterator

    resumed, fresh_model = loader(uri, workers), torch.nn.Linear(4, 2)
    target = {"model": fresh_model.state_dict(), "loader": resumed}
    dcp.load(target, checkpoint_id=tmp_path, no_dist=True)
    fresh_model.load_state_dict(target["model"])

    assert resumed.state_dict() == first.state_dict()
    assert torch.equal(fresh_model.weight, model.weight)
    assert len(resumed) == len(reference) - stop
    assert_exactly_the_rest(before, batch_ids(resumed), reference)


def test_dcp_keeps_every_state_field_and_type(uri, tmp_path):
    """Nested dicts, int lists, None and strings come back as they were saved."""
    first = loader(uri, 0)
    iterator = iter(first)
    for _ in range(3):
        next(iterator)
    saved = first.state_dict()
    dcp.save({"loader": first}, checkpoint_id=tmp_path, no_dist=True)
    del iterator
    target = {"loader": dataset(uri).state_dict()}  # a plain dict of the same shape as a template
    dcp.load(target, checkpoint_id=tmp_path, no_dist=True)
    assert target["loader"] == saved
    assert target["loader"]["filter"] is None
    assert all(type(count) is int for count in target["loader"]["samples_consumed_per_split"])


class MergedState:
    """A DCP Stateful whose state is the merged state of every rank (docs/interop.md)."""

    def __init__(self, loader: StreamingDataLoader) -> None:
        self.loader = loader

    def state_dict(self) -> dict:
        return gather_state_dict(self.loader)

    def load_state_dict(self, state: dict) -> None:
        self.loader.load_state_dict(state)


def dcp_rank(rank: int, uri: str, folder: str) -> None:
    """One rank of a two-rank gloo job: 3 batches, then dcp.save of the merged state."""
    dist.init_process_group("gloo", init_method=f"file://{folder}/store", rank=rank, world_size=2)
    try:
        data = StreamingDataset(uri, num_splits=NUM_SPLITS, shuffle_seed=3, rank=rank, world_size=2)
        run = StreamingDataLoader(data, batch_size=4)  # 2 cycles of the rank's 2 splits
        iterator = iter(run)
        delivered = batch_ids(next(iterator) for _ in range(3))
        dcp.save({"loader": MergedState(run)}, checkpoint_id=f"{folder}/checkpoint")
        Path(folder, f"rank{rank}.json").write_text(json.dumps(delivered))
    finally:
        dist.destroy_process_group()


def test_dcp_merged_state_of_two_ranks_resumes_on_one(uri, tmp_path):
    """Two real gloo ranks (spawned) save the merged state with DCP; one rank resumes it."""
    job = torch.multiprocessing.spawn(dcp_rank, args=(uri, str(tmp_path)), nprocs=2, join=False)
    deadline = time.monotonic() + 180
    while not job.join(timeout=5):
        if time.monotonic() > deadline:
            for process in job.processes:
                process.kill()
            pytest.fail("the two-rank job did not finish within 180 s")
    logs = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    delivered = [i for batches in logs for batch in batches for i in batch]

    target = {"loader": StreamingDataset(uri, num_splits=NUM_SPLITS, shuffle_seed=3).state_dict()}
    dcp.load(target, checkpoint_id=tmp_path / "checkpoint", no_dist=True)
    assert target["loader"]["owned_splits"] == list(range(NUM_SPLITS)), "not a merged state"
    resumed = StreamingDataset(uri, num_splits=NUM_SPLITS, shuffle_seed=3)  # world_size 1 now
    resumed.load_state_dict(target["loader"])
    rest = ids_of(resumed)
    planned = ids_of(StreamingDataset(uri, num_splits=NUM_SPLITS, shuffle_seed=3))
    assert len(delivered) == 2 * 3 * 4
    assert sorted(delivered + rest) == sorted(planned), "lost or repeated samples"


# -- PyTorch Lightning -----------------------------------------------------------
#
# The recipe of docs/interop.md: one loader with len_counts="epoch", built once.


class Model(lightning.LightningModule):
    """A tiny model whose training_step records the ids of every batch it trains on."""

    def __init__(self, uri: str, workers: int) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.seen: list[list[int]] = []
        timeout = 120 if workers else 0
        self.loader = StreamingDataLoader(
            dataset(uri), batch_size=BATCH, num_workers=workers, timeout=timeout, len_counts="epoch"
        )

    def train_dataloader(self) -> StreamingDataLoader:
        return self.loader

    def training_step(self, batch, batch_idx):
        self.seen.append(batch["id"].tolist())
        return self.layer(batch["id"].float()[:, None]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-6)


def trainer(root: Path, epochs: int, callbacks: list[lightning.Callback]) -> lightning.Trainer:
    return lightning.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        devices=1,
        default_root_dir=root,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=bool(callbacks),
        callbacks=callbacks,
    )


@pytest.mark.parametrize(
    ("workers", "epochs", "saved", "crash"),
    [(0, 1, 4, 6), (2, 1, 4, 6), (0, 2, 20, 22)],  # 15 batches an epoch: step 20 is in the second
    ids=["no-workers", "two-workers", "second-epoch"],
)
def test_lightning_resumes_mid_epoch_exactly(uri, workers, epochs, saved, crash, tmp_path):
    """Checkpoint every 4 steps, crash after step ``crash``, resume from ``saved`` in a fresh Trainer."""
    reference = uninterrupted(uri, workers, epochs=epochs)
    every = lightning.pytorch.callbacks.ModelCheckpoint(
        dirpath=tmp_path, every_n_train_steps=4, save_top_k=-1, filename="{step}"
    )
    crashed = Model(uri, workers)
    with pytest.raises(Crash):
        trainer(tmp_path, epochs, [every, CrashAfter(crash)]).fit(crashed)
    assert len(crashed.seen) == crash
    checkpoint = tmp_path / f"step={saved}.ckpt"
    assert checkpoint.is_file(), sorted(path.name for path in tmp_path.iterdir())

    resumed = Model(uri, workers)
    trainer(tmp_path, epochs, []).fit(resumed, ckpt_path=checkpoint)
    assert_exactly_the_rest(crashed.seen[:saved], resumed.seen, reference)
    trained = sorted(i for batch in crashed.seen[:saved] + resumed.seen for i in batch)
    planned = sorted(i for epoch in range(epochs) for i in ids_of(dataset(uri, epoch=epoch)))
    assert trained == planned, "some planned rows were trained twice or never"


# -- Lightning loops that leave epochs early, re-iterate and validate --------------


@pytest.mark.parametrize("workers", [0, 2])
def test_lightning_limit_train_batches_over_three_epochs(uri, workers, tmp_path):
    """Every epoch is left early after 5 batches; each starts its own plan from the top."""
    model = Model(uri, workers)
    plain_trainer(tmp_path, max_epochs=3, limit_train_batches=5, enable_checkpointing=False).fit(model)
    assert len(model.seen) == 15
    for epoch in range(3):
        reference = uninterrupted_epoch(uri, workers, epoch)
        assert model.seen[5 * epoch : 5 * epoch + 5] == reference[:5], f"epoch {epoch}"


def uninterrupted_epoch(uri: str, workers: int, epoch: int) -> list[list[int]]:
    run = loader(uri, workers)
    run.set_epoch(epoch)
    return batch_ids(run)


def test_lightning_resumes_from_an_odd_step_with_two_workers(uri, tmp_path):
    """k = 2, checkpoint at step 3 (each batch holds both workers' shares): the resumed
    fit trains exactly the batches after it."""
    reference = uninterrupted(uri, 2)
    every = lightning.pytorch.callbacks.ModelCheckpoint(
        dirpath=tmp_path, every_n_train_steps=3, save_top_k=-1, filename="{step}"
    )
    crashed = Model(uri, 2)
    with pytest.raises(Crash):
        trainer(tmp_path, 1, [every, CrashAfter(5)]).fit(crashed)
    resumed = Model(uri, 2)
    trainer(tmp_path, 1, []).fit(resumed, ckpt_path=tmp_path / "step=3.ckpt")
    assert resumed.seen == reference[3:], "exactly the batches after the checkpoint"
    trained = Counter(i for batch in crashed.seen[:3] + resumed.seen for i in batch)
    assert trained == Counter(ids_of(dataset(uri))), "nothing lost, nothing repeated"


class Validated(RecordsValidation, Model):
    """Model plus an evaluation loader; records every validation pass."""

    def __init__(self, uri: str, workers: int) -> None:
        super().__init__(uri, workers)
        self.val_loader = validation_loader(uri, workers)
        self.passes = []


@pytest.mark.parametrize("workers", [0, 2])
def test_lightning_validation_loader_with_val_check_interval(uri, workers, tmp_path):
    """A sanity check (2 batches), then a full pass every 5 training steps."""
    model = Validated(uri, workers)
    plain_trainer(tmp_path, max_epochs=1, val_check_interval=5, enable_checkpointing=False).fit(model)
    every_row = sorted(ids_of(StreamingDataset(uri, num_splits=NUM_SPLITS, shuffle=False)))
    assert len(model.passes[0]) == 2 * BATCH, "the sanity check"
    assert len(model.passes) == 1 + 3, "passes after steps 5, 10 and 15"
    for index, seen in enumerate(model.passes[1:], start=1):
        assert sorted(seen) == every_row, f"validation pass {index}"


class Endless(Model):
    """The same model on an endless loader: Lightning counts steps, never epochs."""

    def __init__(self, uri: str, workers: int) -> None:
        super().__init__(uri, workers)
        data = StreamingDataset(
            uri, num_splits=NUM_SPLITS, shuffle_seed=3, block_rows=4, shuffle_buffer_size=32, endless=True
        )
        timeout = 120 if workers else 0
        self.loader = StreamingDataLoader(
            data, batch_size=BATCH, num_workers=workers, timeout=timeout, len_counts="epoch"
        )


@pytest.mark.parametrize("workers", [0, 2])
def test_lightning_max_steps_across_epochs_of_an_endless_loader_resumes_exactly(uri, workers, tmp_path):
    """G15: ``max_steps=40`` runs through more than two epochs (15 batches with k=0, 16
    with k=2; ``len_counts="epoch"``, so Lightning fetches no batch ahead); a crash
    after step 22 resumed from the step-20 checkpoint (in the second epoch) gives
    the batches of the uninterrupted run."""

    reference = Endless(uri, workers)
    plain_trainer(tmp_path / "reference", max_steps=40, enable_checkpointing=False).fit(reference)
    assert len(reference.seen) == 40
    per_epoch = len(StreamingDataLoader(dataset(uri), batch_size=BATCH, num_workers=workers))
    for epoch in (0, 1):
        trained = reference.seen[epoch * per_epoch : (epoch + 1) * per_epoch]
        assert sorted(i for batch in trained for i in batch) == sorted(ids_of(dataset(uri, epoch=epoch)))
    every = lightning.pytorch.callbacks.ModelCheckpoint(
        dirpath=tmp_path, every_n_train_steps=4, save_top_k=-1, filename="{step}"
    )
    crashed = Endless(uri, workers)
    with pytest.raises(Crash):
        plain_trainer(tmp_path, max_steps=40, callbacks=[every, CrashAfter(22)]).fit(crashed)
    resumed = Endless(uri, workers)
    plain_trainer(tmp_path, max_steps=40, enable_checkpointing=False).fit(
        resumed, ckpt_path=tmp_path / "step=20.ckpt"
    )
    assert crashed.seen[:20] + resumed.seen == reference.seen
