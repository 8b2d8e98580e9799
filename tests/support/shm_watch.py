"""Which ``/dev/shm`` entries this test run created, so the suite judges only those.

On a shared machine other jobs create and leave entries in ``/dev/shm`` while the
suite runs (another run's semaphores, a chaos campaign's segments). An entry is
this run's when one of these facts about its creator says so:

1. **Its name carries this run's mark.** The pytest process names its
   multiprocessing semaphores ``/mp-t<pid>x<token>-...`` instead of ``/mp-...``
   (``Run.mark_semaphores``), and every process it starts through multiprocessing
   (fork, forkserver, spawn: DataLoader workers, managers) inherits that prefix with
   its ``Process`` object, so the semaphores they name carry it too. A script a test
   starts as a plain subprocess takes the mark with ``adopt_mark`` (it travels in
   ``MARK_VARIABLE``).
2. **Its name carries the pid of a process of this run**: ``torch_<pid>_...``
   (torch's shared tensors) and ``lsr<pid>_...`` (the loader's rings).
3. **A process of this run held it** (mapped it or had it open) when the watcher
   first saw it.

A process of this run is the pytest process or one descended from it. The watcher,
a thread of the pytest process, records them every ``POLL_SECONDS`` and at the end
of every test (by pid and start time, so that a pid reused by another job's process
is not taken for ours; an orphan stays ours after its parent died), and which new
entries they hold. An entry that none of these attributes (say, a semaphore a
plain subprocess's Python named and let go of before the watcher looked) is not
judged: the check may miss such a leak, but never blames another job for its own.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import secrets
import threading
import time
from collections import defaultdict
from pathlib import Path

SHM = Path("/dev/shm")
POLL_SECONDS = 0.1
GRACE_SECONDS = 3.0
"""How long an unused entry may take to go: a process that just exited has no mapping
left, and its resource tracker removes its semaphores a moment later."""
PID_NAMES = (re.compile(r"torch_(\d+)_"), re.compile(r"lsr(\d+)_"))
"""Names that carry the pid of the process that created them."""
MARK_VARIABLE = "LANCE_STREAMING_TEST_SHM_MARK"
"""The run's mark, in the environment of every process the pytest process starts."""


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


def _processes() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, start time in clock ticks) of every process now."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as file:
                fields = file.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):  # gone
            continue
        found[int(entry)] = (int(fields[1]), int(fields[19]))
    return found


def held_inodes(pids: set[int] | None = None) -> set[int]:
    """Inodes of ``/dev/shm`` files that these processes (default: every process) map or
    hold open.

    glibc creates a semaphore under a temporary name and links it to its real one,
    so a mapping may show another name: inodes are compared, not names.
    """
    if pids is None:
        pids = {int(entry) for entry in os.listdir("/proc") if entry.isdigit()}
    inodes: set[int] = set()
    for pid in pids:
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
    used = held_inodes()
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


def adopt_mark() -> None:
    """In a script a test started as a subprocess: name this process's multiprocessing
    semaphores (and its children's) with the test run's mark, so that the run knows
    them as its own. Outside a test run it does nothing."""
    mark = os.environ.get(MARK_VARIABLE)
    if mark:
        multiprocessing.current_process()._config["semprefix"] = f"/{mark}"


CURRENT: Run | None = None
"""The run of this pytest process (``conftest.py`` sets it), for tests that check
``/dev/shm`` themselves around a job they start."""


def ours(names: set[str]) -> set[str]:
    """Those of ``names`` this test run created (see the module docstring); outside a
    pytest run (a chaos campaign started by hand), all of them."""
    if CURRENT is None:
        return set(names)
    CURRENT.sample()
    return {name for name in names if CURRENT.ours(name)}


class Run:
    """The processes of this test run and the ``/dev/shm`` entries they created."""

    def __init__(self) -> None:
        self.root = os.getpid()
        self.mark = f"mp-t{self.root}x{secrets.token_hex(2)}"
        self._members: set[tuple[int, int]] = set()  # (pid, start time)
        self._pids = {self.root}
        self._held: set[str] = set()
        self._seen = shm_names()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def mark_semaphores(self) -> None:
        """Name this process's multiprocessing semaphores (and its children's) with the mark."""
        # multiprocessing keeps the prefix of semaphore names in the process's _config,
        # which every Process it starts copies (and carries across spawn and forkserver)
        multiprocessing.current_process()._config["semprefix"] = f"/{self.mark}"
        os.environ[MARK_VARIABLE] = self.mark  # for the scripts tests start (``adopt_mark``)

    def start(self) -> None:
        """Record now, then every ``POLL_SECONDS`` on a daemon thread until ``stop``."""
        self.sample()
        self._thread = threading.Thread(target=self._poll, name="shm-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _poll(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            self.sample()

    def sample(self) -> None:
        """Record the run's processes now, and the new entries they hold."""
        processes = _processes()
        with self._lock:
            members = set(self._members)
        live = {pid for pid, (_, start) in processes.items() if (pid, start) in members}
        live.add(self.root)
        children = defaultdict(list)
        for pid, (parent, _) in processes.items():
            children[parent].append(pid)
        stack = list(live)
        while stack:
            for child in children[stack.pop()]:
                if child not in live:
                    live.add(child)
                    stack.append(child)
        names = shm_names()
        with self._lock:
            new = names - self._seen
        inodes = held_inodes(live) if new else set()
        with self._lock:
            self._members |= {(pid, processes[pid][1]) for pid in live if pid in processes}
            self._pids |= live
            self._held |= {name for name in new if _inode(SHM / name) in inodes}
            self._seen |= names

    def ours(self, name: str) -> bool:
        """Whether this run created the entry ``name`` (see the module docstring)."""
        if name.startswith(f"sem.{self.mark}-"):
            return True
        with self._lock:
            for pattern in PID_NAMES:
                found = pattern.match(name)
                if found is not None and int(found.group(1)) in self._pids:
                    return True
            return name in self._held

    def leftovers(self, names: set[str]) -> list[str]:
        """Those of ``names`` this run created and left: no live process uses them."""
        self.sample()  # the processes and holders of the moment, before judging
        return shm_leftovers({name for name in names if self.ours(name)})
