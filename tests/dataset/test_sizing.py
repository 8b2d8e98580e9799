"""Sized by bytes: the default block, buffer and takes of a table follow its row width.

The numbers themselves are pure (``tests/core/test_profiles.py``); these tests show a
real table reaching them: images in a plain binary column (the way most people store
them), the narrow columns of such a table, sizes the user gives, and a table on a
LanceDB server, whose row size no metadata tells (one small read does).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import lance
import lancedb
import numpy as np
import pyarrow as pa
import pytest

from streaming import StreamingDataLoader, StreamingDataset
from streaming.core.profiles import PROFILES, WIDE_BLOCK_BYTES, sized
from streaming.tables import source
from streaming.testing import LanceDBStandIn

from helpers import ids_of

ROWS = 40
WIDTH = 1 << 20  # a 1 MiB image a row
API_KEY = "sk-sizing-0123456789"


def image_rows(count: int, width: int) -> pa.Table:
    """``count`` rows of (id, label, image): ``width`` random bytes in a plain binary column."""
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, size=width, dtype=np.uint8).tobytes() for _ in range(count)]
    return pa.table({"id": np.arange(count), "label": np.arange(count) % 10, "image": pa.array(images)})


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> str:
    """40 rows of 1 MiB images in two fragments, with two rows deleted."""
    uri = str(tmp_path_factory.mktemp("sizing") / "images.lance")
    lance.write_dataset(image_rows(ROWS, WIDTH), uri, max_rows_per_file=ROWS // 2)
    lance.dataset(uri).delete("id IN (7, 30)")
    return uri


def plan_of(data: StreamingDataset) -> tuple[int, int]:
    plan = data.state_dict()["plan"]
    return plan["block_rows"], plan["window_rows"]


def test_images_in_a_plain_binary_column_get_a_block_and_buffer_within_their_budgets(images):
    """1 MiB rows (and a few bytes): one-row blocks and a 63-row buffer (64 MiB), not
    64-row blocks and a 32,768-row buffer (32 GiB); every live row still comes once, at
    k=0 and k=2."""
    row_bytes = source.row_bytes(lance.dataset(images), None)
    assert row_bytes is not None and WIDTH < row_bytes < WIDTH + 1024, "the data files' bytes a row"
    fitted = sized(PROFILES["local"], row_bytes)
    assert (fitted.block_rows, fitted.shuffle_buffer_size) == (1, 63)
    data = StreamingDataset(images, num_splits=2, shuffle_seed=3)
    block, window = plan_of(data)
    assert block * row_bytes <= WIDE_BLOCK_BYTES or block == 1
    assert (block, window) == (1, 63 // 2), "the buffer is cut between the splits"
    assert window * 2 * row_bytes <= PROFILES["local"].buffer_bytes
    live = [i for i in range(ROWS) if i not in (7, 30)]
    assert sorted(ids_of(data)) == live
    loader = StreamingDataLoader(
        StreamingDataset(images, num_splits=2, shuffle_seed=3), batch_size=4, num_workers=2
    )
    assert sorted(int(i) for batch in loader for i in batch["id"]) == live


@pytest.mark.parametrize("context", [None, "spawn"], ids=["default", "spawn"])
def test_images_give_the_same_batches_and_bytes_for_every_worker_count(images, context):
    """Guarantee 3 on the path of wide values (kept as Arrow, copied as a batch is made):
    the same batches at k=0 and k=2, each image the bytes written."""
    written = image_rows(ROWS, WIDTH).column("image").to_pylist()
    batches = {}
    for workers in (0, 2):
        loader = StreamingDataLoader(
            StreamingDataset(images, num_splits=2, shuffle_seed=3),
            batch_size=6,
            num_workers=workers,
            multiprocessing_context=context if workers else None,
        )
        batches[workers] = [(batch["id"].tolist(), list(batch["image"])) for batch in loader]
    assert batches[0] == batches[2]
    for ids, images_ in batches[0]:
        assert images_ == [written[i] for i in ids], f"batch of ids {ids}"


def test_the_narrow_columns_of_a_wide_table_keep_the_narrow_plan(images):
    """The data files say the rows are wide; a read of the first rows of the chosen
    columns says these are 16 bytes, so the profile's numbers stay."""
    local = PROFILES["local"]
    data = StreamingDataset(images, num_splits=4, columns=["id", "label"])
    assert plan_of(data) == (local.block_rows, local.shuffle_buffer_size // 4)


def test_sizes_the_user_gives_win_and_the_other_is_sized(images):
    assert plan_of(StreamingDataset(images, num_splits=4, block_rows=2, shuffle_buffer_size=8)) == (2, 2)
    given_block = StreamingDataset(images, num_splits=4, block_rows=4)
    assert plan_of(given_block) == (4, 12), "a 63-row buffer (sized) of 4-row blocks (given)"
    given_buffer = StreamingDataset(images, num_splits=1, shuffle_buffer_size=4_096)
    assert plan_of(given_buffer) == (1, 4_096), "a one-row block (sized) in the given buffer"


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[LanceDBStandIn]:
    """The LanceDB server stand-in over a table of 48 rows of 256 KiB images."""
    root: Path = tmp_path_factory.mktemp("sizing-server")
    lancedb.connect(str(root)).create_table("images", image_rows(48, 256 << 10))
    with LanceDBStandIn(str(root), api_key=API_KEY) as stand_in:
        yield stand_in


def test_a_lancedb_server_table_is_sized_by_a_read_of_its_first_rows(server):
    """No metadata gives a server table's row size: without the 16-row read its plan
    would be 2,048-row blocks and a 262,144-row buffer (64 GiB of these rows)."""
    table = server.connect(api_key=API_KEY).open_table("images")
    server.reset()
    data = StreamingDataset(table, num_splits=2, shuffle_seed=1)
    assert [body.get("k", body.get("limit")) for body in server.query_bodies()] == [16]
    row_bytes = (256 << 10) + 16
    fitted = sized(PROFILES["lancedb-server"], row_bytes)
    assert (fitted.block_rows, fitted.shuffle_buffer_size, fitted.take_rows) == (4, 508, 63), "within 128 MiB"
    assert plan_of(data) == (4, 252), "a split's window: whole blocks of its half of the buffer"
    server.reset()
    assert sorted(ids_of(data)) == list(range(48))
    stats = server.stats()
    assert stats["taken"] == 48, "each row taken once"
    assert stats["takes"] >= 1


def test_a_given_block_resumes_on_a_version_whose_rows_size_another_buffer(tmp_path):
    """Only block_rows given: the buffer is sized by the rows, which appends change, so a
    dataset built on a later version adopts the checkpoint's window (same block) and
    resumes exactly; a different block is still refused."""
    uri = str(tmp_path / "images.lance")
    lance.write_dataset(image_rows(40, WIDTH), uri)
    before = StreamingDataset(uri, num_splits=2, shuffle_seed=1, block_rows=2)
    it = iter(before)
    delivered = [int(next(it)["id"]) for _ in range(7)]
    state = before.state_dict()
    it.close()
    lance.write_dataset(image_rows(8, 3 * WIDTH), uri, mode="append")  # wider rows: a smaller buffer
    later = StreamingDataset(uri, num_splits=2, shuffle_seed=1, block_rows=2)
    assert plan_of(later) != (state["plan"]["block_rows"], state["plan"]["window_rows"])
    later.load_state_dict(state)
    rest = ids_of(later)
    assert sorted(delivered + rest) == list(range(40))
    other = StreamingDataset(uri, num_splits=2, shuffle_seed=1, block_rows=4)
    with pytest.raises(ValueError, match="block_rows"):
        other.load_state_dict(state)
