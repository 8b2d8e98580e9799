"""Every private torch and standard-library hook lance-streaming relies on, in one place.

Each function names the private attribute it uses and what breaks without it.
Tested on torch 2.13 with Python 3.10 to 3.13; ``tests/test_compat.py`` calls every
one of them against the installed versions, so an upgrade that removes or renames
one fails there first, not in a user's training run.
"""

from __future__ import annotations

import multiprocessing.context
import multiprocessing.forkserver
from typing import Any

__all__ = [
    "forkserver_preload",
    "pickling_for_child_process",
    "pin_memory",
    "shared_memory_fd",
    "shutdown_workers",
    "worker_processes",
]


def pin_memory(data: Any, device: str | None = None) -> Any:
    """``torch.utils.data._utils.pin_memory.pin_memory``: pins nested batches as the
    DataLoader's pin-memory thread does (our worker batches wrap theirs)."""
    from torch.utils.data._utils.pin_memory import pin_memory as pin

    return pin(data, device)  # type: ignore[no-untyped-call]


def shutdown_workers(iterator: Any) -> None:
    """``_MultiProcessingDataLoaderIter._shutdown_workers``: stop a DataLoader iterator's
    worker processes now, not when the iterator is garbage-collected (its ``__del__``
    calls the same method). A single-process iterator has none and is left alone."""
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()


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


def shared_memory_fd(memory: Any) -> int:
    """``SharedMemory._fd``: the file descriptor of a POSIX segment, to reserve its pages
    with ``os.posix_fallocate`` (a full ``/dev/shm`` then fails at once, not as a
    SIGBUS on a later write)."""
    fd: int = memory._fd
    return fd
