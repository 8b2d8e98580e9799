"""The Hugging Face ``Trainer`` resumes a ``StreamingDataLoader`` exactly. (G5, G6)

A real ``transformers.Trainer`` (CPU, a tiny ``nn.Module`` whose forward returns
``{"loss": ...}``, nothing downloaded) trains with ``max_steps`` and ``save_steps``,
crashes, and a fresh Trainer resumes with ``resume_from_checkpoint=True``. The
batches the crashed run trained up to its last checkpoint followed by those of the
resumed run are exactly the batches of a run that was never stopped: every row of
every epoch once. Worker processes use the loader's default start method.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import Trainer

from streaming import (
    StreamingDataLoader,
    StreamingTrainerCallback,
    StreamingTrainerMixin,
)

from helpers import make_table
from hf_training import (
    EPOCH_BATCHES,
    Crash,
    CrashAfter,
    Recorder,
    arguments,
    reference,
    trainer_class,
)


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    return make_table(tmp_path_factory.mktemp("hf") / "t.lance", [40, 33, 50], deleted=[5, 77])


def crash_and_resume(
    uri: str, folder: Path, *, workers: int, crash: int, first=None, then=None, callbacks=(), **options
):
    """Batches of a Trainer run that crashed after step ``crash``, and of the run resumed
    from its last checkpoint; returns (crashed, resumed, the step resumed from). ``first``
    and ``then`` are the two runs' Trainer classes (default: with the mixin); both runs
    get new instances of the ``callbacks`` classes."""
    first = first or trainer_class(uri, workers)
    then = then or first
    crashed = Recorder()
    extra = [*(callback() for callback in callbacks), CrashAfter(crash)]
    with pytest.raises(Crash):
        first(model=crashed, args=arguments(folder, **options), callbacks=extra).train()
    saved = json.loads(max(folder.glob("checkpoint-*/trainer_state.json"), key=_step).read_text())
    resumed = Recorder()
    extra = [callback() for callback in callbacks]
    then(model=resumed, args=arguments(folder, **options), callbacks=extra).train(resume_from_checkpoint=True)
    return crashed.seen, resumed.seen, saved["global_step"]


def _step(path: Path) -> int:
    return int(path.parent.name.rsplit("-", 1)[1])


def assert_exact(crashed, resumed, *, trained: int, expected: list[list[int]]) -> None:
    """The crashed run's first ``trained`` batches, then the resumed run's, are ``expected``."""
    got = crashed[:trained] + resumed
    for index, (batch, want) in enumerate(zip(got, expected)):
        assert batch == want, f"batch {index} (resumed after {trained}): got {batch}, expected {want}"
    assert len(got) == len(expected), f"{trained} + {len(resumed)} batches trained, {len(expected)} planned"


@pytest.mark.parametrize("workers", [0, 2])
def test_crash_at_step_25_resumes_from_step_20_exactly(uri, workers, tmp_path):
    """save_steps=10, a crash after step 25 (in the second epoch), resume_from_checkpoint=True:
    the resumed run trains the last 10 batches, nothing lost or repeated in either epoch."""
    crashed, resumed, step = crash_and_resume(
        uri, tmp_path, workers=workers, crash=25, max_steps=30, save_steps=10
    )
    assert step == 20
    assert_exact(crashed, resumed, trained=20, expected=reference(uri, 30))


def test_gradient_accumulation_resumes_exactly(uri, tmp_path):
    """gradient_accumulation_steps=2 (15 batches: 8 steps an epoch, the last of one batch),
    k = 2, saved at step 10 (four batches into the second epoch)."""
    crashed, resumed, step = crash_and_resume(
        uri, tmp_path, workers=2, crash=13, max_steps=16, save_steps=5, gradient_accumulation_steps=2
    )
    assert step == 10
    assert_exact(crashed, resumed, trained=EPOCH_BATCHES + 4, expected=reference(uri, 2 * EPOCH_BATCHES))


@pytest.mark.parametrize("with_mixin", [True, False], ids=["mixin", "callback-alone"])
def test_ignore_data_skip_resumes_exactly(uri, with_mixin, tmp_path):
    """ignore_data_skip=True: the Trainer skips nothing and the loader's own position decides,
    with the mixin or with only its callback in a plain Trainer."""
    trainer = trainer_class(uri, 0, mixin=with_mixin)
    crashed, resumed, step = crash_and_resume(
        uri,
        tmp_path,
        workers=0,
        crash=25,
        first=trainer,
        callbacks=() if with_mixin else (StreamingTrainerCallback,),
        max_steps=30,
        save_steps=10,
        ignore_data_skip=True,
    )
    assert step == 20
    assert_exact(crashed, resumed, trained=20, expected=reference(uri, 30))


def test_a_trainer_without_the_mixin_fails_loudly_on_resume(uri, tmp_path):
    """Without the mixin the Trainer rebuilds the loader with accelerate's skip_first_batches:
    a TypeError that names the fix, never an AttributeError or batches lost."""
    plain = trainer_class(uri, 0, mixin=False)
    with pytest.raises(TypeError, match=r"mix streaming\.StreamingTrainerMixin into your Trainer"):
        crash_and_resume(uri, tmp_path, workers=0, crash=12, first=plain, max_steps=15, save_steps=10)


def test_a_checkpoint_saved_without_the_mixin_is_refused(uri, tmp_path):
    """The first run had no mixin, so its checkpoint holds no loader state: refused, not guessed."""
    plain, mixed = trainer_class(uri, 0, mixin=False), trainer_class(uri, 0)
    with pytest.raises(ValueError, match="at global step 10 holds no StreamingDataLoader state"):
        crash_and_resume(
            uri, tmp_path, workers=0, crash=12, first=plain, then=mixed, max_steps=15, save_steps=10
        )


def test_a_changed_batch_size_is_refused_on_resume(uri, tmp_path):
    """Saved 5 batches of 8 into the second epoch, resumed with batches of 4: the Trainer counts
    20 batches into its (longer) epoch, the loader stands 10 into its own: refused."""
    eights, fours = trainer_class(uri, 0), trainer_class(uri, 0, batch=4)
    with pytest.raises(ValueError, match=r"resumes 20 batches into the epoch but .* stands 10 batches of 4"):
        crash_and_resume(
            uri, tmp_path, workers=0, crash=22, first=eights, then=fours, max_steps=30, save_steps=10
        )


def test_an_older_transformers_asks_for_ignore_data_skip(uri, tmp_path, monkeypatch):
    """A Trainer without get_resumed_dataloader (before 5.25) would skip by rebuilding the
    loader: the resume stops at once and names ignore_data_skip=True."""
    monkeypatch.delattr(Trainer, "get_resumed_dataloader")
    with pytest.raises(RuntimeError, match=r"pass TrainingArguments\(ignore_data_skip=True\)"):
        crash_and_resume(uri, tmp_path, workers=0, crash=12, max_steps=15, save_steps=10)


def test_two_processes_resume_exactly(uri, tmp_path):
    """Two gloo processes (as torchrun starts them), batches of 4, a crash after step 12,
    resumed from step 10: the checkpoint holds the main process's state, both ranks load
    it, and the two runs train every planned row of the epoch once."""
    from launching import PROCS, launch_script

    script = PROCS / "hf_rank.py"
    codes, outputs = launch_script(script, tmp_path, 2, f"--uri={uri}")
    assert codes == [0, 0], "\n".join(outputs)
    trained: list[int] = []
    for run, count, kept in (("first", 12, 10), ("second", 5, None)):
        for rank in range(2):
            batches = json.loads((tmp_path / f"{run}-{rank}.json").read_text())
            assert len(batches) == count, (run, rank, len(batches))
            trained += [i for batch in batches[:kept] for i in batch]
    planned = [i for batch in reference(uri, EPOCH_BATCHES) for i in batch]
    assert sorted(trained) == sorted(planned), "rows trained twice or never"


def test_restored_callback_states_resume_exactly(uri, tmp_path):
    """restore_callback_states_from_checkpoint=True: the Trainer replaces the callback with
    one rebuilt from the checkpoint, which still finds and restores the loader."""
    crashed, resumed, step = crash_and_resume(
        uri,
        tmp_path,
        workers=0,
        crash=12,
        max_steps=15,
        save_steps=10,
        restore_callback_states_from_checkpoint=True,
    )
    assert step == 10
    assert_exact(crashed, resumed, trained=10, expected=reference(uri, 15))


def test_a_mixture_resumes_exactly(tmp_path):
    """A 70/30 StreamingMixture's loader (stop at the first exhausted source): a crash after
    step 8 resumed from step 6, in the middle of its first epoch."""
    from mixtures import GLOBAL_BATCH, make_tables, mixture

    uris = make_tables(tmp_path / "tables")

    def make() -> StreamingDataLoader:
        return StreamingDataLoader(
            mixture(uris, stop="first_exhausted", columns=["id"]), batch_size=GLOBAL_BATCH
        )

    class MixtureTrainer(StreamingTrainerMixin, Trainer):
        def get_train_dataloader(self) -> StreamingDataLoader:
            return make()

    plain, epochs = make(), []
    for epoch in range(2):
        plain.set_epoch(epoch)
        epochs.append([batch["id"].tolist() for batch in plain])
    crashed, resumed, step = crash_and_resume(
        "", tmp_path / "run", workers=0, crash=8, first=MixtureTrainer, max_steps=10, save_steps=3
    )
    assert step == 6 < len(epochs[0]), "the checkpoint is not in the middle of the first epoch"
    assert_exact(crashed, resumed, trained=6, expected=(epochs[0] + epochs[1])[:10])


def test_the_package_works_without_transformers():
    """Without transformers the package imports; only the Trainer names ask for it, by name."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['transformers'] = None\n"
        "from streaming import StreamingDataLoader, StreamingDataset\n"
        "try:\n"
        "    from streaming import StreamingTrainerMixin\n"
        "except ImportError as error:\n"
        "    print(error)\n"
    )
    command = [sys.executable, "-c", code]
    out = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    assert "need Hugging Face transformers; install it with `pip install transformers`" in out.stdout
