"""Every private torch / stdlib hook of ``streaming._compat``, against the installed versions.

A torch or Python upgrade that removes or changes one of them fails here, by name.
"""

from __future__ import annotations

import gc
import multiprocessing
import multiprocessing.forkserver
import os
import pickle
import time
from multiprocessing import shared_memory

import pytest
from torch.utils.data import DataLoader, IterableDataset

from streaming import _compat

_SEEN: list[bool] = []


class Probe:
    """Records, as it is pickled, whether multiprocessing is starting a child with it."""

    def __getstate__(self) -> dict:
        _SEEN.append(_compat.pickling_for_child_process())
        return {}


def do_nothing(probe: Probe) -> None:
    """A child process target."""


class Inherited:
    """Records, as a child process unpickles it, whether the child is still starting."""

    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, state: dict) -> None:
        self.while_unpickled = _compat.inheriting()


def report_start(inherited: Inherited) -> None:
    """A child process target: exit code 0 when ``inheriting`` was True while its argument
    was unpickled and is False now, and ``spawn._main`` is on the stack that runs it."""
    frames, frame = [], _compat.caller_frame(0)
    while frame is not None:
        frames.append(frame.f_code)
        frame = frame.f_back
    code = 0 if inherited.while_unpickled and not _compat.inheriting() else 3
    raise SystemExit(code if _compat.spawn_main_code() in frames else 4)


def test_a_child_is_inheriting_while_it_unpickles_and_runs_under_spawns_main():
    """A fork-server child (the workers' default) starts as a spawned one does, through
    ``spawn._main``, which sets ``_inheriting`` while it unpickles."""
    process = multiprocessing.get_context("forkserver").Process(target=report_start, args=(Inherited(),))
    process.start()
    process.join(timeout=60)
    assert process.exitcode == 0, "3: _inheriting is no longer set while unpickling; 4: spawn._main moved"
    assert _compat.inheriting() is False, "the trainer is no starting child"


def called_by(depth: int) -> str:
    return _compat.caller_frame(depth).f_code.co_name


def test_caller_frame_is_the_frame_that_many_calls_above_its_caller():
    def outer() -> str:
        return called_by(2)

    assert called_by(0) == "called_by"
    assert called_by(1) == "test_caller_frame_is_the_frame_that_many_calls_above_its_caller"
    assert outer() == "test_caller_frame_is_the_frame_that_many_calls_above_its_caller"
    with pytest.raises(ValueError):
        called_by(100_000)


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_pickling_for_a_child_process_is_told_apart_from_a_users_pickle(method):
    _SEEN.clear()
    pickle.dumps(Probe())
    process = multiprocessing.get_context(method).Process(target=do_nothing, args=(Probe(),))
    process.start()
    process.join(timeout=60)
    assert process.exitcode == 0
    assert _SEEN == [False, True], "get_spawning_popen() no longer marks a child-process pickle"


class Numbers(IterableDataset):
    def __iter__(self):
        return iter(range(1000))


def test_shutdown_workers_stops_a_dataloaders_worker_processes():
    loader = DataLoader(Numbers(), batch_size=2, num_workers=2, multiprocessing_context="forkserver")
    iterator = iter(loader)
    next(iterator)
    workers = _compat.worker_processes(iterator)
    assert len(workers) == 2 and all(worker.is_alive() for worker in workers), "_workers changed"
    _compat.shutdown_workers(iterator)
    for worker in workers:
        worker.join(timeout=30)
        assert not worker.is_alive(), "_shutdown_workers() left a worker running"
    _compat.shutdown_workers(iter(DataLoader(Numbers())))  # single-process: nothing to stop


def test_held_index_queues_let_a_collected_iterator_stop_its_workers_at_once():
    """Without ``hold_index_queues`` the cycle collector ends the index queues' feeder
    threads before the iterator's ``__del__``, whose final ``None`` then never reaches
    the workers: torch joins each for 5 s and kills it (exit code -15)."""
    loader = DataLoader(
        Numbers(), batch_size=2, num_workers=2, persistent_workers=True, multiprocessing_context="forkserver"
    )
    iterator = iter(loader)
    next(iterator), next(iterator)  # both workers have started (batches alternate between them)
    _compat.hold_index_queues(iterator)
    workers = _compat.worker_processes(iterator)
    cycle: dict = {"loader": loader, "iterator": iterator}
    cycle["self"] = cycle
    del loader, iterator, cycle
    started = time.monotonic()
    gc.collect()
    took = time.monotonic() - started
    for worker in workers:
        worker.join(timeout=5)
    codes = [worker.exitcode for worker in workers]
    assert codes == [0, 0], f"_index_queues changed: torch killed its workers ({codes})"
    assert took < 4.0, f"collecting the iterator took {took:.1f} s"
    _compat.hold_index_queues(iter(DataLoader(Numbers())))  # single-process: nothing to hold


def test_forkserver_preload_keeps_the_list_and_adds_modules():
    server = multiprocessing.forkserver._forkserver
    assert hasattr(server, "_preload_modules"), "the fork server's preload list moved"
    context = multiprocessing.get_context("forkserver")
    before = list(server._preload_modules)
    _compat.forkserver_preload(context, ("json",))
    assert server._preload_modules[: len(before)] == before
    assert "json" in server._preload_modules


def test_pin_memory_walks_nested_batches():
    batch = {"text": ["a", "b"], "pair": ("x", {"y": "z"})}
    assert _compat.pin_memory(batch, None) == batch


def test_shared_memory_fd_is_the_segments_descriptor():
    memory = shared_memory.SharedMemory(create=True, size=4096)
    try:
        assert os.fstat(_compat.shared_memory_fd(memory)).st_size >= 4096
    finally:
        memory.close()
        memory.unlink()


def forkserver_iterator():
    loader = DataLoader(Numbers(), batch_size=2, num_workers=2, multiprocessing_context="forkserver")
    return iter(loader)


def test_intercept_receive_sees_every_wait_sender_names_the_worker_and_a_death_raises():
    iterator = forkserver_iterator()
    assert _compat.delivering_workers(iterator) == [0, 1]
    senders, waits = [], []

    def receive(once, timeout):
        waits.append(once)
        received, message = once(timeout)
        if received:
            senders.append(_compat.sender(iterator, message))
        return received, message

    _compat.intercept_receive(iterator, receive)
    numbers = [int(value) for _ in range(5) for value in next(iterator)]
    assert numbers == [0, 1, 0, 1, 2, 3, 2, 3, 4, 5], "each worker yields its own copy of the range"
    assert set(senders) == {0, 1}, "_task_info no longer maps a message to its worker"
    worker = _compat.worker_processes(iterator)[1]
    worker.kill()
    worker.join(timeout=30)
    with pytest.raises(RuntimeError, match=str(worker.pid)):  # torch's own check, on an empty wait
        for _ in range(1000):
            waits[-1](0.01)
    _compat.shutdown_workers(iterator)
    assert _compat.delivering_workers(iterator) == [], "_workers_status still marks stopped workers"


def test_queue_semaphores_are_the_named_semaphores_and_their_names_can_go_early():
    iterator = forkserver_iterator()
    next(iterator), next(iterator)  # both workers have started and opened the queues
    locks = _compat.queue_semaphores(iterator)
    names = [lock._semlock.name for lock in locks]
    assert len(names) == 8 + 3 * 2, "result queue 3, done event 5, index queue 3 per worker"
    files = [f"/dev/shm/sem.{name.lstrip('/')}" for name in names]
    assert all(os.path.exists(file) for file in files)
    assert len(_compat._stdlib_unlinkers(set(names))) == len(names), "SemLock's finalizers moved"
    assert _compat.forget_semaphore_names(locks) == len(names)
    assert not any(os.path.exists(file) for file in files), "sem_unlink left a name"
    assert _compat._stdlib_unlinkers(set(names)) == {}, "the stdlib finalizer would unlink again"
    rest = [int(value) for batch in iterator for value in batch]  # the queues work on
    assert sorted(rest) == sorted([*range(2, 1000), *range(2, 1000)])
    assert _compat.forget_semaphore_names([]) == 0


def test_the_done_event_guard_reads_and_sets_the_event_and_survives_a_held_lock():
    """``guard_done_event``: is_set()/set() of the real event, and a bounded wait when a
    dead worker holds its lock (the lock is taken here and never released)."""
    context = multiprocessing.get_context("spawn")

    class Iterator:
        _workers_done_event = context.Event()

    iterator = Iterator()
    _compat.guard_done_event(iterator)
    guarded = iterator._workers_done_event
    assert guarded.is_set() is False
    guarded.set()
    assert guarded.is_set() is True and guarded.event.is_set(), "the workers' event is set too"
    held = Iterator()
    held._workers_done_event = context.Event()
    _compat.guard_done_event(held)
    held._workers_done_event.event._cond._lock.acquire()  # a worker died holding it
    assert held._workers_done_event.is_set() is False
    held._workers_done_event.set()
    assert held._workers_done_event.is_set() is True, "remembered without the lock"


def test_profiler_enabled_is_true_only_while_a_profiler_records():
    import torch.profiler

    assert _compat.profiler_enabled() is False
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        assert _compat.profiler_enabled() is True
    assert _compat.profiler_enabled() is False
