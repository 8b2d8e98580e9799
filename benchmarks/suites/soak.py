"""Soak: one long training run with repeated SIGKILLs and resumes; do resources stay flat?

``python -m benchmarks soak --minutes M`` trains one gloo rank with DataLoader
workers over many epochs of a small table (``tests/procs/chaos_rank.py``, checkpoints
every few steps), SIGKILLs the trainer every so often and resumes it from its last
complete checkpoint. It samples the trainer's resident memory, its open file
descriptors and the number of entries in ``/dev/shm`` about once a second and
prints, for each, the median of the first and of the last quarter of the samples
and whether it stayed flat. Also printed: the largest growth inside one trainer's
life, where a leak per epoch would show even though every kill starts afresh.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SUPPORT = Path(__file__).resolve().parents[2] / "tests" / "support"
PROCS = SUPPORT.parent / "procs"
sys.path.insert(0, str(SUPPORT))

from benchmarks.harness import sections  # noqa: E402

from chaos_checks import latest_checkpoint  # noqa: E402
from chaos_procs import Job, launch, wait_gone  # noqa: E402
from chaos_table import random_table  # noqa: E402

# name -> (relative growth allowed from the first to the last quarter (plus one unit), statistic).
# /dev/shm entries are compared by their minimum: the running job's own queues and rings
# come and go with each iterator's start, and only a rising floor is a leak.
MEASURES = {
    "rss_mib": (0.10, statistics.median),
    "open_fds": (0.0, statistics.median),
    "shm_entries": (0.0, min),
}


@dataclass
class Soak:
    out: Path
    uri: str
    samples: list[dict[str, float]] = field(default_factory=list)
    runs: int = 0
    steps: int = 0
    failures: list[str] = field(default_factory=list)
    lifetimes: list[list[float]] = field(default_factory=list)  # RSS samples of each trainer


def sample(pid: int) -> dict[str, float] | None:
    """The trainer's RSS (MiB) and open descriptors, and the /dev/shm entry count."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    rss = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
    return {"rss_mib": rss / 1024, "open_fds": fds, "shm_entries": len(os.listdir("/dev/shm"))}


def command(soak: Soak, port: int) -> list[str]:
    resume = latest_checkpoint(soak.out)
    return [
        sys.executable,
        str(PROCS / "chaos_rank.py"),
        f"--uri={soak.uri}",
        f"--out={soak.out}",
        f"--run={soak.runs}",
        "--rank=0",
        "--world-size=1",
        f"--port={port}",
        "--workers=2",
        "--batch=8",
        "--splits=4",
        "--seed=11",
        "--ckpt-mode=ranks",
        "--checkpoint-every=5",
        "--epochs=1000000",
        *([f"--resume={resume.folder}"] if resume else []),
    ]


def one_life(soak: Soak, seconds: float, port: int) -> None:
    """Run the trainer for about ``seconds`` (sampling once a second), then SIGKILL it."""
    pids = soak.out / "pids" / f"run{soak.runs}"
    pids.mkdir(parents=True)
    job: Job = launch([command(soak, port)], soak.out, soak.runs, env={"CHAOS_PIDS": str(pids)})
    end, last, life = time.monotonic() + seconds, 0.0, []
    while (line := job.readline(end)) not in (None, ""):
        if line.startswith("step "):
            soak.steps += 1
        if time.monotonic() - last >= 1 and job.rank_pids():
            taken = sample(job.rank_pids()[0])
            if taken is not None:
                soak.samples.append(taken)
                life.append(taken["rss_mib"])
                last = time.monotonic()
    if line == "":
        soak.failures.append(f"trainer life {soak.runs} ended by itself: exit codes {job.exit_codes()}")
    job.kill_ranks([0])
    job.launcher.wait(timeout=60)
    wait_gone([int(name) for name in os.listdir(pids)], timeout=20)
    soak.lifetimes.append(life)
    soak.runs += 1


def verdict(values: list[float], allowed: float, statistic: Any) -> tuple[float, float, bool]:
    quarter = max(1, len(values) // 4)
    first, last = statistic(values[:quarter]), statistic(values[-quarter:])
    return first, last, last <= first * (1 + allowed) + 1


def report(soak: Soak, minutes: float, command: str) -> str:
    """The soak's figures as a Markdown section (a table of the three measures)."""
    lines = [
        "## Soak",
        "",
        f"`{command}`: {minutes:g} min, {soak.runs} trainer lives ({soak.runs - 1} SIGKILLs and "
        f"resumes), {soak.steps} steps, {len(soak.samples)} samples of the trainer's resources.",
        "",
        "| measure | statistic | first quarter | last quarter | verdict |",
        "| --- | --- | ---: | ---: | --- |",
    ]
    for name, (allowed, statistic) in MEASURES.items():
        first, last, flat = verdict([taken[name] for taken in soak.samples], allowed, statistic)
        label = getattr(statistic, "__name__", "median")
        lines.append(f"| {name} | {label} | {first:.1f} | {last:.1f} | {'flat' if flat else 'GROWS'} |")
    growth = [life[-1] - statistics.median(life[: max(1, len(life) // 4)]) for life in soak.lifetimes if life]
    lines += [
        "",
        f"Resident memory grew by at most {max(growth, default=0):.1f} MiB inside one trainer life.",
    ]
    lines += [f"After the last trainer life ended, /dev/shm held {len(os.listdir('/dev/shm'))} entries."]
    lines += [f"FAIL {failure}" for failure in soak.failures]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks soak", description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--life", type=float, default=40.0, help="seconds between kills")
    parser.add_argument("--out", type=Path, default=None, help="Markdown file whose soak section is replaced")
    args = parser.parse_args(argv)
    import numpy as np

    out = Path(tempfile.mkdtemp(prefix="soak-"))
    soak = Soak(out, random_table(out / "table.lance", np.random.default_rng(11)))
    end = time.monotonic() + 60 * args.minutes
    while time.monotonic() < end:
        with socket.socket() as sock:  # a free port for this life's process group
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        one_life(soak, min(args.life, max(5.0, end - time.monotonic())), port)
    command = f"python -m benchmarks soak --minutes {args.minutes:g} --life {args.life:g}"
    sections.publish(report(soak, args.minutes, command), name="soak", out=args.out)
