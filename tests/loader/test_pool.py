"""Workers write their shares straight into the pool's batch buffers: same batches as k=0,
never a buffer rewritten under a live tensor, nothing left in /dev/shm."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest
import torch

from streaming import StreamingDataLoader, StreamingDataset
from streaming.loader import pool, transfer

from helpers import make_table


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    return make_table(tmp_path_factory.mktemp("pool") / "t.lance", [150, 90, 120], deleted=[5, 6])


def dataset(uri: str) -> StreamingDataset:
    return StreamingDataset(uri, num_splits=4, block_rows=4, shuffle_buffer_size=64)


def loader(data: StreamingDataset, workers: int, **kwargs) -> StreamingDataLoader:
    if workers:
        kwargs.setdefault("timeout", 120)
    kwargs.setdefault("batch_size", 3)
    return StreamingDataLoader(data, num_workers=workers, **kwargs)


def plain(batch: dict) -> dict:
    """A batch as plain values, to compare and to keep apart from the tensors."""
    return {key: value.tolist() if isinstance(value, torch.Tensor) else value for key, value in batch.items()}


def same(mine: dict, expected: dict, where: str) -> None:
    assert mine.keys() == expected.keys(), where
    for key, value in expected.items():
        if isinstance(value, torch.Tensor):
            assert mine[key].dtype == value.dtype and torch.equal(mine[key], value), (where, key)
        else:
            assert mine[key] == value, (where, key)


@pytest.fixture
def holds(monkeypatch) -> list[int]:
    """The batch numbers the trainer handed out as views of the pool."""
    seen: list[int] = []
    real = pool.Pool.hold

    def hold(self, place):
        seen.append(place.sequence)
        return real(self, place)

    monkeypatch.setattr(pool.Pool, "hold", hold)
    return seen


def in_dev_shm(prefix: str) -> list[str]:
    return sorted(name for name in os.listdir("/dev/shm") if name.startswith(prefix))


@pytest.mark.parametrize("context", [None, "spawn"])
def test_batches_from_the_pool_equal_the_batches_without_workers(uri, context, holds):
    """Some batches kept, the others dropped as a loop would: every one equals k=0's, at the end too."""
    expected = list(loader(dataset(uri), 0))
    kept, seen = [], []
    for index, batch in enumerate(loader(dataset(uri), 2, multiprocessing_context=context)):
        same(batch, expected[index], f"batch {index}")
        seen.append(plain(batch))
        if index % 3 == 0:
            kept.append((index, batch))
        del batch
    assert len(seen) == len(expected) > 60
    assert len(holds) > len(expected) // 2, "the pool carried the batches"
    for index, batch in kept:  # buffers were reused all along: never one a kept batch points at
        same(batch, expected[index], f"kept batch {index}")
        assert batch["vec"].is_contiguous() and batch["id"].numpy().flags.writeable, index


def test_a_loop_that_keeps_every_batch_gets_correct_copies_once_the_pool_is_held(uri, holds):
    expected = list(loader(dataset(uri), 0))
    kept = list(loader(dataset(uri), 2, prefetch_factor=1))
    assert len(holds) < len(kept), "with every buffer held, later batches are copied"
    for index, (mine, plain_batch) in enumerate(zip(kept, expected, strict=True)):
        same(mine, plain_batch, f"batch {index}")


def test_persistent_workers_number_each_iterator_from_zero(uri, holds):
    """Break out of an epoch, then continue twice: the same batches as k=0."""
    expected = [plain(batch) for batch in loader(dataset(uri), 0)]
    data = dataset(uri)
    kept = loader(data, 2, persistent_workers=True)
    got = []
    for stop in (5, 9, None):
        iterator = iter(kept)
        for index, batch in enumerate(iterator):
            got.append(plain(batch))
            del batch  # its buffer is free for the next iterator
            if stop is not None and index + 1 == stop:
                break
        iterator.close()
    assert len(got) == len(expected)
    for index, (mine, plain_batch) in enumerate(zip(got, expected, strict=True)):
        assert mine == plain_batch, f"batch {index}"
    assert holds.count(0) == 2, "each later iterator's first batch came from the pool"


def test_a_buffer_is_written_again_only_once_its_tensors_are_gone():
    made = pool.Pool.create(f"lsr{os.getpid()}_pooltest_p", buffers=2)
    assert made is not None
    writer = pool.Writer(pool.shared_memory.SharedMemory(name=made.name), buffers=2)
    try:
        fields = pool.layout(4, ["x"], {"x": (np.dtype(np.int64), ())})
        assert writer.next(first=True) == 0
        assert writer.targets(fields) is None, "no layout adopted yet"
        made.adopt(fields)
        assert writer.targets(pool.layout(4, ["x"], {"x": (np.dtype(np.int32), ())})) is None, (
            "another layout"
        )
        targets = writer.targets(fields)
        assert targets is not None
        targets["x"][:] = [1, 2, 3, 4]
        held = torch.from_numpy(made.hold(pool.Place(made.name, 0, fields, written=True))["x"])[1:3]
        made.settle(0)  # the trainer settles every batch: a held one stays held
        writer.next(first=False)
        made.settle(1)
        assert writer.next(first=False) == 2
        assert writer.targets(fields) is None, "batch 2's buffer is batch 0's, still referenced"
        assert held.tolist() == [2, 3]
        del held
        gc.collect()
        assert writer.next(first=False) == 3
        made.settle(2)  # batch 2 went another way
        assert writer.next(first=False) == 4
        assert writer.targets(fields) is not None, "free again, for the next batch due there"
    finally:
        made.close()
    assert in_dev_shm(made.name) == []


@pytest.mark.parametrize("finish", ["before a batch", "after a batch", "dropped"])
def test_the_pool_leaves_dev_shm_at_the_first_batch_or_when_the_iterator_ends(uri, finish):
    iterator = iter(loader(dataset(uri), 2))
    if finish == "before a batch":  # started, no batch yet: the workers' pool is made
        channel = transfer.Channel.new(slots=2)
        transfer.release(channel, num_workers=2)
        assert in_dev_shm(channel.prefix) == []
        return
    batch = next(iterator)
    channel = iterator._channel
    assert channel.pool_name and in_dev_shm(channel.prefix) == [], "every worker mapped it: unlinked"
    if finish == "dropped":
        del iterator
        gc.collect()
    else:
        iterator.close()
    assert pool.find(channel.pool_name) is None, "released with the iterator"
    assert batch["id"].tolist() == next(iter(loader(dataset(uri), 0)))["id"].tolist(), "still readable"


FAILED_START = """
import os, sys
from streaming import StreamingDataLoader, StreamingDataset

if __name__ == "__main__":
    data = StreamingDataset(sys.argv[1], num_splits=4, block_rows=4, shuffle_buffer_size=64)
    try:
        next(iter(StreamingDataLoader(data, batch_size=3, num_workers=2)))
    except OSError as error:  # the fork server cannot bind its socket under this TMPDIR
        print("failed", error)
    print(sorted(name for name in os.listdir("/dev/shm") if name.startswith(f"lsr{os.getpid()}_")))
"""


def test_an_iterator_whose_workers_fail_to_start_leaves_no_pool(uri, tmp_path):
    import subprocess
    import sys

    script = tmp_path / "start.py"
    script.write_text(FAILED_START)
    deep = tmp_path / ("d" * 120)  # longer than a Unix socket's path may be
    deep.mkdir()
    result = subprocess.run(
        [sys.executable, str(script), uri],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TMPDIR": str(deep)},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("failed"), result.stdout
    assert result.stdout.splitlines()[-1] == "[]", "the pool outlived the failed start"
    assert "leaked shared_memory" not in result.stderr, result.stderr


@pytest.mark.parametrize(("free", "buffers"), [(40 << 20, 0), (80 << 20, 2), (1 << 40, 40)])
def test_the_pool_takes_at_most_a_quarter_of_the_free_shared_memory(monkeypatch, free, buffers):
    """A container's small /dev/shm (Docker's default is 64 MiB) gets a smaller pool, or
    none (the rings then carry every share), never one that could fill it."""
    monkeypatch.setattr(transfer, "_free_shared_memory", lambda: free)
    channel = transfer.Channel.new(slots=32)
    try:
        assert channel.buffers == buffers and bool(channel.pool_name) == (buffers > 0)
        assert channel.buffers * pool.CAPACITY <= free // 4
    finally:
        transfer.release(channel, num_workers=0)
