"""The declared protocols between the loaders and the engines of what they iterate.

The user's classes (``StreamingDataset``, ``StreamingMixture``) are facades: each
holds an engine and attaches it here when it is made (or unpickled). A loader
iterates a facade's engine, found with ``engine_of`` (``dataset_engine`` and
``mixture_engine`` say which kind it expects), and calls only the methods declared
here: ``LoaderHost`` for every engine, plus ``DatasetHost`` or ``MixtureHost``. A
mixture reads its sources' engines through ``MixtureSource``. No module reads
another's private attributes, and the facades' public names are only those
docs/api.md documents (``tests/project/test_api.py``).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from ..core.lifecycle import Guarded
    from ..core.options import Options
    from ..core.progress import Mark, SplitProgress, WorkerReport
    from ..core.stats import Counters, Waits
    from ..samples.view import TableView
    from ..state.format import StreamState
    from ..workers.board import Board

__all__ = [
    "DatasetHost",
    "LoaderHost",
    "MixtureHost",
    "MixtureSource",
    "attach",
    "dataset_engine",
    "engine_of",
    "mixture_engine",
    "source_engine",
]

_Host = TypeVar("_Host")

_ENGINES: weakref.WeakKeyDictionary[object, object] = weakref.WeakKeyDictionary()
"""Facade -> its engine; an entry goes with its facade."""


def attach(facade: object, engine: object) -> None:
    """Make ``engine`` the one ``engine_of(facade)`` returns (a facade calls it when made
    and when unpickled)."""
    _ENGINES[facade] = engine


def engine_of(facade: object) -> object:
    """The engine of a ``StreamingDataset`` or ``StreamingMixture``.

    Raises:
        TypeError: ``facade`` is neither (or was never attached).
    """
    try:
        engine = _ENGINES.get(facade)
    except TypeError:  # not weakly referable: no facade of ours
        engine = None
    if engine is None:
        raise TypeError(
            f"expected a streaming.StreamingDataset or streaming.StreamingMixture, got "
            f"{type(facade).__name__}; build one of those to iterate it with StreamingDataLoader"
        )
    return engine


@runtime_checkable
class LoaderHost(Protocol):
    """What every loader calls on what it iterates: the iterator lifecycle.

    A loader's ``iter()`` calls ``supersede`` (the older iterator closes), then
    ``hold`` with its own iterator; at that iterator's first ``next()`` it calls
    ``begin_iteration`` and starts the DataLoader's batches inside ``shipping``
    (kept workers get ``handover()``, which each ``reset``s to).
    """

    @property
    def endless(self) -> bool:
        """True when the host moves into its next epoch by itself."""
        ...

    def user_functions(self) -> list[tuple[str, object]]:
        """(keyword, value) of the user's functions a worker process must unpickle."""
        ...

    def supersede(self, description: str) -> None:
        """A new iterator (``description``) closes the live one."""
        ...

    def hold(self, iterator: Guarded) -> Guarded | None:
        """Make ``iterator`` the live one; return the host's own iterator it wraps, if any."""
        ...

    def begin_iteration(self, *, stacklevel: int, warn: bool = True) -> None:
        """At an iterator's first ``next()``: take the position (warn if the epoch ended)."""
        ...

    def shipping(
        self, *, batch_size: int, columnar: bool, board: Board | None = None
    ) -> AbstractContextManager[None]:
        """While a loader starts its batches: pickles are the loader's (those for new
        workers carry ``board``), and the host's iterators yield one ``Share`` per loader
        batch of ``batch_size`` (of columnar pieces with ``columnar``)."""
        ...

    def set_epoch(self, epoch: int) -> None:
        """Move to ``epoch`` (what the facade's ``set_epoch`` does)."""
        ...

    def handover(self) -> dict[str, Any]:
        """In the trainer: the position a loader's persistent workers take at their next
        iterator (plain JSON data: a state dict, for an evaluation pass or a finished
        epoch too)."""
        ...

    def reset(self, handover: dict[str, Any]) -> None:
        """In a persistent worker, before its next iterator reads: take the position
        ``handover`` describes; the worker's read counters carry on."""
        ...


@runtime_checkable
class DatasetHost(LoaderHost, Protocol):
    """What the single-table loader also calls: commits, cursor marks and epochs."""

    @property
    def options(self) -> Options:
        """The settings in use."""
        ...

    @property
    def worker_counters(self) -> dict[tuple[int, int], dict[str, float]]:
        """The latest counters of every worker whose batch was committed (live dict)."""
        ...

    @property
    def waits(self) -> Waits:
        """The loop's waits for the loader's batches (``stats()``'s ``wait_*`` figures)."""
        ...

    def remaining(self, *, whole: bool = False) -> list[int]:
        """Samples each split has left in this epoch (``whole``: all of it)."""
        ...

    def commit(self, report: WorkerReport) -> None:
        """Adopt a worker's report: its batch was handed to the trainer."""
        ...

    def mark(self) -> Mark:
        """Where this process's cursor stands now."""
        ...

    def rewind(self, mark: Mark) -> None:
        """Put the cursor back to ``mark``."""
        ...

    def next_epoch(self) -> None:
        """Move an endless host into its next epoch."""
        ...

    @property
    def world_size(self) -> int:
        """The number of ranks."""
        ...

    def owned_splits(self) -> list[int]:
        """Splits of this rank."""
        ...

    def worker_report(self) -> WorkerReport:
        """In a worker process: the progress of the splits this worker owns."""
        ...


@runtime_checkable
class MixtureHost(LoaderHost, Protocol):
    """What the mixture's loader also calls: whole global steps."""

    def epoch_steps(self) -> int:
        """Global batches of a whole epoch."""
        ...

    def commit_step(self) -> None:
        """A loader handed one global batch (from a worker) to the trainer."""
        ...

    def worker_report(self) -> WorkerReport:
        """In a worker process: its read counters (a mixture's position moves by steps)."""
        ...

    def commit_counters(self, report: WorkerReport) -> None:
        """Keep the counters of a worker whose share of a batch reached the trainer."""
        ...


@runtime_checkable
class MixtureSource(LoaderHost, Protocol):
    """What a mixture reads of each of its sources' engines (``dataset_engine``)."""

    @property
    def rank(self) -> int:
        """This process's rank."""
        ...

    @property
    def world_size(self) -> int:
        """The number of ranks."""
        ...

    @property
    def num_splits(self) -> int:
        """S, the number of splits."""
        ...

    @property
    def split_length(self) -> int:
        """L, the rows of every split in this epoch."""
        ...

    @property
    def epoch(self) -> int:
        """The source's plan epoch."""
        ...

    @property
    def columns(self) -> list[str]:
        """The columns read."""
        ...

    @property
    def evaluation(self) -> bool:
        """True for a dataset built for evaluation passes."""
        ...

    def owned_splits(self) -> list[int]:
        """Splits of this rank."""
        ...

    @property
    def options(self) -> Options:
        """The settings in use."""
        ...

    @property
    def counters(self) -> Counters:
        """The read counters of this process's iterators."""
        ...

    def view_at(self, epoch: int) -> TableView:
        """The source's snapshot planned for ``epoch``."""
        ...

    def describe(self, view: TableView, progress: Sequence[SplitProgress]) -> StreamState:
        """The source's state at ``progress`` in ``view``."""
        ...

    def check_load(self, state: dict[str, Any]) -> tuple[TableView, tuple[SplitProgress, ...]]:
        """The view and progress ``state`` resumes, validated; changes nothing."""
        ...

    def adopt(self, view: TableView, progress: Sequence[SplitProgress]) -> None:
        """Swap in a view and progress ``check_load`` validated."""
        ...


class _EngineFinder(Generic[_Host]):
    """``finder(facade)``: the engine of a facade, as the protocol its caller calls it through.

    Raises ``TypeError`` (from ``engine_of``) for anything but a facade, and for a facade
    of another kind, naming the kind expected.
    """

    def __init__(self, protocol: type[Any], *, facade: str) -> None:
        self._protocol, self._facade = protocol, facade

    def __call__(self, facade: object) -> _Host:
        engine = engine_of(facade)
        if not isinstance(engine, self._protocol):
            raise TypeError(f"expected a streaming.{self._facade}, got {type(facade).__name__}")
        return engine


dataset_engine: _EngineFinder[DatasetHost] = _EngineFinder(DatasetHost, facade="StreamingDataset")
"""The engine of a ``StreamingDataset``, as a loader calls it."""
source_engine: _EngineFinder[MixtureSource] = _EngineFinder(MixtureSource, facade="StreamingDataset")
"""The engine of a ``StreamingDataset``, as a mixture reads it."""
mixture_engine: _EngineFinder[MixtureHost] = _EngineFinder(MixtureHost, facade="StreamingMixture")
"""The engine of a ``StreamingMixture``, as its loader calls it."""
