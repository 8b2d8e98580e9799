"""What each rank of the docs/multinode.md example trains, for ``tests/jobs/test_multinode.py``.

Python imports this module at start-up in every process started with this folder on
``PYTHONPATH``. In a ``torchrun`` rank (``TORCHELASTIC_RUN_ID`` set) whose environment
names a folder in ``LS_RANK_LOG``, ``streaming.StreamingDataLoader`` becomes a subclass
that logs every batch as the training loop receives it, so the example runs unchanged:

- ``LS_RANK_LOG/attempts/<n>/rank<r>.jsonl``: ``{"step", "ids"}`` a batch, where ``n``
  numbers the starts of the worker group (attempts) and the step counts on from the
  checkpoint the attempt loaded (``checkpoint.json`` in the example's shared folder,
  its second argument);
- ``LS_RANK_LOG/attempts/<n>/resumed.json``: that step and the world size (rank 0).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def _resumed_step() -> int:
    checkpoint = Path(sys.argv[2]) / "checkpoint.json"
    return int(json.loads(checkpoint.read_text())["step"]) if checkpoint.exists() else 0


def _attempt_number(attempts: Path, rank: int) -> int:
    """Rank 0 counts the attempts logged so far and tells every rank (a collective): the
    agents' restart counts differ when one agent's workers failed and the other's only
    saw the rendezvous open again."""
    import torch
    import torch.distributed as dist

    number = torch.tensor([len(list(attempts.glob("*"))) if rank == 0 and attempts.exists() else 0])
    dist.broadcast(number, src=0)
    return int(number.item())


def _install(folder: Path) -> None:
    import torch.distributed as dist

    import streaming

    class LoggedLoader(streaming.StreamingDataLoader):
        def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
            rank, world_size, step = dist.get_rank(), dist.get_world_size(), _resumed_step()
            attempt = folder / "attempts" / str(_attempt_number(folder / "attempts", rank))
            attempt.mkdir(parents=True, exist_ok=True)
            if rank == 0:
                (attempt / "resumed.json").write_text(json.dumps({"step": step, "world_size": world_size}))
            with (attempt / f"rank{rank}.jsonl").open("a") as log:
                for batch in super().__iter__():
                    step += 1
                    log.write(json.dumps({"step": step, "ids": batch["id"].tolist()}) + "\n")
                    log.flush()  # before the loop's body: a SIGKILL there loses no line
                    yield batch

    streaming.StreamingDataLoader = LoggedLoader  # type: ignore[misc]


if "TORCHELASTIC_RUN_ID" in os.environ and os.environ.get("LS_RANK_LOG") and len(sys.argv) > 2:
    _install(Path(os.environ["LS_RANK_LOG"]))
