"""The plain path (``num_workers=0`` without torch's fetcher): the general path's batches and states.

A loader that pins memory takes torch's single-process iterator (on a machine
without an accelerator it pins nothing and warns), so comparing a loader with
``pin_memory=True`` against one without compares the general path with the
plain one on the same batches.
"""

from __future__ import annotations

import pytest
import torch
import torch.profiler
from torch.utils.data import default_collate

from streaming import StreamingDataLoader, StreamingDataset

from helpers import json_roundtrip, make_table, plain_transform

pytestmark = pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true:UserWarning")

NUM_SPLITS = 6
LABEL = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("plain") / "t.lance"
    return make_table(path, [40, 33, 50, 30], deleted=[7, 8, 90])


def dataset(uri: str, **kwargs) -> StreamingDataset:
    return StreamingDataset(uri, num_splits=NUM_SPLITS, block_rows=4, shuffle_buffer_size=48, **kwargs)


def loader(data: StreamingDataset, *, general: bool, **kwargs) -> StreamingDataLoader:
    """A k=0 loader on the plain path, or (``general``) on torch's iterator."""
    return StreamingDataLoader(data, pin_memory=general, **kwargs)


def as_plain(value):
    """A batch (nested dicts, lists and tensors) with each tensor as its dtype and values."""
    if isinstance(value, torch.Tensor):
        return str(value.dtype), value.tolist()
    if isinstance(value, dict):
        return {key: as_plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [as_plain(item) for item in value]
    return value


def run(iterator, count: int | None = None) -> tuple[list, list]:
    """The next ``count`` batches (all if None) and ``state_dict()`` after each."""
    batches, states = [], []
    for batch in iterator:
        batches.append(as_plain(batch))
        states.append(json_roundtrip(iterator._loader.state_dict()))
        if count is not None and len(batches) == count:
            break
    return batches, states


def both(uri: str, **kwargs) -> tuple[tuple[list, list], tuple[list, list], list[int]]:
    """Every batch and state of a whole epoch on each path, and each loader's len()."""
    found, lengths = [], []
    for general in (False, True):
        made = loader(dataset(uri), general=general, **kwargs)
        lengths.append(len(made))
        found.append(run(iter(made)))
    return found[0], found[1], lengths


@pytest.mark.parametrize(
    "kwargs",
    [
        {"batch_size": 6},
        {"batch_size": 5},  # every batch ends inside a cycle of 6 splits
        {"batch_size": 7, "drop_last": True},
        {"batch_size": 4, "collate_fn": default_collate},
        {"batch_size": 5, "collate_fn": lambda rows: default_collate(rows)},  # the user's: collated whole
        {"batch_size": None},
    ],
    ids=["whole-cycles", "partial-cycles", "drop-last", "default-collate-named", "user-collate", "no-batch"],
)
def test_a_whole_epoch_gives_the_general_paths_batches_and_states(uri, kwargs):
    plain, general, lengths = both(uri, **kwargs)
    assert plain[0] == general[0], "the plain path's batches differ from torch's iterator's"
    assert plain[1] == general[1], "the state after some batch differs between the paths"
    assert lengths[0] == lengths[1] == len(plain[0]), f"len(loader) {lengths} against {len(plain[0])} batches"


def test_a_transform_gives_the_general_paths_batches_and_states(uri):
    found = []
    for general_path in (False, True):
        made = loader(dataset(uri, transform=plain_transform), general=general_path, batch_size=5)
        found.append(run(iter(made)))
    assert found[0] == found[1]


@pytest.mark.parametrize("stop_after", [1, 3, 7])
def test_break_then_iterate_again_and_resume_match_the_general_path(uri, stop_after):
    """``break`` out of an epoch, a new ``iter()`` continues; a fresh dataset loading the
    state taken at the break continues the same way, on either path."""
    results = []
    for general in (False, True):
        data = dataset(uri)
        made = loader(data, general=general, batch_size=5)
        head = run(iter(made), stop_after)
        state = json_roundtrip(made.state_dict())
        again = run(iter(made))  # continues from the committed position
        resumed = dataset(uri)
        resumed.load_state_dict(state)
        rest = run(iter(loader(resumed, general=general, batch_size=5)))
        assert again[0] == rest[0], "iterating again and resuming from the state differ"
        results.append((head, again))
    assert results[0] == results[1], f"stopped after {stop_after} batches: the paths differ"


def test_the_plain_path_gives_two_workers_batches_and_states(uri):
    """k=0 against k=2 (each worker owns 3 of the 6 splits), batches ending inside cycles."""
    plain = run(iter(loader(dataset(uri), general=False, batch_size=5)))
    workers = run(iter(StreamingDataLoader(dataset(uri), batch_size=5, num_workers=2, timeout=120)))
    assert plain == workers


def test_an_endless_dataset_crosses_into_the_next_epoch_as_the_general_path_does(uri):
    found = []
    for general in (False, True):
        made = loader(dataset(uri, endless=True), general=general, batch_size=7)
        batches, states = run(iter(made), 40)  # about two epochs and a half
        found.append((batches, [state["epoch"] for state in states], states[-1]))
    assert found[0] == found[1]
    assert found[0][1][-1] >= 1, "the iterator never reached the next epoch"


def test_batches_are_fresh_writable_tensors(uri):
    batches = list(loader(dataset(uri), general=False, batch_size=6))
    pointers = set()
    for batch in batches:
        for key in ("id", "label", "vec"):
            tensor = batch[key]
            assert tensor.is_contiguous(), key
            assert tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size(), (
                f"{key} is a view of a larger buffer"
            )
            pointers.add(tensor.data_ptr())
        batch["vec"].add_(1)  # writable, as default_collate's tensors are
    assert len(pointers) == 3 * len(batches), "two batches share memory"


def test_iter_draws_what_torchs_iterator_draws_from_the_random_generator(uri):
    """torch's iterator draws one number as it starts; so does the plain path, so a
    training loop's random numbers are the same on either path."""
    after = []
    for general in (False, True):
        torch.manual_seed(0)
        for _ in loader(dataset(uri), general=general, batch_size=6):
            pass
        after.append(torch.rand(4).tolist())
    assert after[0] == after[1]
    generator = torch.Generator().manual_seed(5)
    state = generator.get_state()
    for _ in loader(dataset(uri), general=False, batch_size=6, generator=generator):
        pass
    assert not torch.equal(generator.get_state(), state), "the loader's generator was not drawn from"


def test_a_profiler_sees_each_next_under_torchs_label(uri):
    made = loader(dataset(uri), general=False, batch_size=6)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
        count = sum(1 for _ in made)
    labelled = [event for event in profiler.events() if event.name == LABEL]
    assert len(labelled) >= count > 0, f"{len(labelled)} labelled next() calls for {count} batches"
