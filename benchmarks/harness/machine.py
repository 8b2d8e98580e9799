"""Facts about the machine a benchmark ran on: cores, CPU, memory, versions, commit, load.

Every suite writes these next to its figures, so a number can be read with the
machine and the load that produced it.
"""

from __future__ import annotations

import datetime
import os
import platform
import re
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("lance-streaming", "pylance", "lancedb", "torch", "pyarrow", "numpy")


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return ""


def _git(*args: str) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip()


def load_average() -> str:
    """The 1, 5 and 15 minute load averages (other work sharing the cores skews rates)."""
    return " / ".join(_read("/proc/loadavg").split()[:3]) or "unknown"


def machine_facts() -> dict[str, str]:
    """Cores, CPU, memory, date, package versions and the commit measured."""
    cpu = re.search(r"^model name\s*:\s*(.+)$", _read("/proc/cpuinfo"), re.MULTILINE)
    memory = re.search(r"^MemTotal:\s+(\d+) kB", _read("/proc/meminfo"), re.MULTILINE)
    facts = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cores": str(len(os.sched_getaffinity(0))),
        "cpu": cpu.group(1) if cpu else platform.processor() or "unknown",
        "memory": f"{int(memory.group(1)) / 2**20:.1f} GiB" if memory else "unknown",
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load": load_average(),
    }
    for package in PACKAGES:
        try:
            facts[package] = version(package)
        except PackageNotFoundError:
            facts[package] = "not installed"
    commit = _git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = _git("status", "--porcelain", "--", "streaming")
    facts["commit"] = commit + (" + uncommitted changes in streaming/" if dirty else "")
    return facts
