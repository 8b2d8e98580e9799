"""Worker processes end cleanly: spawn workers skip native teardown, as forked ones do.

A spawn worker that ran the interpreter's whole native teardown aborted now and
then ("terminate called without an active exception"), and the trainer's loader
raised "worker killed by signal: Aborted" after all the work was done. The proof
that teardown is skipped: an exit handler registered before the worker's dataset
started never runs (native teardown comes after exit handlers), while the exit
code is still the one Python would have given.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
from pathlib import Path

import pytest

from streaming import StreamingDataLoader, StreamingDataset
from streaming.workers import watchdog

from helpers import make_table


class MarkAtExit:
    """A ``worker_init_fn`` whose worker writes a file from an exit handler."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def __call__(self, worker_id: int) -> None:
        atexit.register(Path(self.folder, f"ran-{os.getpid()}").write_text, "teardown ran")


def _armed_child(folder: str, fail: bool) -> None:
    MarkAtExit(folder)(0)
    watchdog.end_like_forked_children()
    if fail:
        raise RuntimeError("the target failed")


@pytest.mark.parametrize(("fail", "code"), [(False, 0), (True, 1)])
def test_a_spawned_child_skips_teardown_and_keeps_its_exit_code(tmp_path, fail, code):
    child = multiprocessing.get_context("spawn").Process(target=_armed_child, args=(str(tmp_path), fail))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == code
    assert list(tmp_path.iterdir()) == [], "the exit handler registered before arming ran"


def test_the_trainer_process_is_never_armed():
    watchdog.end_like_forked_children()
    assert watchdog._ending["armed"] is False, "the process pytest runs in would end with os._exit"


@pytest.mark.parametrize("context", [None, "spawn"])
def test_loader_workers_exit_with_zero_and_without_teardown(tmp_path, context):
    uri = make_table(tmp_path / "t.lance", [60, 60])
    marks = tmp_path / "marks"
    marks.mkdir()
    data = StreamingDataset(uri, num_splits=4, shuffle_seed=3, block_rows=4, shuffle_buffer_size=32)
    batches = StreamingDataLoader(
        data,
        batch_size=8,
        num_workers=2,
        multiprocessing_context=context,
        worker_init_fn=MarkAtExit(str(marks)),
        timeout=120,
    )
    first = iter(batches)
    next(first)
    workers = list(first._batches._workers)
    second = iter(batches)  # supersedes the first: its workers are stopped mid-epoch
    assert sum(len(batch["id"]) for batch in second) == 4 * 30 - 8
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0, f"worker {worker.pid} ended with {worker.exitcode}"
    assert list(marks.iterdir()) == [], "a worker ran the interpreter's teardown"
