"""The pure mixture schedule and state format: property tests (hypothesis) and named cases. (G17)"""

from __future__ import annotations

import dataclasses
import json
import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.mixture.schedule import STOP_RULES, Schedule, normalise_weights, split_counts
from streaming.mixture.state import MixtureState, merge_mixture_states

STEPS = 120


@st.composite
def schedules(draw, stop: str | None = None) -> Schedule:
    count = draw(st.integers(1, 5))
    names = [f"s{index}" for index in range(count)]
    weights = {name: draw(st.integers(1, 20)) for name in names}
    unit = draw(st.integers(1, 6))
    units_per_step = draw(st.integers(1, 12))
    epochs = {name: unit * draw(st.integers(1, 40)) for name in names}
    rule = stop or draw(st.sampled_from(STOP_RULES))
    return Schedule(normalise_weights(weights), units_per_step * unit, unit, epochs, rule)


def run(schedule: Schedule, steps: int = STEPS):
    """(steps taken, positions after each) until the end or ``steps``."""
    position = schedule.start(dict.fromkeys(schedule.weights, 0))
    taken = []
    for _ in range(steps):
        nxt = schedule.advance(position)
        if nxt is None:
            break
        taken.append(nxt[0])
        position = nxt[1]
        taken[-1] = (nxt[0], position)
    return taken


@settings(max_examples=200, deadline=None)
@given(schedules())
def test_every_batch_holds_floor_or_ceil_of_each_share_in_units(schedule):
    total = schedule.units_per_step
    for step, _ in run(schedule):
        counts = {name: step.count(name) for name in schedule.weights}
        assert sum(counts.values()) == schedule.global_batch_size
        for name, weight in schedule.weights.items():
            assert counts[name] % schedule.unit == 0, (name, counts)
            units = counts[name] // schedule.unit
            assert math.floor(total * weight) <= units <= math.ceil(total * weight), (name, units, weight)


@settings(max_examples=200, deadline=None)
@given(schedules(stop="never"))
def test_shares_stay_within_one_unit_of_exact_in_the_long_run(schedule):
    total = schedule.units_per_step
    for _, after in run(schedule):
        for name, weight in schedule.weights.items():
            exact = after.since * total * weight
            assert abs(after.units[name] - exact) < 1, (name, after.since, after.units[name], float(exact))


@settings(max_examples=150, deadline=None)
@given(schedules(stop="never"))
def test_each_source_reads_its_epochs_in_order_without_gaps(schedule):
    """Concatenated segments of a source are its epochs 0, 1, ... each from 0 to its end."""
    expected = dict.fromkeys(schedule.weights, (0, 0))  # (epoch, position) of the next sample
    for step, after in run(schedule):
        for name, segments in step.segments.items():
            for segment in segments:
                epoch, start = expected[name]
                if start == schedule.epoch_samples[name]:
                    epoch, start = epoch + 1, 0
                assert (segment.epoch, segment.start) == (epoch, start), (name, segment)
                assert 0 < segment.count <= schedule.epoch_samples[name] - start
                expected[name] = (epoch, start + segment.count)
            where = after.sources[name]
            assert (where.epoch, where.taken) == expected[name]


@settings(max_examples=150, deadline=None)
@given(schedules(stop="first_exhausted"))
def test_first_exhausted_ends_before_the_first_batch_a_source_cannot_fill(schedule):
    steps = run(schedule, steps=10_000)
    last = steps[-1][1] if steps else schedule.start(dict.fromkeys(schedule.weights, 0))
    assert all(where.epoch == 0 and where.passes == 0 for where in last.sources.values())
    units = schedule.units(last)
    short = [
        name
        for name, count in units.items()
        if count * schedule.unit > schedule.epoch_samples[name] - last.sources[name].taken
    ]
    assert short, "the mixture ended although every source could fill the next batch"
    assert schedule.remaining_steps(schedule.start(dict.fromkeys(schedule.weights, 0))) == len(steps)


@settings(max_examples=150, deadline=None)
@given(schedules(stop="all_exhausted"))
def test_all_exhausted_ends_only_when_every_source_has_run_out(schedule):
    steps = run(schedule, steps=100_000)
    last = steps[-1][1] if steps else schedule.start(dict.fromkeys(schedule.weights, 0))
    units = schedule.units(last)
    for name, where in last.sources.items():
        out = where.passes > 0 or units[name] * schedule.unit > schedule.epoch_samples[name] - where.taken
        assert out, f"{name} had neither run out nor finished an epoch when the mixture ended"


@settings(max_examples=100, deadline=None)
@given(schedules(stop="never"), st.integers(0, 30), st.data())
def test_reweighting_changes_only_the_future(schedule, cut, data):
    before = run(schedule, steps=cut)
    position = before[-1][1] if before else schedule.start(dict.fromkeys(schedule.weights, 0))
    weights = normalise_weights({name: data.draw(st.integers(1, 20)) for name in schedule.weights})
    changed, moved = schedule.reweighted(weights, position)
    assert moved.sources == position.sources and moved.step == position.step
    total = changed.units_per_step
    for _ in range(40):
        _, moved = changed.advance(moved)
        for name, weight in weights.items():
            assert abs(moved.units[name] - moved.since * total * weight) < 1


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 64))
def test_split_counts_are_the_global_order(taken, num_splits):
    counts = split_counts(taken, num_splits)
    assert sum(counts) == taken
    assert max(counts) - min(counts) <= 1
    assert counts == sorted(counts, reverse=True)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 12), st.integers(1, 20), st.integers(0, 500))
def test_every_rank_takes_the_same_share_of_a_segment(world_size, units, start_units):
    """Global positions [start, start + count) in multiples of a unit divisible by W give every
    rank count / W samples: positions j with j % W == r."""
    unit = world_size * 2
    start, count = start_units * unit, units * unit
    for rank in range(world_size):
        mine = [j for j in range(start, start + count) if j % world_size == rank]
        assert len(mine) == count // world_size


def test_weights_are_exact_fractions_and_bad_weights_are_named():
    assert normalise_weights({"a": 0.7, "b": 0.3}) == {"a": Fraction(7, 10), "b": Fraction(3, 10)}
    assert normalise_weights({"a": 2, "b": 6}) == {"a": Fraction(1, 4), "b": Fraction(3, 4)}
    for bad in (0, -1.0, float("nan"), float("inf"), "1", True):
        with pytest.raises(ValueError, match=r"weights\['b'\]"):
            normalise_weights({"a": 1.0, "b": bad})


def test_the_70_30_example_in_units_of_six():
    schedule = Schedule(normalise_weights({"a": 0.7, "b": 0.3}), 24, 6, {"a": 10**6, "b": 10**6}, "never")
    steps = run(schedule, steps=10)
    assert [step.count("a") for step, _ in steps] == [18, 18, 18, 18, 12, 18, 18, 18, 18, 12]
    assert steps[-1][1].units == {"a": 28, "b": 12}  # 70% and 30% of 40 units, exactly


def _state(step: int = 3) -> dict:
    schedule = Schedule(normalise_weights({"a": 0.7, "b": 0.3}), 24, 6, {"a": 600, "b": 600}, "never")
    position = schedule.start({"a": 0, "b": 0})
    for _ in range(step):
        position = schedule.advance(position)[1]
    tables = {"a": {"table": "a"}, "b": {"table": "b"}}
    return MixtureState(24, 6, "never", 0, {"a": 0.7, "b": 0.3}, 0, position, tables).to_dict()


def test_mixture_state_is_json_and_round_trips():
    state = _state()
    assert json.loads(json.dumps(state)) == state
    assert MixtureState.from_dict(state).to_dict() == state


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s.pop("step"), "missing 'step'"),
        (lambda s: s.update(format_version=99), "format_version=99"),
        (lambda s: s.update(stop="sometimes"), "'stop'"),
        (lambda s: s["weights"].update(a=-1), "'weights'"),
        (lambda s: s["schedule"]["units"].pop("b"), "schedule.units"),
        (lambda s: s["sources"]["a"].update(taken=-3), "sources.a.taken"),
        (lambda s: s["sources"]["b"].pop("state"), "sources.b.state"),
        (lambda s: s.update(global_batch_size=0), "global_batch_size"),
    ],
)
def test_a_malformed_mixture_state_names_the_field(edit, message):
    state = _state()
    edit(state)
    with pytest.raises(ValueError, match=message.replace(".", r"\.").replace("'", "'")):
        MixtureState.from_dict(state)


def test_merge_returns_the_common_state_and_refuses_different_steps():
    assert merge_mixture_states([_state(3), _state(3), _state(3)]) == _state(3)
    with pytest.raises(ValueError, match="step=3 but state 1 has step=4"):
        merge_mixture_states([_state(3), _state(4)])
    with pytest.raises(ValueError, match="at least one"):
        merge_mixture_states([])


def test_numpy_integers_in_a_mixture_state_are_integers():
    import numpy as np

    schedule = Schedule(normalise_weights({"a": 2, "b": 1}), 24, 6, {"a": 600, "b": 600}, "never")
    position = schedule.start({"a": 0, "b": 0})
    state = MixtureState(24, 6, "never", 0, {"a": 2, "b": 1}, 0, position, {"a": {}, "b": {}}).to_dict()
    numpy_state = {
        **state,
        "global_batch_size": np.int64(24),
        "unit": np.int32(6),
        "seed": np.int64(0),
        "step": np.int64(0),
        "weights": {"a": np.int64(2), "b": 1},
        "schedule": {"since": np.int64(0), "units": {"a": np.int64(0), "b": 0}},
    }
    parsed = MixtureState.from_dict(numpy_state).to_dict()
    assert parsed == state
    assert json.loads(json.dumps(parsed)) == state, "the parsed state holds plain ints (JSON data)"
    merged = merge_mixture_states([numpy_state, numpy_state])
    assert merged == state and json.loads(json.dumps(merged)) == state, "a merged state holds plain ints"
    assert normalise_weights({"a": np.int64(2), "b": 1.0}) == {"a": Fraction(2, 3), "b": Fraction(1, 3)}


def test_a_stop_rule_is_one_registry_entry(monkeypatch):
    from streaming.mixture.schedule import RULES, StopRule, stop_rule

    # ends when source a cannot fill its share; b repeats meanwhile
    rule = StopRule(
        "until_a_runs_out", endless=False, continues=lambda sources, finished, short: "a" not in short
    )
    monkeypatch.setitem(RULES, rule.name, rule)
    assert stop_rule(rule.name) is rule
    schedule = Schedule(normalise_weights({"a": 1, "b": 1}), 24, 6, {"a": 600, "b": 60}, rule.name)
    start = schedule.start({"a": 0, "b": 0})
    assert schedule.remaining_steps(start) == 50, "a gives 12 samples a step: 600 / 12 steps"
    first = dataclasses.replace(schedule, stop="first_exhausted")
    assert first.remaining_steps(start) == 5, "b runs out first, after 60 / 12 steps"
    endless = StopRule("endless_too", endless=True, continues=lambda *_: True)
    monkeypatch.setitem(RULES, endless.name, endless)
    assert dataclasses.replace(schedule, stop=endless.name).remaining_steps(start) is None
    with pytest.raises(ValueError, match=r"stop='sometimes' is not one of \('all_exhausted'"):
        stop_rule("sometimes")
    with pytest.raises(ValueError, match=r"stop=\['never'\] is not one of"):
        stop_rule(["never"])
