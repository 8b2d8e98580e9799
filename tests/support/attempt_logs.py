"""What every attempt of a restarted job trained, as logged by its ranks, and the check
that the attempts together delivered the epoch exactly once.

A job logs each start of its worker group (an attempt) to ``attempts/<n>/``: rank 0 the
step and world size it resumed from (``resumed.json``), each rank every batch it
received, before the step's collectives (``rank<r>.jsonl``: ``{"step", "ids"}``). Used
by the torchrun jobs of ``test_multinode.py`` and the Ray Train jobs of ``test_ray.py``.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path


def attempts(shared: Path) -> list[dict]:
    """Every start of the worker group, in order: resume step, world size, logs by rank."""
    found = []
    for folder in sorted((shared / "attempts").iterdir(), key=lambda path: int(path.name)):
        resumed = json.loads((folder / "resumed.json").read_text())
        ranks = {
            int(path.stem.removeprefix("rank")): [json.loads(line) for line in path.read_text().splitlines()]
            for path in folder.glob("rank*.jsonl")
        }
        found.append({**resumed, "ranks": ranks})
    return found


def check_exactly_once(found: list[dict], expected: Counter) -> None:
    """What each attempt delivered up to the checkpoint the next one resumed from, and all
    of the last one, is the epoch exactly once; each rank took every one of those steps."""
    delivered: Counter = Counter()
    for index, attempt in enumerate(found):
        last = index == len(found) - 1
        until = None if last else found[index + 1]["step"]
        assert sorted(attempt["ranks"]) == list(range(attempt["world_size"]))
        kept = {
            rank: [record for record in records if until is None or record["step"] <= until]
            for rank, records in attempt["ranks"].items()
        }
        end = until if until is not None else max(record["step"] for record in kept[0])
        steps = list(range(attempt["step"] + 1, end + 1))
        for rank, records in kept.items():
            assert [record["step"] for record in records] == steps, f"rank {rank} of attempt {index}"
            delivered.update(i for record in records for i in record["ids"])
    assert delivered == expected, "the epoch is not exactly once across the restarts"
