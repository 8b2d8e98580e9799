"""A mixture as a Lightning training loader: max_steps, a crash, a resume. (G17)"""

from __future__ import annotations

import lightning
import pytest
import torch

from streaming import StreamingDataLoader

from lightning_training import Crash, CrashAfter, plain_trainer
from mixtures import GLOBAL_BATCH, ids, make_tables, mixture


@pytest.fixture(scope="module")
def uris(tmp_path_factory) -> dict[str, str]:
    return make_tables(tmp_path_factory.mktemp("mixlightning"))


class Mixed(lightning.LightningModule):
    """Records the ids of every batch it trains on; the loader is an endless mixture."""

    def __init__(self, uris: dict[str, str], workers: int) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.seen: list[list[int]] = []
        self.loader = StreamingDataLoader(
            mixture(uris),
            batch_size=GLOBAL_BATCH,
            num_workers=workers,
            timeout=120 if workers else 0,
            len_counts="epoch",  # so Lightning fetches no batch ahead
        )

    def train_dataloader(self) -> StreamingDataLoader:
        return self.loader

    def training_step(self, batch, batch_idx):
        self.seen.append(ids(batch))
        return self.layer(batch["id"].float()[:, None]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-6)


@pytest.mark.parametrize("workers", [0, 2])
def test_lightning_max_steps_on_a_mixture_resumes_exactly(uris, workers, tmp_path):
    """max_steps=20 crosses source b's epoch; a crash after step 14 resumed from the
    step-12 checkpoint gives the batches of the uninterrupted run."""
    reference = Mixed(uris, workers)
    plain_trainer(tmp_path / "reference", max_steps=20, enable_checkpointing=False).fit(reference)
    assert len(reference.seen) == 20
    every = lightning.pytorch.callbacks.ModelCheckpoint(
        dirpath=tmp_path, every_n_train_steps=4, save_top_k=-1, filename="{step}"
    )
    crashed = Mixed(uris, workers)
    with pytest.raises(Crash):
        plain_trainer(tmp_path, max_steps=20, callbacks=[every, CrashAfter(14)]).fit(crashed)
    resumed = Mixed(uris, workers)
    checkpoint = tmp_path / "step=12.ckpt"
    plain_trainer(tmp_path, max_steps=20, enable_checkpointing=False).fit(resumed, ckpt_path=checkpoint)
    assert crashed.seen[:12] + resumed.seen == reference.seen
