"""SIGINT while a loader's workers start: nothing alarming is printed, nothing is left.

The trainer (a real process, ``interrupted_start.py``) is interrupted by a real
SIGINT right after its first worker process started; it handles the
``KeyboardInterrupt`` and lets go of the iterator while that worker still
unpickles what it was sent. The worker finds its queues' semaphores unlinked;
it must end without printing a traceback (before the fix: ``FileNotFoundError``
from ``multiprocessing/synchronize.py``). The worker is held at that point by a
FIFO the trainer writes to, not by sleeping.

The trainer runs in a process group of its own, started with SIGINT at its default
and with SIGINT ignored (as ``nohup cmd &`` and many CI runners start jobs; the
trainer restores Python's handler for the signal it sends itself). Once it has
exited, every process of its group (workers, fork server, resource tracker) must
end by itself, and nothing of its is left in ``/dev/shm``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from helpers import make_table
from launching import IGNORING_SIGINT, PROCS, Group

SCRIPT = PROCS / "interrupted_start.py"


@pytest.mark.parametrize("sigint", ["default", "ignored"])
@pytest.mark.parametrize("method", ["default", "forkserver", "spawn"])
def test_a_worker_abandoned_while_it_starts_ends_without_a_traceback(tmp_path, method, sigint):
    uri = make_table(tmp_path / "t.lance", [64])
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    start = IGNORING_SIGINT if sigint == "ignored" else [sys.executable]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with Group(
        [*start, str(SCRIPT), uri, str(fifo), method],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
    ) as trainer:
        out, err = trainer.process.communicate(timeout=180)
        assert trainer.process.returncode == 130, err
        assert "interrupted; 1 worker(s) had started" in out
        for alarming in ("Traceback", "Error", "leaked"):  # nor a leaked-semaphore warning
            assert alarming not in err, err
        trainer.left_nothing()
