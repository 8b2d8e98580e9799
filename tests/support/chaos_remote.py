"""The chaos campaign against a faulted LanceDB server (``chaos.py --remote``).

The trial's table folder is served by the project's stand-in (``streaming.testing``): the
ranks read it as a remote table (``chaos_rank.py --stand-in``) while the stand-in drops
connections, cuts answers short, answers 503 and 409 and stalls, drawn anew for every
run; a trainer kill sometimes takes the server away with it for a while, so the next run
starts against a server that is not there yet. A worker kill SIGKILLs one DataLoader
worker: the trainer's loop stops with the error that names it, and the run resumes from
its last checkpoint like after any other kill.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import numpy as np

from streaming.testing import FAST_RETRIES, LanceDBStandIn
from streaming.testing.standin import KEY_VARIABLE, Outage

__all__ = ["KILLS", "LanceDBStandIn", "Outage", "inject", "kill_worker", "serve", "table"]

KEY = "sk-chaos-0123456789"
TABLE = "table"  # the trial's table.lance, served as table "table" of database "bench"
KILLS = ("all", "worker")
FAULTS = (
    {"drop": True},
    {"cut": True},
    {"status": 503},
    {"status": 409},
    {"stall_s": 0.3},
)
OUTAGE_S = 1.0  # a server away for longer than the client's own retries (FAST_RETRIES)


def serve(root: Path) -> LanceDBStandIn:
    """The stand-in over the trial's folder, started."""
    return LanceDBStandIn(str(root), api_key=KEY).start()


def table(server: LanceDBStandIn) -> object:
    """The trial's table through the stand-in (for the planned rows)."""
    return server.connect(client_config=FAST_RETRIES).open_table(TABLE)


def environment() -> dict[str, str]:
    """What a rank needs to open the table through the stand-in (the key, never on a command line)."""
    return {KEY_VARIABLE: KEY}


def inject(server: LanceDBStandIn, rng: np.random.Generator) -> int:
    """Queue 2-5 drawn faults for the next requests (queries and all); returns how many."""
    server.clear_faults()
    count = int(rng.integers(2, 6))
    for _ in range(count):
        fault = FAULTS[int(rng.integers(len(FAULTS)))]
        route = "query" if rng.random() < 0.8 else "*"
        server.fault(route, count=int(rng.integers(1, 3)), **fault)
    return count


def kill_worker(pids: Path, rng: np.random.Generator) -> bool:
    """SIGKILL one DataLoader worker of the run whose pids ``chaos_rank.record_worker`` left in
    ``pids``; False when none was alive to kill."""
    workers = sorted(int(name) for name in os.listdir(pids))
    for pid in [int(p) for p in rng.permutation(workers)] if workers else []:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            return True
    return False


def named_the_worker(stderr: Path) -> bool:
    """Whether the trainer's error (its stderr) named the worker, its signal and the fix."""
    text = stderr.read_text(errors="replace") if stderr.exists() else ""
    return "was killed by SIGKILL" in text and "call iter() on the loader again" in text
