"""Hugging Face Accelerate: ``prepare`` keeps the loader; ``save_state``/``load_state`` resume exactly.

Accelerate rebuilds every DataLoader it prepares around the dataset it finds, which
would iterate a ``StreamingDataset`` as a plain DataLoader. The loader says it needs
no rebuilding, so ``prepare`` returns it as it is and ``save_state`` saves its
``state_dict()``. Real Accelerate on CPU, real worker processes (the loader's default
start method), with ``dispatch_batches`` both ways.
"""

from __future__ import annotations

import pytest
import torch
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.utils import set_seed

from streaming import StreamingDataset
from streaming.loader.frameworks import ACCELERATE_FLAGS

from accelerate_training import make_loader, train
from helpers import make_table


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    """121 live rows over three fragments: L = 30 for 4 splits, 15 batches of 8."""
    return make_table(tmp_path_factory.mktemp("accelerate") / "t.lance", [40, 33, 50], deleted=[5, 77])


def prepared(uri: str, workers: int, dispatch: bool):
    accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(dispatch_batches=dispatch))
    set_seed(0)
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = make_loader(uri, workers)
    model, optimizer, prepared_loader = accelerator.prepare(model, optimizer, loader)
    return accelerator, model, optimizer, loader, prepared_loader


def test_the_flags_accelerate_reads_are_the_ones_it_reads():
    """If Accelerate renames its flags, this fails before a user's run rebuilds the loader."""
    import inspect

    from accelerate import accelerator, checkpointing

    assert "_is_accelerate_prepared" in inspect.getsource(accelerator.Accelerator.prepare_data_loader)
    assert "use_stateful_dataloader" in inspect.getsource(checkpointing.save_accelerator_state)
    assert "use_stateful_dataloader" in inspect.getsource(checkpointing.load_accelerator_state)
    assert set(ACCELERATE_FLAGS) == {"_is_accelerate_prepared", "use_stateful_dataloader"}


@pytest.mark.parametrize("dispatch", [False, True], ids=["own-batches", "dispatch-batches"])
@pytest.mark.parametrize("workers", [0, 2])
def test_prepare_save_state_load_state_resume_exactly(uri, workers, dispatch, tmp_path):
    """Train 6 steps (a worker boundary), save_state, train on (a crash), then a fresh
    Accelerator loads the state: the batches after it are exactly the rest."""
    reference: list[list[int]] = []
    for batch in make_loader(uri, workers):
        reference.append(batch["id"].tolist())

    accelerator, model, optimizer, loader, batches = prepared(uri, workers, dispatch)
    assert batches is loader, "prepare rebuilt the loader"
    before: list[list[int]] = []
    train(accelerator, model, optimizer, batches, before, steps=6)
    accelerator.save_state(str(tmp_path / "ckpt"))
    train(accelerator, model, optimizer, batches, [], steps=3)  # lost in the crash

    accelerator, model, optimizer, loader, batches = prepared(uri, workers, dispatch)
    accelerator.load_state(str(tmp_path / "ckpt"))
    after: list[list[int]] = []
    train(accelerator, model, optimizer, batches, after)
    assert before == reference[:6]
    assert after == reference[6:], "the resumed run is not exactly the rest of the epoch"


def test_two_processes_share_one_state_file_and_resume_exactly(uri, tmp_path):
    """Two gloo processes: save_state writes every rank's loader state to one
    dl_state_dict.bin, which keeps one rank's whole state; load_state gives it to both
    ranks, and the runs together deliver every planned row once."""
    import json

    from helpers import ids_of
    from launching import PROCS, launch_script

    script = PROCS / "accelerate_rank.py"
    codes, outputs = launch_script(script, tmp_path, 2, f"--uri={uri}")
    assert codes == [0, 0], "\n".join(outputs)
    reports = [json.loads((tmp_path / f"{rank}.json").read_text()) for rank in range(2)]
    assert [report["world"] for report in reports] == [2, 2]
    owned = [report["own"] for report in reports]
    assert owned == [[0, 2], [1, 3]] and reports[0]["file"] == reports[1]["file"] in owned
    delivered = [i for report in reports for batch in report["seen"] for i in batch]
    data = StreamingDataset(uri, num_splits=4, shuffle_seed=5, block_rows=4, shuffle_buffer_size=32)
    assert sorted(delivered) == sorted(ids_of(data)), "rows delivered twice or never"
