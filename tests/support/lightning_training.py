"""The Lightning pieces the framework tests share: a table's dataset and batch, a crash
after a given step, a plain CPU trainer and an evaluation loader whose passes are recorded."""

from __future__ import annotations

from pathlib import Path

import lightning

from streaming import StreamingDataLoader, StreamingDataset

NUM_SPLITS = 4
BATCH = 8  # a multiple of the splits an iterator owns (4 with k = 0, 2 with k = 2)


def dataset(uri: str, *, epoch: int = 0) -> StreamingDataset:
    return StreamingDataset(
        uri, num_splits=NUM_SPLITS, shuffle_seed=3, epoch=epoch, block_rows=4, shuffle_buffer_size=32
    )


class Crash(Exception):
    """Stands in for a killed job."""


class CrashAfter(lightning.Callback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            raise Crash(f"crashed after step {self.step}")


def plain_trainer(root: Path, **kwargs) -> lightning.Trainer:
    kwargs.setdefault("logger", False)
    return lightning.Trainer(
        accelerator="cpu",
        devices=1,
        default_root_dir=root,
        enable_progress_bar=False,
        enable_model_summary=False,
        **kwargs,
    )


def validation_loader(uri: str, workers: int, **options) -> StreamingDataLoader:
    """An ``evaluation=True`` loader over every row, unshuffled."""
    evaluation = StreamingDataset(uri, num_splits=NUM_SPLITS, shuffle=False, evaluation=True)
    return StreamingDataLoader(
        evaluation, batch_size=BATCH, num_workers=workers, timeout=120 if workers else 0, **options
    )


class RecordsValidation:
    """Mixin for a LightningModule with ``val_loader``: records the ids of every validation pass."""

    val_loader: StreamingDataLoader
    passes: list[list[int]]

    def val_dataloader(self) -> StreamingDataLoader:
        return self.val_loader

    def on_validation_epoch_start(self) -> None:
        self.passes.append([])

    def validation_step(self, batch, batch_idx):
        self.passes[-1] += [int(i) for i in batch["id"]]
