"""The shared entry of the scripts the tests start as the ranks of one job.

``launching.launch_script`` (``tests/support``) starts each rank with ``--out``,
``--rank``, ``--world-size`` and ``--port``; ``parser`` reads them and ``join`` forms
the gloo group on 127.0.0.1 from them, the way a training script does under torchrun.
``as_torchrun`` sets the variables torchrun would instead, for a framework (Accelerate,
the Hugging Face Trainer) that forms the group itself.
"""

from __future__ import annotations

import argparse
import os
from datetime import timedelta
from pathlib import Path


def parser(*, alone: bool = False) -> argparse.ArgumentParser:
    """A parser of the flags every rank gets: ``--out`` (a path), ``--rank``,
    ``--world-size`` and ``--port``; a script adds its own flags to it.

    Args:
        alone: the script may also run as a job of one process: the rank defaults to 0,
            the world size to 1 and the port to 0 (no group is formed then).
    """
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    for name, default in (("--rank", 0), ("--world-size", 1), ("--port", 0)):
        parser.add_argument(name, type=int, required=not alone, default=default if alone else None)
    return parser


def parse_with_uri() -> argparse.Namespace:
    """The common flags plus ``--uri`` (the table), parsed: what a rank that builds its
    own loader over one table takes (the Accelerate and Hugging Face scripts)."""
    flags = parser()
    flags.add_argument("--uri", required=True)
    return flags.parse_args()


def join(args: argparse.Namespace, *, timeout_s: float = 60) -> None:
    """Form the gloo group of ``args.world_size`` ranks at ``127.0.0.1:args.port`` as rank
    ``args.rank``; collectives wait at most ``timeout_s`` seconds."""
    import torch.distributed as dist

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{args.port}",
        rank=args.rank,
        world_size=args.world_size,
        timeout=timedelta(seconds=timeout_s),
    )


def as_torchrun(args: argparse.Namespace) -> None:
    """Set what torchrun sets for this rank on one machine (``RANK``, ``LOCAL_RANK``,
    ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``)."""
    os.environ.update(
        RANK=str(args.rank),
        LOCAL_RANK=str(args.rank),
        WORLD_SIZE=str(args.world_size),
        LOCAL_WORLD_SIZE=str(args.world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(args.port),
    )
