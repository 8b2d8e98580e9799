"""Wide strings and binaries through the workers' shared-memory slots (samples/spans.py,
workers/transfer.py): the values written, the same batches at every worker count, and
the pipe for a share that outgrows its slot."""

from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa
import pytest

from streaming import StreamingDataLoader, StreamingDataset
from streaming.workers import transfer

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
