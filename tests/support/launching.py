"""Start the scripts of ``tests/procs`` as the ranks of one gloo job on 127.0.0.1, as torchrun
would, and read what ``dist_rank.py`` delivered. Each rank finds the shared helpers of
``tests/support`` on its ``PYTHONPATH``.

A trainer a test starts in a process group of its own, and the proof that it left
nothing: ``Group`` runs a script of ``tests/procs`` in a new session, so that its
process group holds the trainer and everything multiprocessing starts for it
(workers, the fork server, the resource tracker), as a scheduler's job does.
Whether the test kills the group (``kill``) or lets the trainer end,
``left_nothing`` waits, up to a deadline, for every process of the group to end,
and fails naming those still running (then kills them) and any ``/dev/shm`` entry
of this run new since the group started. Leaving the ``with`` block kills whatever
of the group still runs, so a failing test leaves no worker behind either.
A job whose processes are not one process group (torchrun agents on two "nodes", a
Ray cluster) carries a token in the environment of everything it starts instead:
``wait_for_the_job_to_end`` waits for every live process holding it to end.
``IGNORING_SIGINT`` starts a command with SIGINT ignored, as ``nohup cmd &`` and
many CI runners start their jobs (the disposition survives ``exec``).
"""

from __future__ import annotations

import json
import os
import secrets
import select
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from streaming import StreamingDataset

from helpers import ids_of
from shm_watch import ours, shm_names

SUPPORT = Path(__file__).resolve().parent
PROCS = SUPPORT.parent / "procs"
RANK_SCRIPT = PROCS / "dist_rank.py"
NUM_SPLITS = 12


def rank_env() -> dict[str, str]:
    """This process's environment with ``tests/support`` first on ``PYTHONPATH``."""
    paths = [str(SUPPORT), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def launch_script(script: Path, out: Path, world_size: int, *flags: str) -> tuple[list[int], list[str]]:
    """Run ``script`` as ``world_size`` gloo ranks (``--out --rank --world-size --port``
    plus ``flags``), like torchrun would; return their exit codes and outputs."""
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                str(script),
                f"--out={out}",
                f"--rank={rank}",
                f"--world-size={world_size}",
                f"--port={port}",
                *flags,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=rank_env(),
        )
        for rank in range(world_size)
    ]
    codes, outputs = [], []
    try:
        for process in processes:
            output, _ = process.communicate(timeout=300)
            codes.append(process.returncode)
            outputs.append(output)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    return codes, outputs


def free_port() -> int:
    """A port free now on 127.0.0.1, below Linux's ephemeral range (32768 up): a port the
    kernel hands out (``bind(0)``) can be given again, as the source port of any outgoing
    connection, before the rank that was told it listens (a chaos run failed so, with
    EADDRINUSE); a port outside the range is only ever taken by another listener."""
    for _ in range(200):
        port = 20_000 + secrets.randbelow(12_000)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port between 20000 and 32000 on 127.0.0.1")


def launch(uri: str, out: Path, world_size: int, **options) -> list[int]:
    """Start ``world_size`` rank processes like torchrun would; return their exit codes."""
    flags = [
        f"--{name.replace('_', '-')}" + ("" if value is True else f"={value}")
        for name, value in options.items()
        if value is not None
    ]
    codes, outputs = launch_script(RANK_SCRIPT, out, world_size, f"--uri={uri}", *flags)
    if options.get("kill_at") is None:
        assert codes == [0] * world_size, "\n".join(outputs)
    return codes


def delivered(out: Path, *, up_to_step: int | None = None) -> list[dict]:
    records = []
    for path in sorted(out.glob("rank*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if up_to_step is None or record["step"] <= up_to_step:
                records.append(record)
    return records


def ids(records: list[dict], epoch: int = 0) -> list[int]:
    return [i for record in records if record["epoch"] == epoch for i in record["ids"]]


def planned(uri: str, seed: int, epoch: int = 0) -> Counter:
    data = StreamingDataset(
        uri, num_splits=NUM_SPLITS, shuffle_seed=seed, epoch=epoch, block_rows=4, shuffle_buffer_size=96
    )
    return Counter(ids_of(data))


IGNORING_SIGINT = [
    sys.executable,
    "-c",
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])",
]
"""Prefix of a command that runs it with SIGINT ignored."""


def members(pgid: int) -> dict[int, bytes]:
    """pid -> state (``b"R"``, ``b"S"``, ``b"Z"``, ...) of every process of group ``pgid``."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_bytes().rsplit(b")", 1)[1].split()
        except (FileNotFoundError, NotADirectoryError, ProcessLookupError):
            continue
        if int(fields[2]) == pgid:
            found[int(entry.name)] = fields[0]
    return found


def running(pgid: int) -> list[int]:
    """Pids of the processes of group ``pgid`` that have not ended (zombies have)."""
    return sorted(pid for pid, state in members(pgid).items() if state != b"Z")


def await_exits(pids: Sequence[int], *, within: float) -> list[int]:
    """Wait up to ``within`` seconds for each of ``pids`` (any process, not only a child)
    to exit; return those still running then."""
    handles = {}
    for pid in pids:
        try:
            handles[os.pidfd_open(pid)] = pid
        except ProcessLookupError:
            continue
    poller = select.poll()
    for handle in handles:
        poller.register(handle, select.POLLIN)  # readable once the process has exited
    waiting, deadline = set(handles), time.monotonic() + within
    try:
        while waiting and time.monotonic() < deadline:
            for handle, _event in poller.poll(max(1, int((deadline - time.monotonic()) * 1000))):
                poller.unregister(handle)
                waiting.discard(handle)
    finally:
        for handle in handles:
            os.close(handle)
    return sorted(handles[handle] for handle in waiting)


def await_group_end(pgid: int, *, within: float) -> list[int]:
    """Wait up to ``within`` seconds for every process of group ``pgid`` to end; return
    those still running then."""
    deadline = time.monotonic() + within
    left = running(pgid)
    while left and time.monotonic() < deadline:
        await_exits(left, within=deadline - time.monotonic())
        left = running(pgid)
    return left


def kill_group(pgid: int, *, within: float = 60.0) -> int:
    """SIGKILL every process of group ``pgid``; return how many there were once all have ended."""
    pids = running(pgid)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return 0
    left = await_group_end(pgid, within=within)
    assert not left, f"processes {left} of group {pgid} outlived SIGKILL"
    return len(pids)


class Group:
    """``command`` run in a session (and process group) of its own; see the module docstring."""

    def __init__(self, command: Sequence[str], **popen: Any) -> None:
        self.shm_before = shm_names()
        popen.setdefault("env", rank_env())
        self.process = subprocess.Popen(list(command), start_new_session=True, **popen)
        self.pgid = self.process.pid

    def __enter__(self) -> Group:
        return self

    def __exit__(self, *exception: object) -> None:
        if running(self.pgid):
            kill_group(self.pgid)
        self.process.wait(timeout=60)

    def kill(self) -> int:
        """SIGKILL the whole group (a scheduler ending the job); how many processes it held."""
        killed = kill_group(self.pgid)
        self.process.wait(timeout=60)
        return killed

    def left_nothing(self, *, within: float = 30.0) -> None:
        """Fail unless every process of the group ends within ``within`` seconds and no
        ``/dev/shm`` entry of this run is new since the group started."""
        self.process.wait(timeout=within)
        left = await_group_end(self.pgid, within=within)
        if left:
            described = {pid: state.decode() for pid, state in members(self.pgid).items()}
            kill_group(self.pgid)
            raise AssertionError(f"processes of group {self.pgid} still ran {within:.0f} s on: {described}")
        new = ours(shm_names() - self.shm_before)
        assert not new, f"the group {self.pgid} left {len(new)} entries in /dev/shm: {sorted(new)}"


def job_processes(token: str) -> list[int]:
    """Live processes whose environment carries this job's token (agents, ranks, their workers)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if f"LS_JOB={token}".encode() in environ.split(b"\0") and state != "Z":
            found.append(int(entry))
    return found


def wait_for_the_job_to_end(token: str) -> None:
    """Every process of the job (its environment holds ``LS_JOB=token``) ends within 30 s."""
    deadline = time.monotonic() + 30  # orphaned DataLoader workers notice their rank is gone
    while job_processes(token) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = {pid: Path(f"/proc/{pid}/cmdline").read_bytes()[:120] for pid in job_processes(token)}
    for pid in left:  # a failing test leaves nothing running either
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes of the job outlived it: {left}"
