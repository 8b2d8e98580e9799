"""SIGINT while a loader's workers start: nothing alarming is printed.

The trainer (a real process, ``interrupted_start.py``) is interrupted by a real
SIGINT right after its first worker process started; it handles the
``KeyboardInterrupt`` and lets go of the iterator while that worker still
unpickles what it was sent. The worker finds its queues' semaphores unlinked;
it must end without printing a traceback (before the fix: ``FileNotFoundError``
from ``multiprocessing/synchronize.py``). The worker is held at that point by a
FIFO the trainer writes to, not by sleeping.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from helpers import make_table
from launching import PROCS

SCRIPT = PROCS / "interrupted_start.py"


@pytest.mark.parametrize("method", ["default", "forkserver", "spawn"])
def test_a_worker_abandoned_while_it_starts_ends_without_a_traceback(tmp_path, method):
    uri = make_table(tmp_path / "t.lance", [64])
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), uri, str(fifo), method],
        capture_output=True,
        text=True,
        timeout=180,
        env=environment,
        check=False,
    )
    assert done.returncode == 130, done.stderr
    assert "interrupted; 1 worker(s) had started" in done.stdout
    for alarming in ("Traceback", "Error", "leaked"):  # nor a leaked-semaphore warning
        assert alarming not in done.stderr, done.stderr
