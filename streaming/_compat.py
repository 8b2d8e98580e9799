"""Every private torch and standard-library hook lance-streaming relies on, in one place.

Each function names the private attribute it uses and what breaks without it.
Tested on torch 2.13 with Python 3.10 to 3.13; ``tests/project/test_compat.py`` calls every
one of them against the installed versions, so an upgrade that removes or renames
one fails there first, not in a user's training run.
"""

from __future__ import annotations

import functools
import multiprocessing.context
import multiprocessing.forkserver
import multiprocessing.resource_tracker
import multiprocessing.spawn
import multiprocessing.synchronize
import multiprocessing.util
import sys
import weakref
from collections.abc import Callable, Iterable
from types import CodeType, FrameType
from typing import Any

__all__ = [
    "caller_frame",
    "delivering_workers",
    "forget_queue_names",
    "forget_semaphore_names",
    "forkserver_preload",
    "guard_done_event",
    "hold_index_queues",
    "inheriting",
    "intercept_receive",
    "pickling_for_child_process",
    "pin_memory",
    "profiler_enabled",
    "queue_semaphores",
    "sender",
    "shared_memory_fd",
    "shutdown_workers",
    "spawn_main_code",
    "worker_processes",
]

Receive = Callable[[float], "tuple[bool, Any]"]
"""One wait of at most the given seconds for a worker's message: (received, message)."""


def pin_memory(data: Any, device: str | None = None) -> Any:
    """``torch.utils.data._utils.pin_memory.pin_memory``: pins nested batches as the
    DataLoader's pin-memory thread does (our worker batches wrap theirs)."""
    from torch.utils.data._utils.pin_memory import pin_memory as pin

    return pin(data, device)  # type: ignore[no-untyped-call]


def profiler_enabled() -> bool:
    """``torch.autograd._profiler_enabled``: whether a torch profiler records now. The
    loader's plain path (``num_workers=0``) labels each ``next()`` as torch's iterator
    does only then, since the label costs about as much as the batch when nobody records."""
    return bool(_profiler_flag()())


@functools.cache
def _profiler_flag() -> Callable[[], bool]:
    """The function behind ``profiler_enabled``, imported once (an import statement per
    call goes through the import machinery: ``torch._C._autograd`` is no entry of
    ``sys.modules``)."""
    from torch._C._autograd import _profiler_enabled

    return _profiler_enabled  # type: ignore[no-any-return]


def shutdown_workers(iterator: Any) -> None:
    """``_MultiProcessingDataLoaderIter._shutdown_workers``: stop a DataLoader iterator's
    worker processes now, not when the iterator is garbage-collected (its ``__del__``
    calls the same method). A single-process iterator has none and is left alone.

    Once every worker has ended, the names of the iterator's queue semaphores leave
    ``/dev/shm`` too (``forget_queue_names``): no process opens them any more, and an
    iterator closed before all its workers delivered (by ``iter()`` again, ``set_epoch``,
    an exception) may stay referenced, so a later SIGKILL of the whole job would leave
    them behind.
    """
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if shutdown is None:
        return
    shutdown()
    workers = worker_processes(iterator)
    if workers and not any(worker.is_alive() for worker in workers):
        forget_queue_names(iterator)


def hold_index_queues(iterator: Any) -> None:
    """``_MultiProcessingDataLoaderIter._index_queues``: keep them reachable until the
    iterator itself is freed, so its ``__del__`` can still stop the workers.

    ``__del__`` stops each worker by putting a final ``None`` on its index queue, which
    the queue's feeder thread writes to the worker's pipe. An iterator freed by the
    cycle collector (a loader with persistent workers inside a reference cycle of the
    user's, a Lightning module, say) is torn down together with its queues, and the
    collector runs the queues' finalizers (which end their feeder threads) before
    ``__del__``: the ``None`` is never written, and torch waits 5 s for each worker,
    then kills it. Held here (by a finalizer of the iterator, which lets go of them when
    the iterator goes), the queues are not part of that garbage, and ``__del__`` finds
    their feeder threads running. A single-process iterator has none.
    """
    queues = list(getattr(iterator, "_index_queues", []))
    if queues:
        weakref.finalize(iterator, queues.clear)


def persistent_iterator(loader: Any) -> Any | None:
    """``DataLoader._iterator``: the iterator whose workers a loader with
    ``persistent_workers=True`` keeps (``None`` before the first ``iter()``)."""
    return getattr(loader, "_iterator", None)


def drop_persistent_iterator(loader: Any) -> None:
    """Stop the workers a loader keeps and forget them: the next ``iter()`` starts new ones."""
    iterator = persistent_iterator(loader)
    if iterator is not None:
        shutdown_workers(iterator)
        loader._iterator = None


def worker_processes(iterator: Any) -> list[Any]:
    """``_MultiProcessingDataLoaderIter._workers``: the worker processes of an iterator."""
    return list(getattr(iterator, "_workers", []))


def forkserver_preload(context: Any, modules: tuple[str, ...]) -> None:
    """Add ``modules`` to what a fork server not started yet imports once for all workers.

    ``set_forkserver_preload`` is public but replaces the list, and the current list
    lives in ``multiprocessing.forkserver._forkserver._preload_modules``; modules the
    program asked for are kept.
    """
    server = getattr(multiprocessing.forkserver, "_forkserver", None)
    current = list(getattr(server, "_preload_modules", ["__main__"]))
    context.set_forkserver_preload(list(dict.fromkeys([*current, *modules])))


def pickling_for_child_process() -> bool:
    """``multiprocessing.context.get_spawning_popen()``: True while multiprocessing pickles
    a process object to start a child (spawn, forkserver), as its own ``Lock`` checks;
    False for ``pickle.dumps`` or ``copy.deepcopy`` by the user."""
    return multiprocessing.context.get_spawning_popen() is not None  # type: ignore[attr-defined]


def caller_frame(depth: int = 1) -> FrameType:
    """``sys._getframe``: the frame ``depth`` calls above the function that calls this
    (1: its caller), to find who called us without building a traceback
    (``inspect.stack()`` reads every frame's source lines). Raises ``ValueError`` when
    the stack is not that deep, as ``sys._getframe`` does."""
    return sys._getframe(depth + 1)


def inheriting() -> bool:
    """``multiprocessing.current_process()._inheriting``: True while a spawned (or
    fork-server) child unpickles what its parent sent it, before the target runs."""
    return bool(getattr(multiprocessing.current_process(), "_inheriting", False))


def spawn_main_code() -> CodeType:
    """``multiprocessing.spawn._main``'s code: the function a spawned (or fork-server)
    child unpickles what it was sent in, and runs its target from; a frame of it in a
    traceback tells that the child's own start raised."""
    return multiprocessing.spawn._main.__code__  # type: ignore[attr-defined]


def shared_memory_fd(memory: Any) -> int:
    """``SharedMemory._fd``: the file descriptor of a POSIX segment, to reserve its pages
    with ``os.posix_fallocate`` (a full ``/dev/shm`` then fails at once, not as a
    SIGBUS on a later write)."""
    fd: int = memory._fd
    return fd


def intercept_receive(iterator: Any, receive: Callable[[Receive, float], tuple[bool, Any]]) -> None:
    """``_MultiProcessingDataLoaderIter._try_get_data(timeout)``: route every wait of
    ``iterator`` for a worker's message through ``receive(original, timeout)``.

    torch waits there for ``timeout`` (or 5 s with ``timeout=0``) before it checks
    whether a worker died. ``original`` waits once, for the seconds it is given,
    and raises torch's ``RuntimeError`` when a worker has died. The iterator is held
    weakly, so it is still freed (and its workers stopped) when it is dropped.
    """
    original = type(iterator)._try_get_data
    reference = weakref.ref(iterator)

    def once(wait: float) -> tuple[bool, Any]:
        result: tuple[bool, Any] = original(reference(), wait)
        return result

    from torch.utils.data._utils import MP_STATUS_CHECK_INTERVAL

    def intercepted(timeout: float = MP_STATUS_CHECK_INTERVAL) -> tuple[bool, Any]:
        return receive(once, timeout)

    iterator._try_get_data = intercepted


def sender(iterator: Any, message: Any) -> int | None:
    """``_MultiProcessingDataLoaderIter._task_info``: the id of the worker that sent
    ``message`` (``(task index, data)``, as ``_try_get_data`` returns it), or None."""
    task = getattr(iterator, "_task_info", {}).get(message[0]) if isinstance(message, tuple) else None
    return int(task[0]) if task else None


def delivering_workers(iterator: Any) -> list[int]:
    """``_MultiProcessingDataLoaderIter._workers_status``: the ids of the workers torch
    still waits on (not exhausted, not found dead, not shut down)."""
    return [worker for worker, active in enumerate(getattr(iterator, "_workers_status", [])) if active]


LOCK_SECONDS = 0.5
"""How long the trainer waits for the lock of the workers' "done" event before it
takes the lock as held by a dead worker (a live one holds it for microseconds)."""


class _DoneEvent:
    """The trainer's side of ``_MultiProcessingDataLoaderIter._workers_done_event``.

    Every worker takes that ``multiprocessing.Event``'s lock (its condition's) to
    read it, once per index it receives; a worker killed while holding it leaves it
    taken for good, and torch's ``is_set()`` and ``set()`` in the trainer (marking a
    dead worker, shutting the rest down) would block forever. This stand-in does
    what they do (``Event``'s ``_cond`` and ``_flag``) with a bounded wait for the
    lock, and remembers ``set()`` itself when the lock is gone.
    """

    def __init__(self, event: Any) -> None:
        self.event = event
        self._set = False

    def is_set(self) -> bool:
        event = self.event
        if not event._cond.acquire(True, LOCK_SECONDS):
            return self._set
        try:
            if event._flag.acquire(False):
                event._flag.release()
                return True
            return self._set
        finally:
            event._cond.release()

    def set(self) -> None:
        self._set = True
        event = self.event
        if not event._cond.acquire(True, LOCK_SECONDS):
            return  # its workers stop through their index queues, or torch terminates them
        try:
            event._flag.acquire(False)
            event._flag.release()
            event._cond.notify_all()
        finally:
            event._cond.release()


def guard_done_event(iterator: Any) -> None:
    """Put a ``_DoneEvent`` in front of the iterator's "workers done" event (the
    workers got the event itself when they started)."""
    event = getattr(iterator, "_workers_done_event", None)
    if event is not None and not isinstance(event, _DoneEvent):
        iterator._workers_done_event = _DoneEvent(event)


def _semaphores_in(value: Any, depth: int, found: dict[int, Any]) -> None:
    if isinstance(value, multiprocessing.synchronize.SemLock):
        found[id(value)] = value
    elif depth > 0 and type(value).__module__.startswith("multiprocessing."):
        for inner in getattr(value, "__dict__", {}).values():
            _semaphores_in(inner, depth - 1, found)


def queue_semaphores(iterator: Any) -> list[Any]:
    """The ``multiprocessing.synchronize.SemLock`` objects of an iterator's queues.

    ``_MultiProcessingDataLoaderIter._worker_result_queue``, ``_index_queues`` and
    ``_workers_done_event`` hold them in private attributes (a ``Queue``'s ``_rlock``,
    ``_wlock`` and ``_sem``; an ``Event``'s ``_flag`` and its ``Condition``'s four),
    found here by walking the multiprocessing objects, so a renamed one is still found.
    """
    roots = [
        getattr(iterator, "_worker_result_queue", None),
        getattr(getattr(iterator, "_workers_done_event", None), "event", None)
        or getattr(iterator, "_workers_done_event", None),
        *getattr(iterator, "_index_queues", []),
    ]
    found: dict[int, Any] = {}
    for root in roots:
        _semaphores_in(root, 3, found)
    return list(found.values())


def forget_queue_names(iterator: Any) -> int:
    """``forget_semaphore_names`` of ``queue_semaphores(iterator)``, once per iterator (a
    second call removes nothing: a name unlinked once may by then be another process's).
    Call it only once every worker of the iterator has opened them, or has ended."""
    if getattr(iterator, "_ls_queue_names_forgotten", False):
        return 0
    iterator._ls_queue_names_forgotten = True
    return forget_semaphore_names(queue_semaphores(iterator))


def _stdlib_unlinkers(names: set[str]) -> dict[str, Any]:
    """``multiprocessing.util._finalizer_registry``: the ``Finalize`` that
    ``SemLock.__init__`` registers to unlink each name (callback ``SemLock._cleanup``)."""
    cleanup = getattr(multiprocessing.synchronize.SemLock, "_cleanup", None)
    registry = getattr(multiprocessing.util, "_finalizer_registry", {})
    unlinkers = {}
    for finalizer in list(registry.values()):
        arguments = getattr(finalizer, "_args", None) or (None,)
        if getattr(finalizer, "_callback", None) is cleanup and arguments[0] in names:
            unlinkers[arguments[0]] = finalizer
    return unlinkers


def forget_semaphore_names(locks: Iterable[Any]) -> int:
    """Remove the ``/dev/shm`` names of ``locks`` now; return how many were removed.

    A POSIX semaphore lives on while processes have it open; its name is needed
    only by a process that has yet to open it. Under spawn and forkserver
    ``SemLock`` keeps the name (``_semlock.name``) until a finalizer unlinks it, so
    a SIGKILL of the whole job leaves it behind. This unlinks it
    (``_multiprocessing.sem_unlink``), tells the resource tracker
    (``resource_tracker.unregister``) and cancels the stdlib finalizer, which would
    unlink the name again later, by then perhaps another process's semaphore.
    Call it only once every process that will open the locks has opened them.
    """
    from _multiprocessing import sem_unlink  # type: ignore[attr-defined]

    names = {lock._semlock.name for lock in locks if lock._semlock.name is not None}
    unlinkers = _stdlib_unlinkers(names)
    removed = 0
    for name in sorted(names):
        try:
            sem_unlink(name)
        except OSError:  # already gone, or not ours to remove: leave it to the stdlib
            continue
        multiprocessing.resource_tracker.unregister(name, "semaphore")
        if name in unlinkers:
            unlinkers[name].cancel()
        removed += 1
    return removed
