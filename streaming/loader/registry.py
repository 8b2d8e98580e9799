"""Which loader class serves an iterable other than a ``StreamingDataset`` (a
``StreamingMixture``): classes registered with ``serves``, which ``StreamingDataLoader(x)``
builds for an ``x`` of their kind, so ``loader.py`` never imports them."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

__all__ = ["served_by", "serves"]

_Loader = TypeVar("_Loader", bound=type)

_SERVED: dict[type, type] = {}
"""Kind of iterable -> the loader class registered for it."""


def serves(kind: type) -> Callable[[_Loader], _Loader]:
    """Class decorator: ``StreamingDataLoader(x, ...)`` builds the decorated class when
    ``x`` is a ``kind`` (same arguments); the loader's module never imports it.

    A registered class shares ``__init__`` and ``__iter__`` and overrides the hooks
    ``_accept``, ``_engine_for``, ``_fit``, ``_columnar_for``, ``_collate_for`` and
    ``_new_iterator`` where its iterable differs.
    """

    def register(loader: _Loader) -> _Loader:
        _SERVED[kind] = loader
        return loader

    return register


def served_by(dataset: object) -> type | None:
    """The loader class registered for the kind of ``dataset`` (``None``: none is)."""
    return next((loader for kind, loader in _SERVED.items() if isinstance(dataset, kind)), None)
