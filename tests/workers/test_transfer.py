"""Worker batches through shared-memory slots: exact values, no early reuse, nothing left behind."""

from __future__ import annotations

import gc
import multiprocessing
import os
import threading
from multiprocessing import shared_memory
from pathlib import Path

import numpy as np
import pytest
from torch.utils.data import default_collate

from streaming import StreamingDataLoader, StreamingDataset
from streaming.loader.launch import PRELOAD
from streaming.workers import cut, transfer

from helpers import make_table


def arrays(seed: int, rows: int = 5) -> dict[str, np.ndarray]:
    """Columns of several dtypes and shapes, none a multiple of the alignment."""
    rng = np.random.default_rng(seed)
    return {
        "id": np.arange(seed, seed + rows, dtype=np.int64),
        "flag": rng.random(rows) > 0.5,
        "half": rng.random(rows).astype(np.float16),
        "grid": rng.integers(-9, 9, (rows, 3, 7)).astype(np.int8),
        "vec": rng.random((rows, 13)).astype(np.float32),
    }


def assert_equal(received: dict[str, np.ndarray], sent: dict[str, np.ndarray]) -> None:
    assert list(received) == list(sent)
    for name, array in sent.items():
        assert received[name].dtype == array.dtype and received[name].shape == array.shape, name
        assert np.array_equal(received[name], array), name


def segments_of(channel: transfer.Channel) -> list[str]:
    return sorted(name for name in os.listdir("/dev/shm") if name.startswith(channel.prefix))


def close_ring(segment: str) -> None:
    """Unmap the ring this process made as a worker would."""
    ring = transfer._RINGS.pop(segment, None)
    if ring is not None:
        ring.close()


@pytest.fixture
def channel():
    made = transfer.Channel.new(slots=2)
    yield made
    transfer.release(made, num_workers=1)
    close_ring(made.segment(0))


def test_a_parcel_gives_back_exactly_the_arrays_sent(channel):
    sent = arrays(1)
    parcel = transfer.send(channel, 0, sent)
    assert parcel is not None and parcel.segment == channel.segment(0)
    received = transfer.receive(parcel)
    assert_equal(received, sent)
    received["vec"][:] = -1  # the trainer's copy is its own
    assert_equal(transfer.receive(parcel), sent)


def test_a_slot_is_not_reused_before_its_parcel_was_copied_out(channel):
    first, second, third = arrays(1), arrays(2), arrays(3)
    parcel_1 = transfer.send(channel, 0, first)
    parcel_2 = transfer.send(channel, 0, second)
    assert parcel_1 is not None and parcel_2 is not None
    assert transfer.send(channel, 0, third) is None, "both slots wait to be copied: use the pipe"
    assert_equal(transfer.receive(parcel_1), first)
    parcel_3 = transfer.send(channel, 0, third)  # into the first slot, now free
    assert parcel_3 is not None
    assert_equal(transfer.receive(parcel_2), second)
    assert_equal(transfer.receive(parcel_3), third)


def test_a_claimed_slot_is_filled_where_it_lies_and_waits_like_a_sent_one(channel):
    sent = arrays(1)
    layout = {name: (array.dtype, array.shape) for name, array in sent.items()}
    claimed = transfer.claim(channel, 0, layout)
    assert claimed is not None
    parcel, targets = claimed
    for name, array in sent.items():
        targets[name][...] = array
    assert transfer.send(channel, 0, arrays(2)) is not None
    assert transfer.claim(channel, 0, layout) is None, "both slots wait to be copied: use the pipe"
    assert_equal(transfer.receive(parcel), sent)
    bigger = {name: (dtype, (40, *shape[1:])) for name, (dtype, shape) in layout.items()}
    assert transfer.claim(channel, 0, bigger) is None, "larger than a slot: use the pipe"
    assert transfer.claim(channel, 0, layout) is not None


def test_a_batch_larger_than_its_slot_goes_through_the_pipe(channel):
    assert transfer.send(channel, 0, arrays(1, rows=4)) is not None  # sizes the slots
    assert transfer.send(channel, 0, arrays(2, rows=40)) is None


def test_a_ring_of_large_slots_is_capped_but_keeps_two():
    ring = transfer.Ring.create(f"lsr{os.getpid()}_cap", slots=10, slot_bytes=transfer.MAX_RING_BYTES // 3)
    assert ring is not None and ring._slots == 3
    ring.close()
    shared_memory.SharedMemory(f"lsr{os.getpid()}_cap").unlink()
    huge = transfer.Ring.create(f"lsr{os.getpid()}_huge", slots=10, slot_bytes=transfer.MAX_RING_BYTES)
    assert huge is not None and huge._slots == 2
    huge.close()
    shared_memory.SharedMemory(f"lsr{os.getpid()}_huge").unlink()


def test_the_loader_sizes_rings_from_prefetch_factor(uri):
    """prefetch_factor + 2 messages a worker, each of up to MESSAGE_SHARES shares."""
    for prefetch, slots in ((None, 4 * cut.MESSAGE_SHARES), (5, 7 * cut.MESSAGE_SHARES)):
        iterator = iter(loader(uri, 2, prefetch_factor=prefetch))
        next(iterator)  # an iterator starts its workers (and rings) at its first next()
        assert iterator._channel.slots == slots
        iterator.close()
    iterator = iter(loader(uri, 0))
    next(iterator)
    assert iterator._channel is None, "no workers, no rings"


def test_no_ring_takes_more_than_a_quarter_of_the_free_shared_memory(channel, monkeypatch):
    monkeypatch.setattr(transfer, "_free_shared_memory", lambda: 4 * 2 * 1024)
    assert transfer.send(channel, 0, arrays(1, rows=100)) is None, "too big for /dev/shm: the pipe"
    assert segments_of(channel) == []


def test_a_release_from_inside_a_receive_does_not_deadlock(channel):
    """A dropped iterator's finalizer may run (garbage collection) while ``receive`` holds the lock."""
    other = transfer.Channel.new(slots=2)
    assert transfer.send(other, 0, arrays(1)) is not None
    done = threading.Event()

    def nested() -> None:
        with transfer._LOCK:  # as inside receive()
            transfer.release(other, num_workers=1)
        done.set()

    thread = threading.Thread(target=nested, daemon=True)
    thread.start()
    thread.join(timeout=30)
    close_ring(other.segment(0))
    assert done.is_set(), "release() blocked on the lock its own thread holds"
    assert segments_of(other) == []


def test_segments_are_unlinked_when_received_or_released(channel):
    parcel = transfer.send(channel, 0, arrays(1))
    assert parcel is not None
    assert segments_of(channel) == [channel.segment(0)]
    transfer.receive(parcel)
    assert segments_of(channel) == [], "mapped by the trainer, the name is gone"

    unreceived = transfer.Channel.new(slots=2)
    assert transfer.send(unreceived, 3, arrays(1)) is not None
    assert segments_of(unreceived) == [unreceived.segment(3)]
    transfer.release(unreceived, num_workers=4)
    assert segments_of(unreceived) == []
    close_ring(unreceived.segment(3))


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    return make_table(tmp_path_factory.mktemp("transfer") / "t.lance", [150, 90, 120], deleted=[5, 6])


def loader(uri: str, workers: int, **kwargs) -> StreamingDataLoader:
    data = StreamingDataset(uri, num_splits=4, block_rows=4, shuffle_buffer_size=64)
    if workers:
        kwargs.setdefault("timeout", 120)
    kwargs.setdefault("batch_size", 3)
    return StreamingDataLoader(data, num_workers=workers, **kwargs)


def per_row_collate(rows):
    """default_collate behind another name: the per-row path, whose batches use the pipe."""
    return default_collate(rows)


@pytest.mark.parametrize("context", [None, "spawn"])
def test_batches_held_by_the_trainer_never_change_while_slots_are_reused(uri, context, monkeypatch):
    """About 120 batches through the workers' rings, all kept: each equals the per-row path's."""
    received = []
    real_done = transfer.done
    monkeypatch.setattr(transfer, "done", lambda parcel: received.append(parcel) or real_done(parcel))
    held = list(loader(uri, 2, prefetch_factor=1, multiprocessing_context=context))
    expected = list(loader(uri, 2, collate_fn=per_row_collate, multiprocessing_context=context))
    assert len(held) == len(expected) > 100
    for index, (mine, plain) in enumerate(zip(held, expected)):
        assert mine.keys() == plain.keys()
        for key in ("id", "label", "vec"):
            assert mine[key].dtype == plain[key].dtype and mine[key].tolist() == plain[key].tolist(), (
                index,
                key,
            )
        assert mine["text"] == plain["text"], index
    assert len(received) > len(held) // 2, "the slots carried the batches"
    assert len({parcel.segment for parcel in received}) == 2, "one ring per worker"


@pytest.mark.parametrize("finish", ["exhausted", "closed", "dropped"])
def test_no_shared_memory_outlives_the_iterator(uri, finish):
    iterator = iter(loader(uri, 2))
    next(iterator)
    channel = iterator._channel
    if finish == "exhausted":
        list(iterator)
    elif finish == "closed":
        iterator.close()
    del iterator
    gc.collect()
    assert segments_of(channel) == []
    assert not any(name.startswith(channel.prefix) for name in transfer._ATTACHED)


@pytest.fixture
def preload_list():
    """The fork server's preload list, set to the program's own and restored after."""
    import multiprocessing.forkserver as forkserver

    saved = list(forkserver._forkserver._preload_modules)
    multiprocessing.set_forkserver_preload(["__main__", "json"])
    yield forkserver._forkserver
    multiprocessing.set_forkserver_preload(saved)


def test_the_default_fork_server_preloads_torch_but_not_lance_and_keeps_the_program_list(uri, preload_list):
    iterator = iter(loader(uri, 2))
    next(iterator)  # workers (and the fork server) start at the first next()
    iterator.close()
    preload = preload_list._preload_modules
    assert preload[:2] == ["__main__", "json"] and set(PRELOAD) <= set(preload)
    assert not any(name.split(".")[0] in ("lance", "lancedb") for name in preload)


def test_a_fork_server_the_user_chose_is_left_alone(uri, preload_list):
    iterator = iter(loader(uri, 2, multiprocessing_context="forkserver"))
    iterator.close()
    assert preload_list._preload_modules == ["__main__", "json"]


def test_nothing_in_the_preload_list_imports_lance():
    """The fork server must never load Lance: its children could hang (docs/workers.md)."""
    import subprocess
    import sys

    found = "sorted(m for m in sys.modules if m.split('.')[0] in ('lance', 'lancedb'))"
    code = f"import sys; import {', '.join(PRELOAD)}; print({found})"
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parents[2],
    )
    assert result.stdout.strip() == "[]"


def test_a_batch_that_fails_on_arrival_is_not_counted_as_delivered(uri, monkeypatch):
    """If copying a batch out fails (interrupt, no memory), the checkpoint must not count it."""
    real_views = transfer.views
    received = []

    def failing(parcel):
        if len(received) == 7:  # the second share of the fourth batch (each batch: one share per worker)
            raise KeyboardInterrupt
        received.append(parcel)
        return real_views(parcel)

    monkeypatch.setattr(transfer, "views", failing)
    first = loader(uri, 2, batch_size=4)
    iterator = iter(first)
    delivered = [next(iterator)["id"].tolist() for _ in range(3)]
    with pytest.raises(KeyboardInterrupt):
        next(iterator)
    assert not iterator.live, "the failed iterator is closed"
    state = first.state_dict()  # after the last batch the trainer received
    monkeypatch.setattr(transfer, "views", real_views)
    resumed = StreamingDataset(uri, num_splits=4, block_rows=4, shuffle_buffer_size=64)
    resumed.load_state_dict(state)
    rest = [row for batch in loader_of(resumed) for row in batch["id"].tolist()]
    seen = [row for batch in delivered for row in batch]
    planned = {row for batch in loader(uri, 0) for row in batch["id"].tolist()}
    assert set(seen) | set(rest) == planned, "the batch that failed on arrival was lost"
    assert len(rest) == len(set(rest)) == len(planned) - sum(state["samples_consumed_per_split"])
    assert not set(seen) & set(rest), "nothing is replayed"


def loader_of(data: StreamingDataset) -> StreamingDataLoader:
    return StreamingDataLoader(data, batch_size=4, num_workers=2, timeout=120)
