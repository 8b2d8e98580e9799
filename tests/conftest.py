"""Fixtures: the table shapes every guarantee is checked on; and a run leaves /dev/shm as it found it.

A test that leaves an entry in ``/dev/shm`` that no live process maps or holds open
(a ``sem.mp-*`` semaphore, a ``torch_*`` or ``lsr*`` segment: nothing will ever
remove it) fails at its teardown, naming the entries; the session fails too if any
such entry, new since it started, is left at its end (with the test it appeared in).
Entries some live process still uses are not leftovers: a running iterator's
queues, or another job's on a shared machine; nor are those removed within
``GRACE_SECONDS`` (by the resource tracker of a process that just exited).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from helpers import make_table

SHM = Path("/dev/shm")
GRACE_SECONDS = 3.0
"""How long an unused entry may take to go: a process that just exited has no mapping
left, and its resource tracker removes its semaphores a moment later."""

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


def shm_names() -> set[str]:
    """The names in ``/dev/shm`` now (none where there is no ``/dev/shm``)."""
    try:
        return set(os.listdir(SHM))
    except FileNotFoundError:
        return set()


def _inode(path: str | Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def _inodes_in_use() -> set[int]:
    """Inodes of ``/dev/shm`` files some live process maps or holds open.

    glibc creates a semaphore under a temporary name and links it to its real one,
    so a mapping may show another name: inodes are compared, not names.
    """
    inodes: set[int] = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:  # gone, or not ours to read
            continue
        inodes.update(int(line.split()[4]) for line in maps.splitlines() if " /dev/shm/" in line)
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(f"{SHM}/"):
                    inodes.add(os.stat(f"/proc/{pid}/fd/{fd}").st_ino)
            except OSError:
                continue
    return inodes


def _unused(names: set[str]) -> list[str]:
    present = {name: _inode(SHM / name) for name in names}
    present = {name: inode for name, inode in present.items() if inode is not None}
    if not present:
        return []
    used = _inodes_in_use()
    return sorted(name for name, inode in present.items() if inode not in used)


def shm_leftovers(names: set[str], *, grace: float = GRACE_SECONDS) -> list[str]:
    """Those of ``names`` still in ``/dev/shm`` that no live process maps or holds open,
    and that nobody removes within ``grace`` seconds."""
    deadline = time.monotonic() + grace
    left = _unused(names)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)  # polling files with a deadline, not a guess at timing
        left = _unused(set(left))
    return left


class ShmWatch:
    """Which test each new ``/dev/shm`` entry first appeared in, for the session's check."""

    def __init__(self) -> None:
        self.before = shm_names()
        self.origin: dict[str, str] = {}

    def seen(self, names: set[str], nodeid: str) -> None:
        for name in names:
            self.origin.setdefault(name, nodeid)

    def report(self) -> list[str]:
        """One line per leftover new since the session started, naming its test."""
        left = shm_leftovers(shm_names() - self.before)
        return [f"{SHM / name} (appeared during {self.origin.get(name, 'no test')})" for name in left]


SHM_WATCH = pytest.StashKey[ShmWatch]()


@pytest.fixture(scope="session", autouse=True)
def _shm_watch(request: pytest.FixtureRequest) -> ShmWatch:
    """What ``/dev/shm`` held before the first test (set up before every other fixture)."""
    watch = request.config.stash.setdefault(SHM_WATCH, ShmWatch())
    return watch


@pytest.fixture(autouse=True)
def _leaves_no_shm_behind(request: pytest.FixtureRequest, _shm_watch: ShmWatch):
    """Fail a test that leaves a ``/dev/shm`` entry nobody uses (see the module docstring)."""
    before = shm_names()
    yield
    new = shm_names() - before
    if not new:
        return
    _shm_watch.seen(new, request.node.nodeid)
    left = shm_leftovers(new)
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
