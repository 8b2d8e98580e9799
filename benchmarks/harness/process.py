"""Run one measurement in a fresh interpreter and read back its JSON line.

A fresh process measures start-up and memory without what earlier measurements
left behind (imports, caches, peak RSS).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
"""The repository root: the child runs there, so ``benchmarks`` imports."""


def run_json(module: str, *args: str, timeout: float) -> dict[str, Any]:
    """``python -m module args`` in a fresh interpreter; its last stdout line as JSON.

    A failure comes back as ``{"error": ...}`` (a timeout, or the last line of stderr).
    """
    command = [sys.executable, "-m", module, *args]
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit code {done.returncode}: {tail}"[:200]}
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result
