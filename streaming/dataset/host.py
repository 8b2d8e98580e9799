"""The declared protocol between the loaders and what they iterate.

A ``StreamingDataLoader`` iterates a host: a ``StreamingDataset`` or a
``StreamingMixture``. It never reads a host's private attributes; it calls the
methods declared here, which both hosts implement (``LoaderHost``), plus those of
its own kind of host (``DatasetHost``, ``MixtureHost``). A mixture reads its
sources through ``MixtureSource``. ``tests/test_host.py`` checks that the hosts
implement these protocols.

The rule for these names: public names that docs/api.md does not list are
package-internal. They carry no leading underscore so that one wing may call
another's, but they are not part of the user-facing API: the API page renders
only the members it lists, they may change in any release, and user code should
not call them.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..core.lifecycle import Guarded
    from ..core.options import Options
    from ..core.progress import Mark, SplitProgress, WorkerReport
    from ..core.stats import Counters
    from ..read.view import TableView
    from ..state.format import StreamState
    from .board import Board

__all__ = ["DatasetHost", "LoaderHost", "MixtureHost", "MixtureSource"]


@runtime_checkable
class LoaderHost(Protocol):
    """What every loader calls on what it iterates: the iterator lifecycle.

    A loader's ``iter()`` calls ``supersede`` (the older iterator closes), then
    ``hold`` with its own iterator; at that iterator's first ``next()`` it calls
    ``begin_iteration`` and starts the DataLoader's batches inside ``shipping``.
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
        workers carry ``board``), and the host's iterators yield one ``Slice`` per loader
        batch of ``batch_size`` (of columnar pieces with ``columnar``)."""
        ...

    def set_epoch(self, epoch: int) -> None:
        """Move to ``epoch`` (public API)."""
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

    def state_dict(self) -> dict[str, Any]:
        """The state after the last committed batch (public API)."""
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
    """What a mixture reads of each of its sources (a ``StreamingDataset``)."""

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
