"""Mixtures refuse loudly: wrong construction, other sources, other settings, other plans. (G17)"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
import torch.distributed.checkpoint as dcp

from streaming import StreamingDataLoader, StreamingDataset, StreamingMixture

from helpers import json_roundtrip
from mixtures import GLOBAL_BATCH, WEIGHTS, ids, make_tables, mixture, sources


@pytest.fixture(scope="module")
def uris(tmp_path_factory) -> dict[str, str]:
    return make_tables(tmp_path_factory.mktemp("mixerr"))


@pytest.fixture(scope="module")
def state(uris) -> dict:
    mix = mixture(uris)
    iterator = iter(StreamingDataLoader(mix, batch_size=GLOBAL_BATCH))
    for _ in range(3):
        next(iterator)
    iterator.close()
    return json_roundtrip(mix.state_dict())


def build(uris, names=("a", "b"), **kwargs) -> StreamingMixture:
    made = sources(uris, **kwargs.pop("source_options", {}))
    renamed = {new: made[old] for new, old in zip(names, ("a", "b", "a"), strict=False)}
    weights = kwargs.pop("weights", dict.fromkeys(renamed, 1.0))
    return StreamingMixture(
        renamed, weights=weights, global_batch_size=kwargs.pop("global_batch_size", 48), **kwargs
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"names": ("web", "b")}, r"missing here: \['a'\], new here: \['web'\]\); build"),
        ({"names": ("aa", "b")}, r"new here: \['aa'\]\) \('aa': did you mean 'a'\?\); build the mixture"),
        ({"names": ("a", "b", "c")}, r"new here: \['c'\]"),
        ({"names": ("b", "a")}, "in the order"),
        ({"global_batch_size": 96}, "global_batch_size=48 but this mixture has global_batch_size=96"),
        ({"stop": "first_exhausted"}, "stop='never' but this mixture has stop='first_exhausted'"),
        ({"seed": 5}, "seed=0 but this mixture has seed=5"),
        (
            {"source_options": {"shuffle_seed": 5}},
            "source 'a': checkpoint has shuffle_seed=0 .*=5",
        ),
        ({"source_options": {"a_options": {"filter": "id > 3"}}}, "source 'a': checkpoint has filter=None"),
    ],
)
def test_a_different_mixture_is_refused_naming_what_differs(uris, state, change, message):
    names = change.pop("names", ("a", "b"))
    weights = dict(zip(names, [0.7, 0.3, 0.5], strict=False))
    mix = build(uris, names, weights=weights, **change)
    before = mix.state_dict()
    with pytest.raises(ValueError, match=message):
        mix.load_state_dict(state)
    assert mix.state_dict() == before, "a refused state changed the mixture"


def test_states_of_the_other_kind_are_refused(uris, state):
    single = StreamingDataset(uris["a"], num_splits=12)
    with pytest.raises(ValueError, match="single StreamingDataset"):
        mixture(uris).load_state_dict(single.state_dict())
    with pytest.raises(ValueError, match="StreamingMixture"):
        single.load_state_dict(state)
    with pytest.raises(
        ValueError,
        match=r"state 0 is the state of a StreamingMixture.*merge mixture states with "
        r"StreamingMixture\.merge_state_dicts\(states\)",
    ):
        StreamingDataset.merge_state_dicts([state, state])


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"global_batch_size": 50},
            ValueError,
            r"global_batch_size=50 must be a positive multiple of unit=12 .*; "
            "pass global_batch_size=48 or 60, or a unit that divides 50",
        ),
        ({"global_batch_size": 5}, ValueError, r"global_batch_size=5 must be .*; pass global_batch_size=12,"),
        ({"unit": 5}, ValueError, "unit=5 must divide every source's num_splits"),
        ({"weights": {"b": 1.0, "a": 1.0}}, ValueError, "weights must name the sources in their order"),
        (
            {"weights": {"a": 1.0, "bb": 1.0}},
            ValueError,
            r"weights must name the sources in their order, \['a', 'b'\]; got \['a', 'bb'\] "
            r"\('bb': did you mean 'b'\?\); pass weights=\{'a': \.\.\., 'b': \.\.\.\}",
        ),
        (
            {"source_options": {"a_options": {"columns": ["id"]}}},
            ValueError,
            r"sources\['b'\] has columns \[.*\] but sources\['a'\] has \['id'\]; .*same columns= "
            r"\(those both have: columns=\['id'\]\)",
        ),
        ({"weights": {"a": 1.0, "b": 0}}, ValueError, r"weights\['b'\]=0 is not positive"),
        ({"stop": "sometimes"}, ValueError, "stop='sometimes' is not one of"),
        ({"source_options": {"on_transform_error": "skip"}}, ValueError, "on_transform_error='skip'"),
        ({"source_options": {"on_transform_error": "warn"}}, ValueError, "on_transform_error='warn'"),
        ({"source_options": {"endless": True}}, ValueError, "endless=True"),
        ({"global_batch_size": 4800, "stop": "first_exhausted"}, ValueError, "fewer than its share"),
    ],
)
def test_bad_construction_names_the_field_and_the_fix(uris, kwargs, error, message):
    with pytest.raises(error, match=message):
        build(uris, **kwargs)


def test_sources_must_be_streaming_datasets_of_one_topology(uris):
    with pytest.raises(TypeError, match="non-empty dict"):
        StreamingMixture([], weights={}, global_batch_size=12)
    with pytest.raises(TypeError, match=r"sources\['a'\] is a str"):
        StreamingMixture({"a": uris["a"]}, weights={"a": 1}, global_batch_size=12)
    a = StreamingDataset(uris["a"], num_splits=12, rank=0, world_size=2)
    b = StreamingDataset(uris["b"], num_splits=12, rank=1, world_size=2)
    with pytest.raises(ValueError, match="same rank and world size"):
        StreamingMixture({"a": a, "b": b}, weights={"a": 1, "b": 1}, global_batch_size=24)
    with pytest.raises(TypeError, match="StreamingMixture"):
        StreamingDataset([uris["a"], uris["b"]])


def test_the_loader_batch_must_be_one_global_batch_share(uris):
    mix = mixture(uris, 0, 2)
    with pytest.raises(ValueError, match="pass batch_size=24"):
        StreamingDataLoader(mix, batch_size=48)
    assert StreamingDataLoader(mix, batch_size=24).replay_allowance() == 0


def test_merge_refuses_states_of_different_steps(uris, state):
    later = mixture(uris)
    later.load_state_dict(state)
    iterator = iter(StreamingDataLoader(later, batch_size=GLOBAL_BATCH))
    next(iterator)
    iterator.close()
    with pytest.raises(ValueError, match="step=3 but state 1 has step=4"):
        StreamingMixture.merge_state_dicts([state, later.state_dict()])


def test_cli_inspects_and_merges_a_mixture_state(uris, state, tmp_path):
    path = tmp_path / "mixture.json"
    path.write_text(json.dumps(state))
    shown = subprocess.run(
        [sys.executable, "-m", "streaming", "inspect", str(path)], capture_output=True, text=True, check=False
    )
    assert shown.returncode == 0, shown.stderr
    assert "mixture epoch: 0, global batches delivered: 3" in shown.stdout
    assert "a: epoch 0, " in shown.stdout and "b: epoch 0, " in shown.stdout
    merged = tmp_path / "merged.json"
    done = subprocess.run(
        [sys.executable, "-m", "streaming", "merge", str(path), str(path), "-o", str(merged)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(merged.read_text()) == state


@pytest.mark.parametrize("workers", [0, 2])
def test_dcp_saves_and_loads_a_mixture_loader(uris, tmp_path, workers):
    first = StreamingDataLoader(
        mixture(uris), batch_size=GLOBAL_BATCH, num_workers=workers, timeout=120 if workers else 0
    )
    iterator = iter(first)
    before = [ids(next(iterator)) for _ in range(4)]
    model = torch.nn.Linear(2, 2)
    dcp.save({"model": model.state_dict(), "loader": first}, checkpoint_id=tmp_path, no_dist=True)
    straight = [ids(next(iterator)) for _ in range(3)]
    iterator.close()
    resumed = StreamingDataLoader(
        mixture(uris), batch_size=GLOBAL_BATCH, num_workers=workers, timeout=120 if workers else 0
    )
    dcp.load(
        {"model": torch.nn.Linear(2, 2).state_dict(), "loader": resumed}, checkpoint_id=tmp_path, no_dist=True
    )
    assert resumed.state_dict()["step"] == len(before)
    again = iter(resumed)
    assert [ids(next(again)) for _ in range(3)] == straight
    assert set(WEIGHTS) == set(resumed.state_dict()["weights"])


def test_numpy_integers_are_taken_for_every_integer_argument(uris):
    import numpy as np

    mix = build(
        uris,
        unit=np.int64(12),
        global_batch_size=np.int64(48),
        seed=np.int32(3),
        weights={"a": np.int64(7), "b": 3},
    )
    state = mix.state_dict()
    assert (state["unit"], state["global_batch_size"], state["seed"]) == (12, 48, 3)
    assert all(type(state[name]) is int for name in ("unit", "global_batch_size", "seed")), "plain JSON ints"
    assert json_roundtrip(state) == state
