"""Fixtures: the table shapes every guarantee is checked on; and a run leaves /dev/shm as it found it.

A test that leaves an entry in ``/dev/shm`` that this run created and that no live
process maps or holds open (a ``sem.mp-*`` semaphore, a ``torch_*`` or ``lsr*``
segment: nothing will ever remove it) fails at its teardown, naming the entries; the
session fails too if any such entry, new since it started, is left at its end (with
the test it appeared in). Entries some live process still uses are not leftovers (a
running iterator's queues), nor are those removed within ``GRACE_SECONDS`` (by the
resource tracker of a process that just exited). Entries other jobs on the machine
create are never judged: ``shm_watch`` says how an entry is known to be this run's.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

import shm_watch
from helpers import make_table
from shm_watch import GRACE_SECONDS, SHM, Run, shm_leftovers, shm_names

__all__ = ["GRACE_SECONDS", "SHM", "shm_leftovers", "shm_names"]

# No property test has a deadline: the suite must pass while other programs share the
# machine's cores, and an example's time says nothing of its correctness (two tests of
# tests/state failed Hypothesis's 200 ms default at load 7-10, 341 and 628 ms).
settings.register_profile("shared-machine", deadline=None)
settings.load_profile("shared-machine")

# name -> (fragment sizes, deleted ids)
SHAPES = {
    "one_fragment": ([97], []),
    "uneven_fragments": ([5, 40, 1, 23, 64, 9], []),
    "emptied_fragment": ([20, 15, 30], list(range(20, 35))),  # the middle fragment is emptied
    "deleted_rows": ([30, 41, 26], [0, 3, 31, 32, 33, 70, 96]),
}


@pytest.fixture(params=sorted(SHAPES))
def table_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A small table in each shape of ``SHAPES``."""
    sizes, deleted = SHAPES[request.param]
    return make_table(tmp_path / f"{request.param}.lance", sizes, deleted=deleted)


@pytest.fixture
def small_uri(tmp_path: Path) -> str:
    """A 120-row table in four uneven fragments with a few deleted rows."""
    return make_table(tmp_path / "small.lance", [50, 7, 33, 34], deleted=[4, 55, 60])


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """An empty folder with a short path, removed afterwards: a child's ``TMPDIR``. Python
    puts a fork server's socket there, and a socket path over 107 bytes (as pytest's
    ``tmp_path`` of a long test name can make it) fails with "AF_UNIX path too long"."""
    folder = Path(tempfile.mkdtemp(prefix="ls-", dir="/tmp"))  # /tmp itself: a short path is the point
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


class ShmWatch:
    """This run's processes and entries, and which test each new entry first appeared in."""

    def __init__(self) -> None:
        self.before = shm_names()
        self.origin: dict[str, str] = {}
        self.run = Run()

    def seen(self, names: set[str], nodeid: str) -> None:
        for name in names:
            self.origin.setdefault(name, nodeid)

    def report(self) -> list[str]:
        """One line per leftover of this run new since the session started, naming its test."""
        left = self.run.leftovers(shm_names() - self.before)
        return [f"{SHM / name} (appeared during {self.origin.get(name, 'no test')})" for name in left]


SHM_WATCH = pytest.StashKey[ShmWatch]()


def pytest_configure(config: pytest.Config) -> None:
    """Mark this run's semaphore names and start watching its processes, before any test."""
    watch = config.stash.setdefault(SHM_WATCH, ShmWatch())
    shm_watch.CURRENT = watch.run
    watch.run.mark_semaphores()
    watch.run.start()


def pytest_unconfigure(config: pytest.Config) -> None:
    watch = config.stash.get(SHM_WATCH, None)
    if watch is not None:
        watch.run.stop()


@pytest.fixture(scope="session")
def _shm_watch(request: pytest.FixtureRequest) -> ShmWatch:
    """The run's watch (made by ``pytest_configure``)."""
    return request.config.stash[SHM_WATCH]


@pytest.fixture(autouse=True)
def _leaves_no_shm_behind(request: pytest.FixtureRequest, _shm_watch: ShmWatch):
    """Fail a test that leaves a ``/dev/shm`` entry nobody uses (see the module docstring)."""
    before = shm_names()
    yield
    new = shm_names() - before
    if not new:
        return
    _shm_watch.seen(new, request.node.nodeid)
    left = _shm_watch.run.leftovers(new)
    if left:
        pytest.fail(
            f"{request.node.nodeid} left in /dev/shm, used by no process: {left}. "
            "A test must leave the machine as it found it (clean up what a SIGKILLed process group "
            "leaves with the command of docs/limits.md)",
            pytrace=False,
        )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the session if entries new since it started are left in ``/dev/shm``."""
    watch = session.config.stash.get(SHM_WATCH, None)
    lines = watch.report() if watch is not None else []
    if not lines:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    message = f"left in /dev/shm, used by no process ({len(lines)}):\n" + "\n".join(lines)
    if reporter is not None:
        reporter.write_sep("=", "/dev/shm leftovers", red=True)
        reporter.write_line(message)
    if session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
