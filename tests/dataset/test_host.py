"""The declared protocol between loaders and what they iterate (``streaming.dataset.host``)."""

from __future__ import annotations

import itertools
import json
import os
import pickle
import re
from pathlib import Path

import pytest

from streaming import StreamingDataLoader, StreamingDataset, StreamingMixture
from streaming.core.lifecycle import Guarded, Lifecycle
from streaming.dataset import host

from mixtures import make_tables, mixture

API_PAGE = Path(__file__).resolve().parents[2] / "docs" / "api.md"
PROTOCOLS = (host.LoaderHost, host.DatasetHost, host.MixtureHost, host.MixtureSource)
USER_FACING_IN_PROTOCOLS = {  # public API (docs/api.md) the engines' protocols also declare
    "columns",
    "endless",
    "epoch",
    "evaluation",
    "num_splits",
    "owned_splits",
    "rank",
    "set_epoch",
    "split_length",
    "world_size",
}


def protocol_names() -> set[str]:
    names: set[str] = set()
    for protocol in PROTOCOLS:
        names |= {name for name in vars(protocol) if not name.startswith("_")}
    return names - USER_FACING_IN_PROTOCOLS


def api_members() -> dict[str, list[str]]:
    """Each class block of the API page -> its ``members:`` list."""
    found = {}
    for block in API_PAGE.read_text().split(":::")[1:]:
        target = block.split()[0]
        listed = re.search(r"^\s+members: \[(.*)\]$", block, flags=re.MULTILINE)
        if listed is not None:
            found[target] = [name.strip() for name in listed.group(1).split(",")]
    return found


@pytest.fixture(scope="module")
def uris(tmp_path_factory) -> dict[str, str]:
    return make_tables(tmp_path_factory.mktemp("host"))


def test_the_engines_implement_the_protocols_and_the_facades_do_not(uris):
    mixed = mixture(uris)
    data = next(iter(mixed.sources.values()))
    engine, mixing = host.engine_of(data), host.engine_of(mixed)
    assert isinstance(engine, host.DatasetHost) and isinstance(engine, host.MixtureSource)
    assert isinstance(mixing, host.MixtureHost) and not isinstance(mixing, host.DatasetHost)
    assert host.dataset_engine(data) is engine and host.mixture_engine(mixed) is mixing
    for facade in (data, mixed):
        assert not any(isinstance(facade, protocol) for protocol in PROTOCOLS), type(facade).__name__


def test_an_engine_is_found_only_for_a_facade_and_follows_it_into_a_copy(uris):
    import pickle

    data = next(iter(mixture(uris).sources.values()))
    with pytest.raises(TypeError, match=r"expected a streaming\.StreamingDataset or .*, got list"):
        host.engine_of([1, 2])
    with pytest.raises(TypeError, match=r"expected a streaming\.StreamingMixture, got StreamingDataset"):
        host.mixture_engine(data)
    copy = pickle.loads(pickle.dumps(data))
    assert host.dataset_engine(copy) is not host.dataset_engine(data)
    assert host.dataset_engine(copy).state_dict() == data.state_dict()


def test_the_api_page_lists_the_user_facing_members_and_none_of_the_protocol():
    members = api_members()
    classes = {
        "streaming.StreamingDataset": StreamingDataset,
        "streaming.StreamingDataLoader": StreamingDataLoader,
        "streaming.StreamingMixture": StreamingMixture,
    }
    assert set(classes) <= set(members)
    internal = protocol_names() | {"begin_iteration", "start", "serves"}
    for target, cls in classes.items():
        assert all(hasattr(cls, name) for name in members[target]), target
        assert not internal & set(members[target]), target


class _Items(Guarded):
    """A Guarded iterator over a list, for the lifecycle's own rules."""

    def __init__(self, items: list[int]) -> None:
        super().__init__("iter(items)")
        self._items = iter(items)

    @property
    def busy(self) -> bool:
        return False

    def _advance(self) -> int:
        return next(self._items)

    def _release(self) -> None:
        pass


def test_one_lifecycle_ships_pickles_and_keeps_an_unstarted_iterator_across_set_epoch():
    lifecycle = Lifecycle()
    unstarted = _Items([1, 2])
    lifecycle.live.hold(unstarted)
    assert lifecycle.set_epoch(1) is None and unstarted.live  # it follows the new epoch
    assert next(unstarted) == 1
    with pytest.raises(RuntimeError, match=r"cannot load_state_dict while iter\(items\) has not finished"):
        lifecycle.refuse_started("load_state_dict")
    with lifecycle.shipping():
        loaders = lifecycle.pickled(for_child=True)
    assert loaders.for_loader and loaders.trainer_pid == os.getpid() and not lifecycle.shipped
    assert unstarted.live, "a loader's pickle leaves the live iterator alone"
    plain = lifecycle.pickled(for_child=True)
    assert not plain.for_loader and lifecycle.shipped and not unstarted.live
    with pytest.raises(RuntimeError, match="closed by the worker processes of a plain DataLoader"):
        next(unstarted)


def _ids(iterator, count: int) -> list[int]:
    return [int(sample["id"]) for sample in itertools.islice(iterator, count)]


@pytest.mark.parametrize("evaluation", [False, True], ids=["training", "evaluation"])
def test_a_worker_copy_resets_to_the_trainers_handover_and_keeps_its_counters(uris, evaluation):
    """What a persistent worker does at a later iterator: load a plain JSON state, no transplant."""
    trainer = StreamingDataset(uris["a"], num_splits=4, evaluation=evaluation)
    worker = pickle.loads(pickle.dumps(trainer))  # a worker's own copy, made when it started
    engine = host.dataset_engine(worker)
    _ids(iter(worker), 7)  # the worker's first iterator reads (and counts) rows
    read_before = engine.counters.as_dict()["rows_read"]
    _ids(iter(trainer), 40)  # meanwhile the trainer moved on, and to another epoch
    trainer.set_epoch(2)
    ahead = _ids(iter(trainer), 9)
    handover = json.loads(json.dumps(host.dataset_engine(trainer).handover()))
    engine.reset(handover)
    assert worker.epoch == 2
    expected = ahead if evaluation else _ids(iter(trainer), 5)
    assert _ids(iter(worker), len(expected)) == expected, "the copy continues from the trainer's position"
    assert engine.counters.as_dict()["rows_read"] > read_before, "the worker's counters carry on"


def test_a_mixture_copy_resets_to_the_trainers_handover(uris):
    trainer = mixture(uris, stop="all_exhausted")
    worker = pickle.loads(pickle.dumps(trainer))
    first = _ids(iter(trainer), 3 * trainer.batch_size)
    assert _ids(iter(worker), 10) == first[:10]
    host.mixture_engine(trainer).commit_step()  # the trainer delivered one more batch
    handover = json.loads(json.dumps(host.mixture_engine(trainer).handover()))
    host.mixture_engine(worker).reset(handover)
    assert worker.step == trainer.step == 4 and worker.state_dict() == trainer.state_dict()
    assert _ids(iter(worker), 20) == _ids(iter(trainer), 20), "the copy continues with the trainer's batches"
