"""Peers' packages for a benchmark: installed into this interpreter or into a virtual
environment of their own under a cache folder, and runs of a module in any of them.

A peer whose top-level package clashes with ours (mosaicml-streaming also installs
``streaming``) gets its own environment and its own process; the module runs there
with the repository appended to ``sys.path`` (after the environment's packages, so
the peer's ``streaming`` wins) and the cache folder as its working directory.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import venv
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CONSTRAINTS = ROOT / "scripts" / "constraints.txt"


def cache_dir() -> Path:
    """Where peers' environments live: ``$XDG_CACHE_HOME`` (else ``~/.cache``)/lance-streaming/bench."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "lance-streaming" / "bench"


def env_python(name: str) -> Path:
    """The interpreter of the environment ``name`` (it may not exist yet)."""
    return cache_dir() / f"{name}-venv" / "bin" / "python"


def installed_here(distribution: str) -> str | None:
    """The version of ``distribution`` in this interpreter, or None."""
    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def installed_in(name: str, distribution: str) -> str | None:
    """The version of ``distribution`` in environment ``name``, or None (no such environment)."""
    python = env_python(name)
    if not python.exists():
        return None
    code = f"from importlib.metadata import version; print(version({distribution!r}))"
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=120)
    return done.stdout.strip() or None if done.returncode == 0 else None


def pip_install(python: Path | str, *requirements: str, constrain: bool) -> str:
    """``python -m pip install requirements``; "" or the error's last lines.

    ``constrain``: keep the repository's pins (torch, ...) so this interpreter's
    packages are not upgraded under it.
    """
    command = [str(python), "-m", "pip", "install", "--quiet", *requirements]
    if constrain:
        command += ["-c", str(CONSTRAINTS)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    if done.returncode == 0:
        return ""
    lines = [line for line in done.stderr.splitlines() if not line.startswith("WARNING")]
    return " ".join(lines[-3:])[:400]


def pip_uninstall(python: Path | str, *names: str) -> str:
    """``python -m pip uninstall -y names``; "" or the error."""
    command = [str(python), "-m", "pip", "uninstall", "--quiet", "-y", *names]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    return "" if done.returncode == 0 else done.stderr.strip()[-300:]


def make_env(name: str, *requirements: str) -> str:
    """Create environment ``name`` (if missing) and install ``requirements``; "" or the error."""
    python = env_python(name)
    if not python.exists():
        venv.create(python.parents[1], with_pip=True)
    return pip_install(python, *requirements, constrain=False)


def run_module(
    python: Path | str, module: str, *args: str, timeout: float, cwd: Path | None = None
) -> dict[str, Any]:
    """``module.main(args)`` in a fresh ``python``; its last stdout line as JSON.

    The repository is appended to ``sys.path`` (it comes after the interpreter's own
    packages). The child leads a new process group, killed whole on a timeout, so
    no worker outlives it. A failure comes back as ``{"error": ...}``.
    """
    boot = (
        f"import sys; sys.path.append({str(ROOT)!r}); from {module} import main; sys.exit(main(sys.argv[1:]))"
    )
    where = cwd or cache_dir()
    where.mkdir(parents=True, exist_ok=True)
    child = subprocess.Popen(
        [str(python), "-c", boot, *args],
        cwd=where,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        child.communicate()
        return {"error": f"timed out after {timeout:.0f} s"}
    finally:
        with contextlib.suppress(OSError):
            os.killpg(child.pid, signal.SIGKILL)  # any worker left behind
    lines = out.strip().splitlines()
    if child.returncode != 0 or not lines or not lines[-1].startswith("{"):
        tail = ([line for line in err.strip().splitlines() if line.strip()] or ["no output"])[-1]
        return {"error": f"exit code {child.returncode}: {tail}"[:300]}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def this_python() -> str:
    """This interpreter."""
    return sys.executable
