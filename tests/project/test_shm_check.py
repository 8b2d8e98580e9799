"""The suite's own /dev/shm check (``conftest.py``, ``shm_watch.py``) fails a test that
leaves an entry of its run that no process uses, names it, fails the session, and
spares entries a live process uses, those that go within the grace period, and every
entry another job creates and leaves meanwhile on the same machine."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

from shm_watch import SHM

TESTS = Path(__file__).resolve().parents[1]

INNER = """
import multiprocessing
import os
import threading
import time
from pathlib import Path

import _multiprocessing
from multiprocessing.synchronize import SemLock

from shm_watch import SHM

HELD = []


def semaphore(name=None):
    # a named POSIX semaphore no resource tracker knows of: as one a SIGKILLed job leaves;
    # without a name, named as multiprocessing names those of this process
    return _multiprocessing.SemLock(1, 1, 1, name or SemLock._make_name(), False)


def test_leaks():
    semaphore()  # closed when freed, and nobody unlinks the name
    Path(SHM, f"lsr{{os.getpid()}}_shmcheck").touch()  # a ring's name, left behind


def hold_until_killed(ready):
    HELD.append(semaphore())  # named in a worker: a DataLoader worker's share of a queue
    ready.send(HELD[0].name)
    time.sleep(600)  # until the test SIGKILLs it


def test_a_killed_worker_leaks():
    context = multiprocessing.get_context("spawn")
    reader, writer = context.Pipe(duplex=False)
    worker = context.Process(target=hold_until_killed, args=(writer,))
    worker.start()
    writer.close()  # so that a worker that died first makes recv() raise, not wait
    try:
        name = reader.recv()
    finally:
        worker.kill()
        worker.join()
    assert name.startswith("/mp-t"), name  # the worker names it with this run's mark


def test_holds_one_open():
    HELD.append(semaphore("/{held}"))  # mapped by this live process until it exits


def test_clean():
    pass


def test_leaves_one_that_goes_a_moment_later():
    # as a resource tracker removes the semaphores of a process that just exited
    semaphore("/{later}")
    threading.Timer(0.5, _multiprocessing.sem_unlink, ["/{later}"]).start()


def test_while_another_job_leaks_entries():
    # wait (with a deadline) until the other job has left new entries during this test
    before = {{name for name in os.listdir(SHM) if "{token}" in name}}
    deadline = time.monotonic() + 60
    while len({{n for n in os.listdir(SHM) if "{token}" in n}} - before) < 3:
        assert time.monotonic() < deadline, "the other job left nothing"
        time.sleep(0.05)
"""

OTHER_JOB = """
import os, sys, time
import _multiprocessing
from multiprocessing.synchronize import SemLock

# Another job on the machine: it leaves entries in /dev/shm, named as its own
# processes name theirs, until it is stopped, and prints each name first.
token, pid = sys.argv[1], os.getpid()
for n in range(100_000):
    names = [f"chaos-{pid}-{token}-{n}", f"torch_{pid}_{token}_{n}", f"lsr{pid}_{token}_{n}",
             f"psm_{token}{n:08x}"]
    semaphore = SemLock._make_name()  # /mp-<random>, as multiprocessing names one
    print(*names, "sem." + semaphore[1:], flush=True)
    for name in names:
        os.close(os.open(f"/dev/shm/{name}", os.O_CREAT | os.O_RDWR, 0o600))
    _multiprocessing.SemLock(1, 1, 1, semaphore, False)  # freed at once, never unlinked
    time.sleep(0.05)
"""


def test_a_run_fails_only_for_its_own_leftovers_while_another_job_leaves_entries(tmp_path):
    """Another job leaves entries of every kind in /dev/shm throughout an inner pytest
    run; the run's check blames none of them, and still catches the run's own leaks: a
    semaphore and a ring of the test process, and a semaphore of a SIGKILLed worker."""
    token = uuid.uuid4().hex[:10]
    held, later = (f"mp-{kind}check-{token}" for kind in ("held", "later"))
    (tmp_path / "test_inner.py").write_text(INNER.format(held=held, later=later, token=token))
    paths = [str(TESTS), str(TESTS / "support"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    before = set(os.listdir(SHM))
    other = subprocess.Popen(
        [sys.executable, "-c", OTHER_JOB, token], stdout=subprocess.PIPE, text=True, env=env
    )
    inner, first = None, ""
    try:
        first = other.stdout.readline()  # its first entries are made once this is printed
        assert token in first, "the other job did not start"
        inner = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-q", "."],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        out, _ = inner.communicate(timeout=180)
    finally:
        other.kill()
        others = (first + other.communicate(timeout=60)[0]).split()
        if inner is not None and inner.poll() is None:
            inner.kill()
            inner.wait(timeout=60)
        ours = [name for name in set(os.listdir(SHM)) - before if inner and f"t{inner.pid}x" in name]
        for name in [*others, *ours, f"sem.{held}", f"sem.{later}"]:
            (SHM / name).unlink(missing_ok=True)
        if inner is not None:
            (SHM / f"lsr{inner.pid}_shmcheck").unlink(missing_ok=True)
    assert inner.returncode == 1, out
    assert "6 passed, 2 errors" in out, out
    leaked = sorted(name for name in ours if name.startswith("sem."))
    assert len(leaked) == 2, (ours, out)
    assert "ERROR at teardown of test_leaks" in out, out
    assert "ERROR at teardown of test_a_killed_worker_leaks" in out, out
    ring = f"lsr{inner.pid}_shmcheck"
    assert f"test_inner.py::test_leaks left in /dev/shm, used by no process: ['{ring}', 'sem." in out, out
    assert f"/dev/shm/{ring} (appeared during test_inner.py::test_leaks)" in out, out
    for name in leaked:
        assert f"/dev/shm/{name} (appeared during test_inner.py::test_" in out, out
    assert "left in /dev/shm, used by no process (3)" in out, out
    assert held not in out, "an entry a live process maps is not a leftover"
    assert later not in out, "an entry removed within the grace period is not a leftover"
    blamed = [name for name in others if name in out]
    assert len(others) > 15 and not blamed, f"another job's entries were blamed: {blamed}"
