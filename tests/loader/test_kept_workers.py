"""A kept worker (``persistent_workers=True``) that died is replaced on the next ``iter()``.

A kept worker may die while no iterator waits on it: after it read ahead for a suspended
iterator, or after a newer iterator superseded the one it fed. The next ``iter()`` then
starts new workers where the loader stands (its last delivered batch), so the epoch is
exactly the batches of ``num_workers=0``, every planned sample once (G5, G6, G13). Real
worker processes, with the loader's default start method (forkserver) and spawn.
"""

from __future__ import annotations

import os
import signal

import pytest

from streaming import StreamingDataLoader, StreamingDataset

from helpers import make_table
from launching import await_exits

NUM_SPLITS = 4  # a multiple of every worker count below
BATCH = 8


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    """236 live rows: 4 splits of 59, 30 batches of 8 (the last one of 4)."""
    return make_table(tmp_path_factory.mktemp("kept") / "t.lance", [90, 60, 90], deleted=[5, 6, 100, 200])


def with_pid(batch) -> list[dict]:
    """Each sample says which process read it."""
    pid = os.getpid()
    return [{"id": row, "pid": pid} for row in batch["id"].to_pylist()]


def dataset(uri: str, **kwargs) -> StreamingDataset:
    return StreamingDataset(
        uri, num_splits=NUM_SPLITS, shuffle_seed=7, block_rows=4, shuffle_buffer_size=32, **kwargs
    )


def ids(batches) -> list[list[int]]:
    return [batch["id"].tolist() for batch in batches]


def pids(batches) -> set[int]:
    return {int(pid) for batch in batches for pid in batch["pid"]}


def kill(pid: int) -> None:
    """SIGKILL ``pid`` and return once it has ended.

    A spawned worker is the trainer's child: torch's SIGCHLD handler raises its own
    ``RuntimeError`` in the trainer as it dies, wherever the trainer is (docs/workers.md,
    "When a worker dies"); that notice is expected here, and nothing else."""
    os.kill(pid, signal.SIGKILL)
    try:
        left = await_exits([pid], within=30)
    except RuntimeError as notice:
        assert f"(pid {pid}) is killed by signal" in str(notice), notice
        left = await_exits([pid], within=30)
    assert not left, f"worker {pid} still runs 30 s after SIGKILL"


@pytest.mark.parametrize(("workers", "context"), [(1, None), (2, None), (4, None), (2, "spawn")])
def test_a_kept_worker_that_died_between_iterators_is_replaced(uri, workers, context):
    """Killed after it read ahead (its iterator suspended), then killed after a newer iterator
    superseded its own: each next iter() starts new workers at the last delivered batch."""
    loader = StreamingDataLoader(
        dataset(uri, transform=with_pid),
        batch_size=BATCH,
        num_workers=workers,
        persistent_workers=True,
        multiprocessing_context=context,
        timeout=120,
    )
    first = iter(loader)
    got = [next(first) for _ in range(3)]  # the workers read ahead meanwhile
    read_ahead = min(pids(got[-1:]))
    kill(read_ahead)
    second = iter(loader)  # supersedes the first: new workers, from batch 3
    got += [next(second) for _ in range(4)]
    assert read_ahead not in pids(got[3:]), "the dead worker was replaced"
    third = iter(loader)  # supersedes the second, whose workers read ahead for it
    superseded = max(pids(got[-1:]))
    kill(superseded)
    got += list(third)
    assert superseded not in pids(got[7:])
    expected = ids(StreamingDataLoader(dataset(uri), batch_size=BATCH))
    assert ids(got) == expected, "every planned sample once, in the batches of num_workers=0"
    assert len(pids(got)) == 3 * workers, "three generations of workers"
