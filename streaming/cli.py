"""Command line: ``python -m streaming demo`` (more commands come with the docs issue)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lance-streaming", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="train, checkpoint, resume on another topology, verify")
    demo.add_argument("--workdir", type=Path, default=None, help="folder for the table and checkpoints")
    demo.add_argument("--world-size", type=int, default=2, help="ranks before the checkpoint")
    demo.add_argument("--resume-world-size", type=int, default=3, help="ranks after the resume")
    demo.add_argument("--step", choices=["build", "train", "resume"], help=argparse.SUPPRESS)
    demo.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    demo.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code (2 for usage errors, 1 for failures)."""
    args = _parser().parse_args(argv)
    from . import demo

    if args.step == "build":
        demo.build(args.workdir)
        return 0
    if args.step is not None:
        demo.train(args.workdir, rank=args.rank, world_size=args.world_size, port=args.port, phase=args.step)
        return 0
    ok = demo.run(workdir=args.workdir, world_size=args.world_size, resume_world_size=args.resume_world_size)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
