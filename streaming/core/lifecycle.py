"""One live iterator per dataset: how iterators end, and who may end them.

Every iterator of a dataset (its own ``iter()``, or a ``StreamingDataLoader``'s) is
a ``Guarded`` iterator held, weakly, in the dataset's ``LiveSlot``. Making a new
one, ``set_epoch`` to another epoch, or ``load_state_dict`` deals with the one in
the slot; an iterator the caller dropped, closed or ran to the end is not in it
any more. The rules, and why:

- A new iterator *supersedes* the live one: the old one is closed at once (its
  undelivered read-ahead is discarded, never counted) and a later ``next()`` on it
  raises ``RuntimeError`` naming the call that superseded it. Two iterators
  advancing one position would deliver samples twice, and an old iterator that
  silently stopped would look like the end of the epoch.
- ``set_epoch(other)`` closes the live iterator the same way and moves on: leaving
  an epoch early (``break``, a step limit) is normal training.
- ``load_state_dict`` refuses while an iterator is live and still held: it would
  keep delivering from the position the state replaces.
- An iterator that has not been asked for its first item yet holds no position:
  it starts where the dataset stands at that first ``next()``. So ``set_epoch``
  and ``load_state_dict`` leave it live and it follows them, as a DataLoader's
  iterator follows its sampler's ``set_epoch`` (Lightning makes the iterator of a
  resumed run before it sets the epoch). Only a new iterator supersedes it.
- A call that would race a ``next()`` running right now (from another thread, or
  from inside the iterator) raises ``RuntimeError``: closing a running iterator
  cannot be done safely.

Pure Python: no torch, no Lance.
"""

from __future__ import annotations

import inspect
import os
import weakref
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["Guarded", "Lifecycle", "LiveSlot", "Samples"]


class Guarded(Iterator[Any]):
    """An iterator its dataset can close from outside; a later ``next()`` says who did.

    Subclasses implement ``_advance`` (the next item), ``busy`` (whether a
    ``next()`` runs right now) and ``_release`` (free what the iterator holds:
    threads, worker processes, shared memory).
    """

    def __init__(self, description: str) -> None:
        self.description = description
        self._closed_by: str | None = None  # the call that closed it from outside
        self._failure: str | None = None  # the exception that ended it
        self._ended = False  # exhausted, failed, or closed by any means
        self._started = False  # asked for its first item

    @property
    def busy(self) -> bool:
        """True while a ``next()`` of this iterator is running."""
        raise NotImplementedError

    @property
    def live(self) -> bool:
        """True until the iterator is exhausted, fails or is closed."""
        return not self._ended

    @property
    def started(self) -> bool:
        """True once its first ``next()`` was called: it has taken a position."""
        return self._started

    def __iter__(self) -> Guarded:
        return self

    def __next__(self) -> Any:
        if self._ended:
            self._explain_end()
        self._started = True
        try:
            return self._advance()
        except StopIteration:
            self._end()
            raise
        except BaseException as error:
            self._fail(error)
            raise

    def _fail(self, error: BaseException) -> None:
        self._failure = type(error).__name__
        self._end()

    def _explain_end(self) -> None:
        if self._closed_by is not None:
            raise RuntimeError(
                f"this iterator ({self.description}) was closed by {self._closed_by}, so it yields "
                "nothing more; its undelivered samples were never counted. Use the iterator "
                "that replaced it, or call iter() again to continue from the committed position"
            )
        if self._failure is not None:
            raise RuntimeError(
                f"this iterator ({self.description}) stopped when {self._failure} was raised in it; "
                "call iter() again to continue from the committed position"
            )
        raise StopIteration

    def close(self) -> None:
        """Stop now and free threads, workers and memory; a later ``next()`` stops."""
        self._end()

    def close_from_outside(self, reason: str) -> None:
        """Stop now because of ``reason`` (a call such as ``set_epoch(1)``); a later
        ``next()`` raises ``RuntimeError`` naming it."""
        if not self._ended:
            self._closed_by = reason
        self._end()

    def _end(self) -> None:
        if not self._ended:
            self._ended = True
            self._release()

    def _advance(self) -> Any:
        raise NotImplementedError

    def _release(self) -> None:
        raise NotImplementedError


class Samples(Guarded):
    """A dataset's own iterator: a generator of samples (or batches) behind the guard."""

    def __init__(self, generator: Generator[Any, None, None], description: str) -> None:
        super().__init__(description)
        self._generator = generator

    @property
    def busy(self) -> bool:
        """True while the generator runs (Python tracks it)."""
        return inspect.getgeneratorstate(self._generator) == inspect.GEN_RUNNING

    def _advance(self) -> Any:
        return next(self._generator)

    def _release(self) -> None:
        self._generator.close()  # folds the completed cycles into the cursor


class LiveSlot:
    """The one live iterator of a dataset, held weakly so a dropped one never blocks."""

    def __init__(self) -> None:
        self._ref: weakref.ref[Guarded] | None = None

    def current(self) -> Guarded | None:
        """The live iterator, or ``None`` when there is none (or it ended, or was dropped)."""
        iterator = self._ref() if self._ref is not None else None
        return iterator if iterator is not None and iterator.live else None

    def hold(self, iterator: Guarded) -> None:
        """Make ``iterator`` the live one (call ``close_live`` first)."""
        self._ref = weakref.ref(iterator)

    def started(self) -> Guarded | None:
        """The live iterator if it has taken a position (been asked for an item)."""
        iterator = self.current()
        return iterator if iterator is not None and iterator.started else None

    def refuse_race(self, action: str) -> None:
        """Raise if ``action`` would race a ``next()`` that is running now."""
        iterator = self.current()
        if iterator is not None and iterator.busy:
            raise RuntimeError(
                f"cannot {action} while next() of {iterator.description} is running (in another "
                "thread, or from inside the iterator); call it between batches"
            )

    def close_live(
        self, reason: str, *, anything_left: bool = True, keep_unstarted: bool = False
    ) -> Guarded | None:
        """Close the live iterator because of ``reason``; return it (``None``: there was none).

        Without ``anything_left`` (it had delivered everything) its later ``next()``
        just stops, as it would have anyway. With ``keep_unstarted`` an iterator not
        yet asked for an item stays live (it starts from wherever the dataset stands
        at its first ``next()``) and ``None`` is returned.
        """
        self.refuse_race(reason)
        iterator = self.current()
        if iterator is not None and keep_unstarted and not iterator.started:
            return None
        if iterator is not None:
            if anything_left:
                iterator.close_from_outside(reason)
            else:
                iterator.close()
        self._ref = None
        return iterator


class Lifecycle:
    """What a dataset and a mixture share about their iterators and their pickles.

    - ``live``: the one live iterator (``LiveSlot``).
    - ``for_loader``: a ``StreamingDataLoader`` is starting its iterator, so a pickle
      made now is the loader's (its workers' progress comes back); copies sent to
      those workers keep it set.
    - ``shipped``: the object was pickled for the workers of a plain DataLoader,
      whose progress never comes back, so its state would be wrong.
    - ``trainer_pid``: in a copy sent to a worker process, the trainer's pid (the
      worker stops when the trainer is gone).
    """

    def __init__(self) -> None:
        self.live = LiveSlot()
        self.for_loader = False
        self.shipped = False
        self.trainer_pid: int | None = None

    def supersede(self, description: str, *, anything_left: bool = True) -> None:
        """A new iterator (``description``) closes the live one."""
        self.live.close_live(f"a new iterator ({description})", anything_left=anything_left)

    def hold(self, iterator: Guarded) -> Guarded | None:
        """Make a loader's iterator the live one; return the one it wraps, if any (the
        object's own iterator, made by a loader with ``num_workers=0``)."""
        inner = self.live.current()
        self.live.hold(iterator)
        return None if inner is iterator else inner  # a loader's next epoch: nothing wrapped

    @contextmanager
    def shipping(self) -> Iterator[None]:
        """While a loader starts its iterator: pickles made meanwhile are the loader's."""
        self.for_loader = True
        try:
            yield
        finally:
            self.for_loader = False

    def set_epoch(self, epoch: int, *, anything_left: bool = True) -> Guarded | None:
        """``set_epoch(epoch)`` closes the live iterator if it has taken a position (an
        unstarted one stays live and starts in the new epoch); return the one closed."""
        return self.live.close_live(f"set_epoch({epoch})", anything_left=anything_left, keep_unstarted=True)

    def refuse_started(self, action: str) -> None:
        """Refuse ``action`` (``load_state_dict``) while an iterator that has taken a
        position is held; one not yet asked for an item starts where ``action`` leaves
        the object.

        Raises:
            RuntimeError: such an iterator is held, or a ``next()`` runs right now.
        """
        self.live.refuse_race(action)
        live = self.live.started()
        if live is not None:
            raise RuntimeError(
                f"cannot {action} while {live.description} has not finished and is still held: it "
                "would go on delivering from the position this call replaces; call its close() "
                "(or drop every reference to it) first"
            )

    def pickled(self, *, for_child: bool) -> Lifecycle:
        """The lifecycle a pickled copy carries: no live iterator, this process as trainer.

        A pickle for a child process (``for_child``) made outside ``shipping`` is a
        plain DataLoader's: this object is then marked shipped and its live iterator
        closed (the workers' progress never comes back).
        """
        copy = Lifecycle()
        copy.for_loader = self.for_loader
        copy.trainer_pid = os.getpid()
        if for_child and not self.for_loader:
            self.shipped = True
            self.live.close_live("the worker processes of a plain DataLoader")
        return copy
