"""A mixture in a real torch.distributed (gloo) job: checkpoint on 2 ranks x 2 workers,
resume on 3 ranks; every global batch as in one uninterrupted process. (G17)"""

from __future__ import annotations

import json
from collections import defaultdict
from functools import partial
from pathlib import Path

import pytest

from launching import PROCS, launch_script
from mixtures import make_tables, mixture, run_job

RANK_SCRIPT = PROCS / "mix_rank.py"


@pytest.fixture(scope="module")
def uris(tmp_path_factory) -> dict[str, str]:
    return make_tables(tmp_path_factory.mktemp("mixdist"))


def launch(uris: dict[str, str], out: Path, world_size: int, *flags: str) -> None:
    tables = (f"--a={uris['a']}", f"--b={uris['b']}")
    codes, outputs = launch_script(RANK_SCRIPT, out, world_size, *tables, *flags)
    assert codes == [0] * world_size, "\n".join(outputs)


def global_batches(out: Path, world_size: int) -> dict[int, list[int]]:
    """Step -> sorted ids of every rank's batch; every rank must log every step once."""
    by_step: dict[int, list[int]] = defaultdict(list)
    ranks: dict[int, int] = defaultdict(int)
    for path in sorted(out.glob("rank*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            by_step[record["step"]].extend(record["ids"])
            ranks[record["step"]] += 1
    assert set(ranks.values()) == {world_size}, f"ranks took unequal steps: {dict(ranks)}"
    return {step: sorted(ids) for step, ids in by_step.items()}


def test_gloo_ranks_with_workers_resume_a_mixture_on_three_ranks(uris, tmp_path):
    reference = run_job(partial(mixture, uris, stop="first_exhausted"), 1)
    first = tmp_path / "first"
    launch(uris, first, 2, "--workers=2", "--checkpoint-every=3", "--stop-after=5")
    before = global_batches(first, 2)
    assert sorted(before) == [1, 2, 3, 4, 5]
    second = tmp_path / "second"
    launch(uris, second, 3, "--workers=0", f"--resume={first / 'checkpoint3.json'}")
    after = global_batches(second, 3)
    assert sorted(after) == list(range(4, len(reference) + 1)), "the resumed job starts after step 3"
    assert [before[step] for step in (1, 2, 3)] + [after[s] for s in sorted(after)] == reference
    assert [before[4], before[5]] == [after[4], after[5]], "the replayed steps differ"
