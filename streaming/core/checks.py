"""The small validators every check table uses, the one checker that runs a table, and
the fix half of every validation message. Pure: no torch, no Lance.

An integer is Python's or numpy's (``numbers.Integral``), never a bool, wherever
an integer is asked for: in constructor settings, in a state and in a mixture
state alike. Each table row is a ``Field``: the name, its check, what the value
must be and (for settings) what to pass instead; each caller words its own
message from the row ``first_refused`` returns.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import NamedTuple, TypeVar

import numpy as np

__all__ = [
    "Check",
    "Field",
    "ListOf",
    "either",
    "first_refused",
    "is_bool",
    "is_dict",
    "is_int",
    "is_number",
    "non_negative",
    "one_of",
    "optional",
    "plain_ints",
    "positive",
    "retyped",
    "type_fix",
]

Check = Callable[[object], bool]
_T = TypeVar("_T")


def is_int(value: object) -> bool:
    """An integer, Python's or numpy's (``numbers.Integral``), but not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def positive(value: object) -> bool:
    """An integer greater than 0."""
    return is_int(value) and value > 0  # type: ignore[operator]


def non_negative(value: object) -> bool:
    """An integer, 0 or more."""
    return is_int(value) and value >= 0  # type: ignore[operator]


def is_number(value: object) -> bool:
    """A finite number: an integer (see ``is_int``) or a float (numpy's float64 too)."""
    return (is_int(value) or isinstance(value, float)) and math.isfinite(value)  # type: ignore[arg-type]


def is_bool(value: object) -> bool:
    """``True`` or ``False`` (not 0 or 1)."""
    return isinstance(value, bool)


def is_dict(value: object) -> bool:
    """A dict (plain JSON data)."""
    return isinstance(value, dict)


def optional(check: Check) -> Check:
    """``check``, or ``None``."""
    return lambda value: value is None or check(value)


def either(*checks: Check) -> Check:
    """Any one of ``checks``."""
    return lambda value: any(check(value) for check in checks)


def one_of(choices: Collection[object]) -> Check:
    """One of ``choices`` (a value that cannot be compared is none of them)."""

    def check(value: object) -> bool:
        try:
            return bool(value in choices)
        except (TypeError, ValueError):  # unhashable, or an array compared elementwise
            return False

    return check


class ListOf:
    """A check for a list whose items each pass ``item`` (described as ``expected``)."""

    def __init__(self, item: Check, expected: str) -> None:
        self.item, self.expected = item, expected

    def __call__(self, value: object) -> bool:
        return isinstance(value, list) and all(self.item(entry) for entry in value)

    def culprit(self, value: object) -> int | None:
        """The index of the first refused item (``None``: ``value`` is no list)."""
        if not isinstance(value, list):
            return None
        return next((index for index, entry in enumerate(value) if not self.item(entry)), None)


class Field(NamedTuple):
    """One row of a check table."""

    name: str
    check: Check
    expected: str
    """What the value must be: ``"{name} must be {expected}"``."""
    fix: str = ""
    """What to pass instead (a settings table formats it with the settings)."""


def first_refused(values: Mapping[str, object], table: Iterable[Field]) -> Field | None:
    """The first row of ``table`` that ``values`` lacks or whose check refuses its value."""
    for field in table:
        if field.name not in values or not field.check(values[field.name]):
            return field
    return None


def plain_ints(data: _T) -> _T:
    """``data`` with every numpy integer (in its dicts and lists too) a Python int."""
    if isinstance(data, dict):
        return {key: plain_ints(value) for key, value in data.items()}  # type: ignore[return-value]
    if isinstance(data, list):
        return [plain_ints(value) for value in data]  # type: ignore[return-value]
    return int(data) if is_int(data) and not isinstance(data, int) else data  # type: ignore[call-overload, return-value]


def retyped(value: object, check: Check) -> int | None:
    """The integer ``value`` was meant to be, if it passes ``check`` as one.

    A quoted number (``'42'``) or an integral float (``42.0``) was meant as the
    integer; ``None`` when ``value`` is neither or the integer is refused too.
    """
    candidate: int | None = None
    if isinstance(value, str):
        try:
            candidate = int(value.strip())
        except ValueError:
            return None
    elif isinstance(value, float) and value.is_integer():
        candidate = int(value)
    return candidate if candidate is not None and check(candidate) else None


def type_fix(name: str, value: object, check: Check) -> str | None:
    """``"pass name=42 (an integer, not the str '42')"`` where a retyped value passes."""
    number = retyped(value, check)
    if number is None:
        return None
    return f"{name}={number} (an integer, not the {type(value).__name__} {value!r})"
