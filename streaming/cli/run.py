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
    """Run ``python -m benchmarks.bench`` from the source checkout in the current folder."""
    if not (Path.cwd() / "benchmarks" / "bench.py").is_file():
        raise RuntimeError(
            f"no benchmarks/bench.py in {Path.cwd()}: the benchmarks ship with the source "
            "checkout, not the package; run lance-streaming bench from the repository root"
        )
    return subprocess.run([sys.executable, "-m", "benchmarks.bench", *extra], check=False).returncode
