"""A real ``transformers.Trainer`` around a ``StreamingDataLoader``, shared by
``tests/jobs/test_hf_trainer.py`` and the two-rank script ``tests/procs/hf_rank.py``."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments

from streaming import StreamingDataLoader, StreamingDataset, StreamingTrainerMixin

BATCH = 8
EPOCH_BATCHES = 15  # 120 samples of 121 live rows, 4 splits of 30


def make_loader(uri: str, workers: int, batch: int = BATCH) -> StreamingDataLoader:
    data = StreamingDataset(
        uri, num_splits=4, shuffle_seed=7, columns=["id"], block_rows=4, shuffle_buffer_size=32
    )
    return StreamingDataLoader(data, batch_size=batch, num_workers=workers, timeout=120 if workers else 0)


def reference(uri: str, batches: int) -> list[list[int]]:
    """The first ``batches`` batches of a run never stopped, epoch after epoch, without a Trainer."""
    loader, out, epoch = make_loader(uri, 0), [], 0
    while len(out) < batches:
        loader.set_epoch(epoch)
        out += [batch["id"].tolist() for batch in loader]
        epoch += 1
    return out[:batches]


class Recorder(torch.nn.Module):
    """Records the ids of every batch it trains on."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.seen: list[list[int]] = []

    def forward(self, id: torch.Tensor) -> dict[str, torch.Tensor]:
        self.seen.append(id.tolist())
        return {"loss": self.layer(id.float()[:, None]).pow(2).mean()}


class Crash(Exception):
    """Stands in for a killed job."""


class CrashAfter(TrainerCallback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise Crash(f"crashed after step {self.step}")


def arguments(folder: Path, **options) -> TrainingArguments:
    settings = {
        "output_dir": str(folder),
        "per_device_train_batch_size": BATCH,
        "learning_rate": 1e-6,
        "use_cpu": True,
        "report_to": "none",
        "disable_tqdm": True,
        "logging_strategy": "no",
        "seed": 0,
        **options,
    }
    return TrainingArguments(**settings)


def trainer_class(uri: str, workers: int, *, mixin: bool = True, batch: int = BATCH) -> type[Trainer]:
    """A Trainer whose train loader is a ``StreamingDataLoader`` (with the mixin, or without)."""

    class LoaderTrainer(Trainer):
        def get_train_dataloader(self) -> StreamingDataLoader:
            return make_loader(uri, workers, batch)

    if mixin:
        return type("StreamingLoaderTrainer", (StreamingTrainerMixin, LoaderTrainer), {})
    return LoaderTrainer
