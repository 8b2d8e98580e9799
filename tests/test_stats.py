"""Live statistics, read in the trainer's process, with and without worker processes."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from streaming import StreamingDataLoader, StreamingDataset

from helpers import make_table


def double(batch: pa.RecordBatch):
    return [{"id": row["id"], "twice": 2 * row["id"]} for row in batch.to_pylist()]


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("transform", [None, double])
def test_stats_match_what_was_delivered(tmp_path, workers, transform):
    uri = make_table(tmp_path / "t.lance", [50, 40, 30], deleted=[1, 2])
    data = StreamingDataset(uri, num_splits=4, block_rows=4, shuffle_buffer_size=32, transform=transform)
    assert data.stats()["rows_read"] == 0
    loader = StreamingDataLoader(data, batch_size=4, num_workers=workers)
    iterator = iter(loader)
    delivered = sum(len(next(iterator)["id"]) for _ in range(2 * max(workers, 1)))
    middle = data.stats()
    assert middle["rows_delivered"] == delivered == sum(data.state_dict()["samples_consumed_per_split"])
    delivered += sum(len(batch["id"]) for batch in iterator)
    final = data.stats()
    assert final["rows_delivered"] == delivered == 4 * data.split_length
    assert final["rows_skipped"] == 0
    assert final["rows_read"] >= delivered and final["bytes_read"] > 0 and final["windows_read"] > 0
    assert final["read_seconds"] > 0
    assert (final["transform_seconds"] > 0) == (transform is not None)
    assert json.loads(json.dumps(final)) == final
