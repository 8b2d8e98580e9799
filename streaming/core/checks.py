"""What to pass instead of a refused value: the fix half of every validation message."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["retyped", "type_fix"]


def retyped(value: object, check: Callable[[object], bool]) -> int | None:
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


def type_fix(name: str, value: object, check: Callable[[object], bool]) -> str | None:
    """``"pass name=42 (an integer, not the str '42')"`` where a retyped value passes."""
    number = retyped(value, check)
    if number is None:
        return None
    return f"{name}={number} (an integer, not the {type(value).__name__} {value!r})"
