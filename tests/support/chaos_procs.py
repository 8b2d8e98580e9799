"""Processes of the chaos campaign: launch a job, read its progress, kill it, find leftovers."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import shm_watch

LAUNCHER = Path(__file__).parents[1] / "procs" / "chaos_launch.py"
SHM = Path("/dev/shm")


@dataclass
class Job:
    """One run: a launcher (its own session and process group) and its ranks."""

    launcher: subprocess.Popen[bytes]
    pids_file: Path
    rc_file: Path
    buffer: bytes = b""
    lines: list[str] = field(default_factory=list)

    def readline(self, deadline: float) -> str | None:
        """The next line rank 0 printed; '' at end of output; None past the deadline."""
        stdout = self.launcher.stdout
        assert stdout is not None
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([stdout], [], [], left)[0]:
                return None
            chunk = os.read(stdout.fileno(), 4096)
            if not chunk:
                return ""
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        self.lines.append(line.decode(errors="replace"))
        return self.lines[-1]

    def rank_pids(self) -> list[int]:
        return list(json.loads(self.pids_file.read_text())) if self.pids_file.exists() else []

    def exit_codes(self) -> list[int] | None:
        return list(json.loads(self.rc_file.read_text())) if self.rc_file.exists() else None

    def kill_group(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.launcher.pid, signal.SIGKILL)

    def kill_ranks(self, ranks: list[int]) -> None:
        pids = self.rank_pids()
        for rank in ranks:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pids[rank], signal.SIGKILL)


def launch(commands: list[list[str]], folder: Path, run: int, *, env: dict[str, str]) -> Job:
    """Start every rank's command under one launcher in a new session."""
    pids_file, rc_file = folder / f"pids-run{run}.json", folder / f"rc-run{run}.json"
    launcher = subprocess.Popen(
        [sys.executable, str(LAUNCHER), str(pids_file), str(rc_file), json.dumps(commands)],
        stdout=subprocess.PIPE,
        stderr=(folder / f"pids-run{run}-rank0.err").open("w"),
        start_new_session=True,
        env={**os.environ, **env},
    )
    return Job(launcher, pids_file, rc_file)


def session_members(session: int) -> list[int]:
    """Live (not zombie) processes of a session, from /proc."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[3]) == session and fields[0] not in "ZX":
            members.append(int(entry))
    return members


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    """Wait (on pidfds, no polling) until the processes exit; return those still alive."""
    deadline = time.monotonic() + timeout
    alive = []
    for pid in pids:
        try:
            handle = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        try:
            ready = select.select([handle], [], [], max(0.0, deadline - time.monotonic()))[0]
            if not ready and not _zombie(pid):
                alive.append(pid)
        finally:
            os.close(handle)
    return alive


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX"
    except OSError:
        return True


def shm_entries() -> set[str]:
    return set(os.listdir(SHM))


def mapped_shm_inodes() -> set[int]:
    """Inodes of /dev/shm files some live process has mapped, as an open semaphore is.

    glibc creates a semaphore under a temporary name and links it to its real one,
    so a mapping shows the temporary name: compare inodes, not names.
    """
    inodes: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            maps = Path(f"/proc/{entry}/maps").read_text()
        except OSError:
            continue
        inodes.update(int(line.split()[4]) for line in maps.splitlines() if " /dev/shm/" in line)
    return inodes


def shm_leftovers(before: set[str], pids: set[int]) -> tuple[list[str], list[str]]:
    """New /dev/shm entries of these pids (torch_, lsr), and new unmapped ``sem.mp-*`` semaphores."""
    new = shm_entries() - before
    owned = [name for name in new if _owner(name) in pids]
    semaphores = [name for name in shm_watch.ours(new) if name.startswith("sem.mp-")]  # not another job's
    if semaphores:
        mapped = mapped_shm_inodes()
        semaphores = [name for name in semaphores if _inode(name) not in mapped | {None}]
    return sorted(owned), sorted(semaphores)


def _inode(name: str) -> int | None:
    try:
        return (SHM / name).stat().st_ino
    except FileNotFoundError:
        return None


def _owner(name: str) -> int | None:
    """The pid in a torch (``torch_<pid>_...``) or transfer (``lsr<pid>_...``) segment name."""
    for prefix in ("torch_", "lsr"):
        if name.startswith(prefix):
            digits = name[len(prefix) :].split("_", 1)[0]
            return int(digits) if digits.isdigit() else None
    return None
