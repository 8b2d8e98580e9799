"""The suite's own /dev/shm check (``conftest.py``) fails a test that leaves an entry no
process uses, names it, fails the session, and spares entries a live process uses or
that go within the grace period."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

from conftest import SHM

TESTS = Path(__file__).resolve().parent

INNER = """
import threading

import _multiprocessing

HELD = []


def semaphore(name):
    # a named POSIX semaphore no resource tracker knows of: as one a SIGKILLed job leaves
    return _multiprocessing.SemLock(1, 1, 1, name, False)


def test_leaks():
    semaphore("/{leaked}")  # closed when freed, and nobody unlinks the name


def test_holds_one_open():
    HELD.append(semaphore("/{held}"))  # mapped by this live process until it exits


def test_clean():
    pass


def test_leaves_one_that_goes_a_moment_later():
    # as a resource tracker removes the semaphores of a process that just exited
    semaphore("/{later}")
    threading.Timer(0.5, _multiprocessing.sem_unlink, ["/{later}"]).start()
"""


def test_a_leaking_test_is_named_and_fails_the_session_and_a_used_entry_is_spared(tmp_path):
    token = uuid.uuid4().hex[:10]
    leaked, held, later = (f"mp-{kind}check-{token}" for kind in ("leak", "held", "later"))
    (tmp_path / "test_inner.py").write_text(INNER.format(leaked=leaked, held=held, later=later))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-q", "."],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        for name in (leaked, held, later):
            (SHM / f"sem.{name}").unlink(missing_ok=True)
    out = done.stdout
    assert done.returncode == 1, out
    assert "4 passed, 1 error" in out, out
    assert "ERROR at teardown of test_leaks" in out, out
    assert f"test_inner.py::test_leaks left in /dev/shm, used by no process: ['sem.{leaked}']" in out, out
    assert f"/dev/shm/sem.{leaked} (appeared during test_inner.py::test_leaks)" in out, out
    assert held not in out, "an entry a live process maps is not a leftover"
    assert later not in out, "an entry removed within the grace period is not a leftover"
