"""Checking what a ``StreamingMixture`` is built from; each error names the field and the fix."""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping

from ..core.checks import non_negative, positive
from ..dataset.dataset import StreamingDataset
from ..dataset.host import dataset_engine
from .schedule import Schedule

__all__ = [
    "check_batch",
    "check_columns",
    "check_fits",
    "check_names",
    "check_seed",
    "check_sources",
    "check_unit",
    "close_names",
]


def check_sources(sources: object) -> dict[str, StreamingDataset]:
    """The sources as a dict, each one a ``StreamingDataset`` a mixture can read."""
    if not isinstance(sources, Mapping) or not sources:
        raise TypeError(
            f"sources must be a non-empty dict from name to StreamingDataset, got "
            f"{type(sources).__name__}; e.g. StreamingMixture({{'web': web, 'code': code}}, ...)"
        )
    checked = {}
    for name, data in sources.items():
        if not isinstance(name, str):
            raise TypeError(f"source names must be str, got {name!r}; name every source")
        if not isinstance(data, StreamingDataset):
            raise TypeError(f"sources[{name!r}] is a {type(data).__name__}, not a StreamingDataset")
        options = dataset_engine(data).options
        refused = [
            ("pack_sequences", options.pack_sequences, None, "pack rows in each source's transform"),
            ("evaluation", data.evaluation, False, "mix training datasets"),
            ("endless", data.endless, False, "the mixture's stop rule decides when a source repeats"),
            ("follow_latest", options.follow_latest, False, "a mixture reads pinned snapshots"),
            ("on_transform_error", options.on_transform_error, "raise or replace", None),
        ]
        for field, value, allowed, fix in refused:
            bad = value not in ("raise", "replace") if field == "on_transform_error" else value != allowed
            if bad:
                raise ValueError(
                    f"sources[{name!r}] has {field}={value!r}, which a mixture cannot use"
                    + (
                        ": dropped rows would make ranks take unequal numbers of samples; use "
                        "on_transform_error='replace'"
                        if fix is None
                        else f"; {fix}"
                    )
                )
        checked[name] = data
    first_name, first = next(iter(checked.items()))
    for name, data in checked.items():
        if (data.rank, data.world_size) != (first.rank, first.world_size):
            raise ValueError(
                f"sources[{name!r}] has rank={data.rank}, world_size={data.world_size} but "
                f"sources[{first_name!r}] has rank={first.rank}, world_size={first.world_size}; "
                "build every source for the same rank and world size"
            )
    return checked


def check_columns(sources: Mapping[str, StreamingDataset]) -> None:
    """Sources without a transform yield their columns: they must be the same, in the same order.

    A batch holds samples of every source, so with different columns no batch could
    be collated. A source with a transform returns what it likes and is not checked.
    """
    plain = {
        name: data.columns for name, data in sources.items() if dataset_engine(data).options.transform is None
    }
    if not plain:
        return
    first_name, first = next(iter(plain.items()))
    for name, columns in plain.items():
        if columns != first:
            shared = [column for column in first if column in columns]
            raise ValueError(
                f"sources[{name!r}] has columns {columns} but sources[{first_name!r}] has {first}; "
                f"a batch holds samples of both: build every source with the same columns= "
                f"(those both have: columns={shared}), or give a source a transform that "
                "returns the same keys"
            )


def close_names(given: object, names: list[str]) -> str:
    """``"; did you mean 'web'?"`` for each given name that is close to a source name."""
    if not isinstance(given, (list, tuple)):
        return ""
    hints = []
    for name in given:
        if isinstance(name, str) and name not in names:
            close = difflib.get_close_matches(name, names, n=1)
            if close:
                hints.append(f"{name!r}: did you mean {close[0]!r}?")
    return f" ({'; '.join(hints)})" if hints else ""


def check_unit(unit: object, sources: Mapping[str, StreamingDataset]) -> int:
    """``unit``, or the default: the gcd of the sources' ``num_splits``."""
    splits = {name: data.num_splits for name, data in sources.items()}
    world = next(iter(sources.values())).world_size
    if unit is None:
        return math.gcd(*splits.values())
    if not positive(unit):
        raise ValueError(f"unit={unit!r} must be a positive integer (or None for the default)")
    whole = int(unit)  # type: ignore[call-overload]
    uneven = [name for name, count in splits.items() if count % whole]
    if uneven or whole % world:
        raise ValueError(
            f"unit={whole} must divide every source's num_splits ({splits}) and be a multiple "
            f"of world_size={world}; choose a divisor of {math.gcd(*splits.values())} that is a "
            f"multiple of {world}"
        )
    return whole


def check_names(weights: object, names: list[str]) -> None:
    """``weights`` must name the sources, in their order."""
    if not isinstance(weights, Mapping) or list(weights) != names:
        given = list(weights) if isinstance(weights, Mapping) else weights
        raise ValueError(
            f"weights must name the sources in their order, {names!r}; got {given!r}"
            f"{close_names(given, names)}; pass weights={{{', '.join(f'{n!r}: ...' for n in names)}}}"
        )


def check_seed(seed: object) -> int | None:
    """``seed`` as an int (``None`` stays ``None``)."""
    if seed is None:
        return None
    if not non_negative(seed):
        raise ValueError(f"seed={seed!r} must be a non-negative integer (or None: no shuffle in a batch)")
    return int(seed)  # type: ignore[call-overload]


def check_batch(batch: object, unit: int) -> int:
    """``global_batch_size``: a positive multiple of ``unit``."""
    if not positive(batch) or batch % unit:  # type: ignore[operator]
        whole = positive(batch)
        below = batch // unit * unit if whole else 0  # type: ignore[operator]
        nearest = " or ".join(str(size) for size in (below, below + unit) if size > 0)
        raise ValueError(
            f"global_batch_size={batch!r} must be a positive multiple of unit={unit} "
            f"(samples of a source per batch come in units, see the unit argument); pass "
            f"global_batch_size={nearest}" + (f", or a unit that divides {batch}" if whole else "")
        )
    return int(batch)  # type: ignore[call-overload]


def check_fits(schedule: Schedule) -> None:
    """With a rule that ends the mixture, every source's epoch must fill its largest
    share of a batch (an endless mixture's sources repeat inside a batch)."""
    if schedule.rule.endless:
        return
    for name, weight in schedule.weights.items():
        most = math.ceil(schedule.units_per_step * weight) * schedule.unit
        have = schedule.epoch_samples[name]
        if have < most:
            raise ValueError(
                f"sources[{name!r}] holds {have} samples per epoch, fewer than its share of one "
                f"global batch ({most}), so stop={schedule.stop!r} would end the mixture before "
                "it starts; use stop='never' or a smaller global_batch_size"
            )
