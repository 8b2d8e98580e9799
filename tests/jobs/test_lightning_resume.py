"""Lightning resumes around epoch boundaries, the way Lightning users checkpoint. (G5, G8)

Lightning restores a loader's state, makes the loader's iterator, and only then sets
the epoch (``sampler.set_epoch``). A checkpoint saved on the last batch of an epoch
(``every_n_train_steps`` dividing the epoch, or a ``limit_train_batches`` epoch) is
therefore restored into an iterator that has not yielded yet and must follow the
epoch Lightning moves to. Each test compares the resumed run with a Lightning run
that was never stopped: the same batches, every row once per epoch.
"""

from __future__ import annotations

import signal
from pathlib import Path

import lightning
import pytest
import torch

from streaming import StreamingDataLoader, StreamingDataset

from helpers import ids_of
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
from mixtures import GLOBAL_BATCH, make_tables, mixture


class Recorder(lightning.LightningModule):
    """Records the ids of every batch it trains on; ``make`` builds its loader."""

    def __init__(self, make) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.seen: list[list[int]] = []
        self.loader = make()

    def train_dataloader(self) -> StreamingDataLoader:
        return self.loader

    def training_step(self, batch, batch_idx):
        self.seen.append([int(i) for i in batch["id"]])
        return self.layer(batch["id"].float()[:, None]).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-6)


def crash_and_resume(make, root: Path, *, save_every: int, crash: int, resume: int, model=None, **options):
    """The batches of an uninterrupted fit, and those of a fit that crashed after step
    ``crash`` and was resumed in a fresh Trainer from its step-``resume`` checkpoint
    (``model(make)`` builds each run's module; default ``Recorder``)."""
    model = model or Recorder
    reference = model(make)
    plain_trainer(root / "reference", enable_checkpointing=False, **options).fit(reference)
    every = lightning.pytorch.callbacks.ModelCheckpoint(
        dirpath=root, every_n_train_steps=save_every, save_top_k=-1, filename="{step}"
    )
    crashed = model(make)
    with pytest.raises(Crash):
        plain_trainer(root, callbacks=[every, CrashAfter(crash)], **options).fit(crashed)
    resumed = model(make)
    checkpoint = root / f"step={resume}.ckpt"
    assert checkpoint.is_file(), sorted(path.name for path in root.iterdir())
    plain_trainer(root, enable_checkpointing=False, **options).fit(resumed, ckpt_path=checkpoint)
    crash_and_resume.last = (reference, resumed)  # the modules, for checks beyond the batches
    return reference.seen, crashed.seen[:resume] + resumed.seen


EPOCH_BATCHES = {0: 15, 2: 15}  # the same batches for every worker count


def table_loader(uri: str, workers: int, **options):
    def make() -> StreamingDataLoader:
        timeout = 120 if workers else 0
        return StreamingDataLoader(
            dataset(uri), batch_size=BATCH, num_workers=workers, timeout=timeout, **options
        )

    return make


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    from helpers import make_table

    # 121 live rows: L = 30, 15 batches of 8 an epoch (the interop tests' table)
    return make_table(tmp_path_factory.mktemp("lightning-resume") / "t.lance", [40, 33, 50], deleted=[5, 77])


def every_row_once_per_epoch(uri: str, trained: list[list[int]], epochs: int) -> None:
    planned = sorted(i for epoch in range(epochs) for i in ids_of(dataset(uri, epoch=epoch)))
    assert sorted(i for batch in trained for i in batch) == planned, "rows trained twice or never"


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_from_the_last_batch_of_an_epoch_trains_the_next_epoch(uri, workers, tmp_path):
    """Saved on the last batch of epoch 0 (step 15, with or without workers): the
    resumed fit trains all of epoch 1."""
    make = table_loader(uri, workers, len_counts="epoch")
    last = EPOCH_BATCHES[workers]
    reference, resumed = crash_and_resume(
        make, tmp_path, save_every=last, crash=last + 2, resume=last, max_epochs=2
    )
    assert len(reference) == 2 * last
    assert resumed == reference
    every_row_once_per_epoch(uri, resumed, epochs=2)


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_from_the_last_batch_of_a_limited_epoch(uri, workers, tmp_path):
    """limit_train_batches=5, saved at step 5 (the limited epoch's last batch): the resumed
    fit trains epoch 1's first five batches, as the uninterrupted fit does."""
    make = table_loader(uri, workers, len_counts="epoch")
    reference, resumed = crash_and_resume(
        make, tmp_path, save_every=5, crash=7, resume=5, max_epochs=2, limit_train_batches=5
    )
    assert len(reference) == 10
    assert resumed == reference


@pytest.mark.parametrize("workers", [0, 2])
def test_default_len_counts_resumes_mid_epoch_without_losing_rows(uri, workers, tmp_path):
    """No len_counts given: a fit resumed at step 4 still trains every row of every epoch."""
    make = table_loader(uri, workers)
    reference, resumed = crash_and_resume(make, tmp_path, save_every=4, crash=6, resume=4, max_epochs=3)
    assert len(reference) == 3 * EPOCH_BATCHES[workers]
    assert resumed == reference
    every_row_once_per_epoch(uri, resumed, epochs=3)


def test_default_len_counts_resume_from_an_epoch_end(uri, tmp_path):
    """No len_counts given, saved on the last batch of epoch 0."""
    make = table_loader(uri, 0)
    reference, resumed = crash_and_resume(make, tmp_path, save_every=5, crash=17, resume=15, max_epochs=2)
    assert resumed == reference and len(resumed) == 30


@pytest.fixture(scope="module")
def uris(tmp_path_factory) -> dict[str, str]:
    return make_tables(tmp_path_factory.mktemp("mixture-resume"))


def test_mixture_resume_from_the_last_batch_of_a_limited_epoch(uris, tmp_path):
    """A 70/30 mixture stopping at its first exhausted source, k = 2, four batches an
    epoch: saved at step 8 (the second epoch's last), crash after 10, resume."""

    def make() -> StreamingDataLoader:
        data = mixture(uris, stop="first_exhausted")
        return StreamingDataLoader(data, batch_size=GLOBAL_BATCH, num_workers=2, timeout=120)

    reference, resumed = crash_and_resume(
        make, tmp_path, save_every=4, crash=10, resume=8, max_epochs=3, limit_train_batches=4
    )
    assert len(reference) == 12
    assert resumed == reference
    assert all(len(batch) == GLOBAL_BATCH for batch in resumed)


class Validating(RecordsValidation, Recorder):
    """Recorder plus an ``evaluation=True`` validation loader; records every pass."""

    def __init__(self, make, make_val) -> None:
        super().__init__(make)
        self.val_loader = make_val()
        self.passes = []


def test_persistent_workers_train_and_validate_then_resume_exactly(uri, tmp_path):
    """persistent_workers=True on a train loader and an evaluation=True val loader (k=2):
    a fit validated every 5 steps, crashed after step 9 and resumed from step 7 trains
    the batches of the uninterrupted fit, every row once per epoch, and every full
    validation pass sees every row."""
    make = table_loader(uri, 2, persistent_workers=True)

    def make_val() -> StreamingDataLoader:
        return validation_loader(uri, 2, persistent_workers=True)

    reference, resumed = crash_and_resume(
        make,
        tmp_path,
        save_every=7,
        crash=9,
        resume=7,
        model=lambda make: Validating(make, make_val),
        max_epochs=2,
        val_check_interval=5,
    )
    assert resumed == reference
    every_row_once_per_epoch(uri, resumed, epochs=2)
    every_row = sorted(ids_of(StreamingDataset(uri, num_splits=NUM_SPLITS, shuffle=False)))
    for model in crash_and_resume.last:
        full = [sorted(seen) for seen in model.passes if len(seen) > 2 * BATCH]
        assert full and all(seen == every_row for seen in full), "a validation pass missed or repeated rows"


class InterruptedAt(Recorder):
    """A Ctrl-C (``KeyboardInterrupt``, as Python's SIGINT handler raises it) inside
    ``training_step`` of global step ``at``, before that batch is trained."""

    def __init__(self, make, at: int) -> None:
        super().__init__(make)
        self.at, self.interrupted = at, None

    def training_step(self, batch, batch_idx):
        if self.global_step == self.at:
            self.interrupted = [int(i) for i in batch["id"]]
            raise KeyboardInterrupt
        return super().training_step(batch, batch_idx)


def test_ctrl_c_inside_training_step_checkpoints_after_the_batch_it_was_given(uri, tmp_path):
    """``OnExceptionCheckpoint`` saves the loader's state after the batch ``next()``
    handed over (it was delivered), so the resumed fit starts after it: that one batch
    is never trained, every other row once (docs/interop.md)."""
    make = table_loader(uri, 0)
    crashed = InterruptedAt(make, at=6)
    on_exception = lightning.pytorch.callbacks.OnExceptionCheckpoint(dirpath=tmp_path)
    handler = signal.getsignal(signal.SIGINT)  # Lightning ignores SIGINT once interrupted
    try:
        with pytest.raises(SystemExit):
            plain_trainer(tmp_path / "run", max_epochs=1, callbacks=[on_exception]).fit(crashed)
    finally:
        signal.signal(signal.SIGINT, handler)
    assert len(crashed.seen) == 6 and crashed.interrupted
    resumed = Recorder(make)
    checkpoint = tmp_path / "on_exception.ckpt"
    resuming = plain_trainer(tmp_path / "run", max_epochs=1, enable_checkpointing=False)
    resuming.fit(resumed, ckpt_path=checkpoint)
    assert crashed.interrupted not in resumed.seen, "the interrupted batch was delivered: not given again"
    trained = [*crashed.seen, crashed.interrupted, *resumed.seen]
    assert len(trained) == EPOCH_BATCHES[0]
    every_row_once_per_epoch(uri, trained, epochs=1)


LEN_WARNING = "Your `IterableDataset` has `__len__` defined"
LEN_FILTER = f'warnings.filterwarnings("ignore", message="{LEN_WARNING}")'
"""The line docs/interop.md gives: Lightning has no supported way to hear that a ``len()`` is exact."""


def fit_warnings(uri: str, root: Path, *, filtered: bool) -> list[str]:
    """Messages of the warnings a two-step fit on the loader raises (the documented filter or not)."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if filtered:
            exec(LEN_FILTER, {"warnings": warnings})
        plain_trainer(root, max_steps=2, enable_checkpointing=False).fit(Recorder(table_loader(uri, 0)))
    return [str(warning.message) for warning in caught]


def test_the_documented_filter_silences_lightnings_len_warning(uri, tmp_path):
    """Lightning warns on every fit that an IterableDataset's __len__ may be inaccurate (ours is
    exact). The filter docs/interop.md gives silences it; if Lightning stops warning, this fails
    so that the docs drop the line."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "interop.md").read_text()
    assert LEN_FILTER in page, "docs/interop.md no longer gives the filter this test checks"
    assert any(message.startswith(LEN_WARNING) for message in fit_warnings(uri, tmp_path, filtered=False))
    assert not any(LEN_WARNING in message for message in fit_warnings(uri, tmp_path, filtered=True))
