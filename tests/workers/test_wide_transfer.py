"""Strings and binaries through the workers' shared memory (samples/spans.py,
workers/transfer.py), wide and narrow: the values written, the same batches and states at
every worker count, packed in the slots (never pickled value by value), and a share that
outgrows its slot or any slot carrying its packed values itself."""

from __future__ import annotations

import os

import lance
import numpy as np
import pyarrow as pa
import pytest
import torch

from streaming import StreamingDataLoader, StreamingDataset
from streaming.workers import transfer
from streaming.workers.shares import Gathering
from streaming.workers.worker import SentShare

ROWS = 96
DELETED = (5, 40)  # 94 live rows: two splits of 47, none left out


def wide_rows() -> pa.Table:
    """Images of 5 KiB in the first half of storage order and 20 to 60 KiB after it, and
    documents of 4 to 9 KiB of text: shares grow past the slot the first one sized."""
    rng = np.random.default_rng(7)
    sizes = np.where(np.arange(ROWS) < ROWS // 2, 5 << 10, rng.integers(20 << 10, 60 << 10, ROWS))
    images = [rng.integers(0, 256, int(size), dtype=np.uint8).tobytes() for size in sizes]
    documents = [f"document {i}: " + "é" * int(rng.integers(2 << 10, 4500)) for i in range(ROWS)]
    return pa.table(
        {
            "id": np.arange(ROWS),
            "image": pa.array(images),
            "doc": pa.array(documents),
            "label": np.arange(ROWS) % 3,
        }
    )


@pytest.fixture(scope="module")
def wide(tmp_path_factory) -> str:
    uri = str(tmp_path_factory.mktemp("wide") / "wide.lance")
    lance.write_dataset(wide_rows(), uri, max_rows_per_file=ROWS // 2)
    lance.dataset(uri).delete(f"id IN {DELETED}")
    return uri


def batches_of(uri: str, workers: int, context: str | None) -> list[tuple[list[int], list[bytes], list[str]]]:
    loader = StreamingDataLoader(
        StreamingDataset(uri, num_splits=2, shuffle=False, block_rows=4),
        batch_size=6,
        num_workers=workers,
        multiprocessing_context=context if workers else None,
        timeout=120 if workers else 0,
    )
    return [(batch["id"].tolist(), list(batch["image"]), list(batch["doc"])) for batch in loader]


@pytest.mark.parametrize("context", [None, "spawn"], ids=["default", "spawn"])
def test_wide_values_arrive_as_written_through_slots_and_pipe_alike(wide, context, monkeypatch):
    parcels: list[transfer.Parcel] = []
    real_done = transfer.done
    monkeypatch.setattr(transfer, "done", lambda parcel: parcels.append(parcel) or real_done(parcel))
    written = wide_rows().to_pydict()
    at_two = batches_of(wide, 2, context)
    assert at_two == batches_of(wide, 0, None), "the same batches at k=0 and k=2 (guarantee 3)"
    assert sorted(i for ids, _, _ in at_two for i in ids) == [i for i in range(ROWS) if i not in DELETED]
    for ids, images, documents in at_two:
        assert images == [written["image"][i] for i in ids] and all(type(image) is bytes for image in images)
        assert documents == [written["doc"][i] for i in ids] and all(type(doc) is str for doc in documents)
    packed = [parcel for parcel in parcels if {"image", "doc"} <= {field[0] for field in parcel.fields}]
    shares = 2 * len(at_two)
    assert packed, "the slots carried the wide columns"
    assert len(packed) < shares, "shares larger than the slots the first share sized took the pipe"


def test_a_ring_of_varying_shares_has_spare_room_and_fewer_bytes():
    channel = transfer.Channel.new(slots=64)
    layout = {"image": (np.dtype(np.uint8), (1 << 20,))}
    try:
        assert transfer.claim(channel, 0, layout, varying=True) is not None
        bigger = {"image": (np.dtype(np.uint8), (int(1.5 * (1 << 20)) - 64,))}
        assert transfer.claim(channel, 0, bigger, varying=True) is not None, "half as large again fits"
        too_big = {"image": (np.dtype(np.uint8), (int(1.5 * (1 << 20)) + 64,))}
        assert transfer.claim(channel, 0, too_big, varying=True) is None
        ring_slots = sum(1 for _ in iter(lambda: transfer.claim(channel, 0, layout, varying=True), None)) + 2
        assert (
            ring_slots * 1.5 * (1 << 20) <= transfer.VARYING_RING_BYTES < (ring_slots + 1) * 1.5 * (1 << 20)
        )
    finally:
        transfer.release(channel, num_workers=1)


NARROW_ROWS = 48  # two splits of 24 in storage order: each batch of 6 starts with a row id % 3 == 0
STRINGS = ("text", "blob", "ltext", "lblob")


def narrow_rows() -> pa.Table:
    """Narrow strings and binaries, ``large_`` ones too: empty values, non-ASCII text and nulls
    (never a batch's first value, which ``default_collate`` refuses), and a column ``gap``
    whose first value is null."""
    ids = range(NARROW_ROWS)
    text = [None if i % 3 == 1 else "" if i % 7 == 3 else f"ünï {i} " + "日本" * (i % 4) for i in ids]
    blob = [None if i % 3 == 2 else bytes([i, 0, 255])[: i % 4] for i in ids]
    return pa.table(
        {
            "id": np.arange(NARROW_ROWS),
            "text": pa.array(text, pa.string()),
            "blob": pa.array(blob, pa.binary()),
            "ltext": pa.array(["ß" * (i % 3) + str(i) for i in ids], pa.large_string()),
            "lblob": pa.array([bytes(range(i % 17)) for i in ids], pa.large_binary()),
            "gap": pa.array([None if i % 3 == 0 else "x" for i in ids], pa.string()),
        }
    )


@pytest.fixture(scope="module")
def narrow(tmp_path_factory) -> str:
    uri = str(tmp_path_factory.mktemp("narrow") / "narrow.lance")
    lance.write_dataset(narrow_rows(), uri, max_rows_per_file=20)
    return uri


def narrow_loader(uri: str, workers: int, context: str | None, **kwargs) -> StreamingDataLoader:
    data = StreamingDataset(uri, num_splits=2, shuffle=False, block_rows=4, **kwargs)
    return StreamingDataLoader(
        data,
        batch_size=6,
        num_workers=workers,
        multiprocessing_context=context if workers else None,
        timeout=120 if workers else 0,
        head_start=False,  # every batch from the workers' shares
    )


def delivered(loader: StreamingDataLoader) -> list[tuple[dict, dict]]:
    """Each batch (tensors as lists) with the state after it."""
    found = []
    for batch in loader:
        found.append(
            (
                {key: value.tolist() if key == "id" else value for key, value in batch.items()},
                loader.state_dict(),
            )
        )
    return found


def gathered(monkeypatch) -> list[list[SentShare]]:
    """The shares of each batch the trainer gathers from its workers, as they arrived."""
    seen: list[list[SentShare]] = []
    real = Gathering.gather

    def spy(self, shares):
        found = real(self, shares)
        if found is not None:
            seen.append(found[0])
        return found

    monkeypatch.setattr(Gathering, "gather", spy)
    return seen


def pickled_values(share: SentShare) -> int:
    """``str`` / ``bytes`` values in what the share's pickle carried (not its shared memory)."""
    return sum(
        isinstance(value, str | bytes)
        for column in share.batch.values()
        if isinstance(column, list)
        for value in column
    )


@pytest.mark.parametrize("context", [None, "spawn"], ids=["default", "spawn"])
def test_narrow_strings_and_binaries_cross_in_shared_memory_with_the_batches_and_states_of_k0(
    narrow, context, monkeypatch
):
    columns = ["id", *STRINGS]
    at_zero = delivered(narrow_loader(narrow, 0, None, columns=columns))
    seen = gathered(monkeypatch)
    at_two = delivered(narrow_loader(narrow, 2, context, columns=columns))
    assert [batch for batch, _ in at_two] == [batch for batch, _ in at_zero], "guarantee 3"
    assert [state for _, state in at_two] == [state for _, state in at_zero], "the same states"
    written = narrow_rows().to_pydict()
    for batch, _ in at_two:
        for name in STRINGS:
            assert batch[name] == [written[name][i] for i in batch["id"]], name
            kind = str if "text" in name else bytes
            assert all(type(value) is kind for value in batch[name] if value is not None), name
    assert None in at_two[0][0]["text"] and "" in at_two[1][0]["text"] and b"" in at_two[0][0]["blob"]
    shares = [share for batch in seen for share in batch if share.count]
    assert len(seen) == len(at_two) and len(shares) == 2 * len(at_two), "every batch from both workers"
    for share in shares:
        assert share.spanned == STRINGS and share.parcel is not None
        assert set(STRINGS) <= {field[0] for field in share.parcel.fields}, "packed in the slot"
        assert pickled_values(share) == 0, "no string or binary value pickled"
    assert not [name for name in os.listdir("/dev/shm") if name.startswith(f"lsr{os.getpid()}_")]


def test_a_null_first_value_fails_with_workers_as_without(narrow):
    """``default_collate`` refuses a batch whose first value is null: the same error at k=2 (the
    trainer collates the packed column once the batch is merged) as at k=0."""
    errors = []
    for workers in (0, 2):
        iterator = iter(narrow_loader(narrow, workers, None, columns=["id", "gap"]))
        with pytest.raises(TypeError, match="column 'gap' has nulls") as caught:
            next(iterator)
        iterator.close()
        errors.append(str(caught.value))
    assert errors[0] == errors[1]


def test_a_value_larger_than_any_slot_crosses_in_shared_memory_all_the_same(tmp_path, monkeypatch):
    """A share past ``transfer.MAX_SLOT_BYTES`` never gets a ring: its packed values travel as
    a tensor torch sends through shared memory, and arrive as written."""
    values = [b"\x01" * (transfer.MAX_SLOT_BYTES + 5), b"", b"\x02" * 5, None]
    uri = str(tmp_path / "big.lance")
    lance.write_dataset(pa.table({"id": np.arange(4), "blob": pa.array(values, pa.large_binary())}), uri)
    at_zero = [(batch["id"].tolist(), batch["blob"]) for batch in narrow_loader(uri, 0, None)]
    seen = gathered(monkeypatch)
    at_two = [(batch["id"].tolist(), batch["blob"]) for batch in narrow_loader(uri, 2, None)]
    assert at_two == at_zero
    assert all(blob == [values[i] for i in ids] for ids, blob in at_two)
    crossed = [share.batch["blob"].array for batch in seen for share in batch if share.count]
    assert any(isinstance(array, torch.Tensor) for array in crossed), "the large share as a tensor"
    assert all(pickled_values(share) == 0 for batch in seen for share in batch)
