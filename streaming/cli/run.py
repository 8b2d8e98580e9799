"""``lance-streaming demo`` and ``bench``: the commands that run a program of their own."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

__all__ = ["run_bench", "run_demo", "run_demo_step"]


def run_demo(args: argparse.Namespace, extra: list[str]) -> int:
    """Run the whole demo (build, train on W ranks, resume on W' ranks, verify)."""
    from .. import demo

    ok = demo.run(workdir=args.workdir, world_size=args.world_size, resume_world_size=args.resume_world_size)
    return 0 if ok else 1


def run_demo_step(args: argparse.Namespace) -> int:
    """One step of the demo in its own process (started by ``demo.run``)."""
    from .. import demo

    if args.step == "build":
        demo.build(args.workdir)
    else:
        demo.train(args.workdir, rank=args.rank, world_size=args.world_size, port=args.port, phase=args.step)
    return 0


def run_bench(args: argparse.Namespace, extra: list[str]) -> int:
    """Run the ``bench`` suite (``python -m benchmarks bench``) from the source checkout here.

    Raises:
        RuntimeError: the current folder is not the root of a source checkout (the
            benchmarks ship with the source repository, not with the package).
    """
    if not (Path.cwd() / "benchmarks" / "__main__.py").is_file():
        raise RuntimeError(
            f"no benchmarks/__main__.py in {Path.cwd()}: the benchmarks ship with the source "
            "repository of lance-streaming, not with the installed package; get the source "
            "(git clone the repository), then from its root run lance-streaming bench, or "
            "python -m benchmarks --list for every suite"
        )
    return subprocess.run([sys.executable, "-m", "benchmarks", "bench", *extra], check=False).returncode
