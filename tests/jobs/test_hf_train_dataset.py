"""The Hugging Face ``Trainer`` given ``train_dataset=StreamingDataset(...)`` (no mixin, the
Trainer's own DataLoader): what docs/interop.md says it supports.

With ``dataloader_num_workers=0`` a crashed run resumes exactly: the Trainer skips the
batches already trained by drawing them again from a fresh dataset, which gives the
same batches in the same order. With workers, the Trainer's DataLoader forks them after
the trainer used Lance, and the error says what a Trainer user can do about it.
"""

from __future__ import annotations

import json

import pytest
from transformers import Trainer

from streaming import StreamingDataset

from helpers import make_table
from hf_training import Crash, CrashAfter, Recorder, arguments, reference


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    return make_table(tmp_path_factory.mktemp("hf") / "t.lance", [40, 33, 50], deleted=[5, 77])


def dataset(uri: str) -> StreamingDataset:
    """The dataset ``hf_training.make_loader`` gives its loader, so ``reference`` applies."""
    return StreamingDataset(
        uri, num_splits=4, shuffle_seed=7, columns=["id"], block_rows=4, shuffle_buffer_size=32
    )


def test_train_dataset_without_workers_resumes_exactly(uri, tmp_path):
    """save_steps=10, a crash after step 25 (in the second epoch), resume_from_checkpoint=True:
    the batches trained up to step 20 and those of the resumed run are the batches of a run
    never stopped."""
    crashed = Recorder()
    options = {"max_steps": 30, "save_steps": 10}
    with pytest.raises(Crash):
        Trainer(
            model=crashed,
            args=arguments(tmp_path, **options),
            train_dataset=dataset(uri),
            callbacks=[CrashAfter(25)],
        ).train()
    saved = json.loads((tmp_path / "checkpoint-20" / "trainer_state.json").read_text())
    assert saved["global_step"] == 20
    resumed = Recorder()
    Trainer(model=resumed, args=arguments(tmp_path, **options), train_dataset=dataset(uri)).train(
        resume_from_checkpoint=True
    )
    got, expected = crashed.seen[:20] + resumed.seen, reference(uri, 30)
    for index, (batch, want) in enumerate(zip(got, expected)):
        assert batch == want, f"batch {index}: got {batch}, expected {want}"
    assert len(got) == len(expected) == 30


def test_train_dataset_with_workers_names_the_mixin_and_the_page(uri, tmp_path):
    trainer = Trainer(
        model=Recorder(),
        args=arguments(tmp_path, max_steps=3, dataloader_num_workers=2),
        train_dataset=dataset(uri),
    )
    with pytest.raises(RuntimeError) as error:
        trainer.train()
    message = str(error.value)
    assert "forked from a process that had already used Lance" in message
    assert "StreamingTrainerMixin" in message and "docs/interop.md" in message
    assert "dataloader_num_workers=0" in message
