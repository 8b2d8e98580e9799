"""Start the scripts of ``tests/procs`` as the ranks of one gloo job on 127.0.0.1, as torchrun
would, and read what ``dist_rank.py`` delivered. Each rank finds the shared helpers of
``tests/support`` on its ``PYTHONPATH``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path

from streaming import StreamingDataset

from helpers import ids_of

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
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
