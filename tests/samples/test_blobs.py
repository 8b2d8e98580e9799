"""Blob columns: bytes by default, lazy handles on request, every guarantee kept.

Each blob table has a twin storing the same bytes as a plain ``large_binary``
column; the blob table must give the same samples, order and states.
"""

from __future__ import annotations

import pickle
import warnings
from collections import Counter
from collections.abc import Iterator

import lance
import numpy as np
import pyarrow as pa
import pytest
from moto_s3 import s3_server

from streaming import BlobHandle, CacheWarning, StreamingDataLoader, StreamingDataset, StreamingMixture
from streaming.core.profiles import PROFILES, sized

from blob_tables import (
    BIG,
    BLOB_FIELD,
    Digests,
    ReadPart,
    big_payloads,
    digest,
    payload,
    rows,
    write,
    write_big,
)
from helpers import check_resume_everywhere, ids_of, json_roundtrip

FRAGMENTS = [40, 33, 50, 30]
DELETED = [7, 8, 90]
SPLITS = 4


@pytest.fixture(scope="module")
def tables(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("blobs")
    return {
        "blob": write(folder / "blob.lance", FRAGMENTS, blob=True, deleted=DELETED),
        "plain": write(folder / "plain.lance", FRAGMENTS, blob=False, deleted=DELETED),
    }


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> str:
    return write_big(tmp_path_factory.mktemp("big") / "big.lance")


def dataset(uri: str, **kwargs) -> StreamingDataset:
    kwargs.setdefault("num_splits", SPLITS)
    kwargs.setdefault("block_rows", 4)
    kwargs.setdefault("shuffle_buffer_size", 32)
    return StreamingDataset(uri, **kwargs)


def live() -> list[int]:
    return [i for i in range(sum(FRAGMENTS)) if i not in DELETED]


def test_bytes_are_what_was_written_in_the_plain_columns_order_and_states(tables):
    """Nulls, empty blobs and deleted rows: every live row once, its bytes exact, and the
    same samples, order and states as the same bytes stored plainly."""
    blob, plain = dataset(tables["blob"]), dataset(tables["plain"])
    got, expected = list(blob), list(plain)
    assert got == expected
    for sample in got:
        assert sample["img"] == payload(int(sample["id"])), f"row {sample['id']}: wrong bytes"
        assert sample["img"] is None or type(sample["img"]) is bytes
    assert {None, b""} <= {sample["img"] for sample in got}, "the table has null and empty blobs"
    for key in ("samples_consumed_per_split", "positions_consumed_per_split", "num_splits", "epoch"):
        assert blob.state_dict()[key] == plain.state_dict()[key], key


def test_every_planned_row_once_with_its_bytes(tables):
    """G1 with blobs: S*L distinct live rows, each with its own bytes."""
    got = list(dataset(tables["blob"], shuffle=False))
    ids = ids_of(got)
    assert len(ids) == len(set(ids)) == len(live()) // SPLITS * SPLITS
    assert set(ids) <= set(live())
    assert all(s["img"] == payload(int(s["id"])) for s in got)


@pytest.mark.parametrize(
    "columns", [None, ["id"], ["img", "id"], ["img"]], ids=["all", "without-blob", "blob-first", "blob-only"]
)
def test_columns_and_a_filter_on_another_column(tables, columns):
    """``columns=`` with and without the blob column, and a filter on ``label``: the same
    samples, keys and order as the plain table's."""
    kwargs = {"columns": columns, "filter": "label IN (1, 4, 5)"}
    got = list(dataset(tables["blob"], **kwargs))
    expected = list(dataset(tables["plain"], **kwargs))
    assert [list(s) for s in got] == [list(s) for s in expected]
    assert got == expected
    if columns is None:
        assert {int(s["id"]) % 10 for s in got} == {1, 4, 5}


def test_resume_after_any_sample_with_the_shared_helper(tables):
    """G5, k=0: stop after any prefix, resume in a fresh dataset: exactly the rest."""
    check_resume_everywhere(lambda: dataset(tables["blob"]), prefixes=range(0, 121, 6))


def loader(data, workers: int, **kwargs) -> StreamingDataLoader:
    if workers:
        kwargs.setdefault("timeout", 120)
    return StreamingDataLoader(data, num_workers=workers, **kwargs)


def pairs(batch) -> list[tuple[int, str]]:
    return list(zip(batch["id"].tolist(), batch["img"], strict=True))


@pytest.mark.parametrize(
    ("old", "new"), [((2, 2), (1, 0)), ((1, 0), (2, 2))], ids=["2x2-to-1x0", "1x0-to-2x2"]
)
def test_loader_resume_on_another_topology(tables, old, new):
    """G3, G5, G6: (world size, workers) (2, 2) -> (1, 0) and back: stopped after step 3 and
    merged, the resumed job delivers exactly the rest, and every blob's bytes, checked in
    the worker that read it, are right."""
    step_rows = SPLITS  # a global step is one whole cycle of every split

    def job(world: int, workers: int, state=None, steps=None) -> tuple[list[tuple[int, str]], list[dict]]:
        datasets = [
            dataset(tables["blob"], rank=r, world_size=world, transform=Digests()) for r in range(world)
        ]
        for data in datasets:
            if state is not None:
                data.load_state_dict(json_roundtrip(state))
        iterators = [iter(loader(d, workers, batch_size=step_rows // world)) for d in datasets]
        seen: list[tuple[int, str]] = []
        taken = 0
        try:
            while steps is None or taken < steps:
                try:
                    for iterator in iterators:
                        seen.extend(pairs(next(iterator)))
                except StopIteration:
                    break
                taken += 1
            states = [json_roundtrip(d.state_dict()) for d in datasets]
        finally:
            for iterator in iterators:
                iterator.close()
        return seen, states

    before, states = job(*old, steps=3)
    merged = StreamingDataset.merge_state_dicts(states)
    after, _ = job(*new, state=merged)
    delivered = Counter(i for i, _ in before + after)
    planned = Counter(ids_of(dataset(tables["blob"], columns=["id"])))
    assert delivered == planned, "lost or repeated rows"
    assert len(before) == 3 * step_rows
    assert all(value == digest(payload(i)) for i, value in before + after), "wrong bytes"


@pytest.mark.parametrize("context", [None, "spawn"])
def test_loader_workers_deliver_the_plain_columns_batches(tables, context):
    """k=2, default start method and spawn: the same batches as the plain column's, k=0."""
    got = [
        pairs(b)
        for b in loader(
            dataset(tables["blob"], transform=Digests()), 2, batch_size=6, multiprocessing_context=context
        )
    ]
    expected = [pairs(b) for b in loader(dataset(tables["plain"], transform=Digests()), 0, batch_size=6)]
    assert got == expected


@pytest.mark.parametrize("workers", [0, 2])
def test_default_collate_gives_the_plain_columns_batches(tables, workers):
    """No transform (the vectorised path): each batch's ``img`` is the list of its bytes,
    as the plain column's (null blobs filtered out: ``default_collate`` takes no None)."""
    kwargs = {"filter": "id % 17 != 5", "columns": ["id", "img"]}
    got = [pairs(b) for b in loader(dataset(tables["blob"], **kwargs), workers, batch_size=6)]
    expected = [pairs(b) for b in loader(dataset(tables["plain"], **kwargs), 0, batch_size=6)]
    assert got == expected
    assert all(value == payload(i) for batch in got for i, value in batch)


def test_file_format_2_0_blob_columns(tmp_path):
    """A blob column written with Lance file format 2.0 (``large_binary`` plus metadata,
    not Lance's blob type): the same bytes and handles."""
    uri = str(tmp_path / "old.lance")
    lance.write_dataset(rows(0, 40, blob=True), uri, data_storage_version="2.0")
    assert lance.dataset(uri).schema.field("img").type == pa.large_binary()
    got = list(StreamingDataset(uri, num_splits=2))
    assert len(got) == 40 and all(s["img"] == payload(int(s["id"])) for s in got)
    handles = list(StreamingDataset(uri, num_splits=2, blobs="handles"))
    assert all((h["img"].read() if h["img"] else None) == payload(int(h["id"])) for h in handles)


def test_a_64_mib_blob_and_an_empty_one_arrive_exactly(big):
    values = big_payloads()
    got = {int(s["id"]): s["img"] for s in StreamingDataset(big, num_splits=1, shuffle=False)}
    assert got.keys() == values.keys()
    for row, value in values.items():
        assert got[row] == value, f"row {row}"


@pytest.mark.parametrize(("workers", "context"), [(0, None), (2, None), (2, "spawn")])
def test_handles_read_only_what_the_transform_reads(big, workers, context):
    """blobs='handles': a transform in the worker seeks to the middle of a 64 MiB blob and
    reads 64 KiB; the process reads well under 64 MiB for it (its ``rchar``), while
    reading the blob whole reads all of it (so the count sees Lance's reads)."""
    length = 64 << 10
    data = StreamingDataset(big, num_splits=2, shuffle=False, blobs="handles", transform=ReadPart(length))
    samples = [
        s
        for batch in loader(data, workers, batch_size=1, multiprocessing_context=context, collate_fn=_first)
        for s in [batch]
    ]
    by_id = {s["id"]: s for s in samples}
    values = big_payloads()
    assert by_id.keys() == values.keys()
    large = by_id[0]
    assert large["part"] == digest(values[0][BIG // 2 : BIG // 2 + length])
    assert large["whole_read"] >= BIG, "rchar does not see the blob reads"
    assert large["part_read"] < 4 << 20, f"a 64 KiB read cost {large['part_read']} bytes"
    assert by_id[3]["part"] == "null"
    assert by_id[1]["size"] == 0 and by_id[2]["size"] == 1024


def _first(rows: list) -> dict:
    return rows[0]


@pytest.mark.parametrize("workers", [0, 2])
def test_handles_are_small_picklable_and_open_in_the_trainer(tables, workers):
    """Samples carry ``BlobHandle``s (a null blob: None) that pickle without any Lance
    handle and read the right bytes in the trainer, also when workers made them (a
    filter on another column: the handles still point at the right rows)."""
    data = dataset(tables["blob"], blobs="handles", columns=["id", "img"], filter="label != 3")
    got = [s for batch in loader(data, workers, batch_size=4, collate_fn=list) for s in batch]
    for sample in got:
        handle = sample["img"]
        expected = payload(int(sample["id"]))
        if expected is None:
            assert handle is None
            continue
        assert isinstance(handle, BlobHandle) and handle.size == len(expected)
        copy = pickle.loads(pickle.dumps(handle))
        assert len(pickle.dumps(handle)) < 500
        assert copy.read() == expected
    assert ids_of(got) == ids_of(dataset(tables["plain"], columns=["id"], filter="label != 3"))


def test_a_mixture_with_one_blob_source_resumes_exactly(tables, tmp_path):
    """A blob source mixed with a plain one: stopped after 3 steps with k=2 workers and
    resumed with k=0, the batches are those of one uninterrupted run, bytes checked."""
    other = write(tmp_path / "other.lance", [60, 40], blob=False)

    def mix() -> StreamingMixture:
        return StreamingMixture(
            {
                "blob": dataset(tables["blob"], transform=Digests()),
                "plain": dataset(other, transform=Digests()),
            },
            weights={"blob": 0.5, "plain": 0.5},
            global_batch_size=8,
            stop="first_exhausted",
            seed=0,
        )

    reference = [pairs(b) for b in loader(mix(), 0, batch_size=8)]
    first = mix()
    iterator = iter(loader(first, 2, batch_size=8))
    before = [pairs(next(iterator)) for _ in range(3)]
    state = json_roundtrip(first.state_dict())
    iterator.close()
    resumed = mix()
    resumed.load_state_dict(state)
    after = [pairs(b) for b in loader(resumed, 0, batch_size=8)]
    assert before + after == reference
    assert all(value == digest(payload(i)) for batch in reference for i, value in batch)


# -- refusals -------------------------------------------------------------------


def test_a_blob_inside_a_struct_is_refused_at_construction(tmp_path):
    inner = pa.StructArray.from_arrays([pa.array([b"x"] * 4, pa.large_binary())], fields=[BLOB_FIELD])
    uri = str(lance.write_dataset(pa.table({"id": np.arange(4), "meta": inner}), tmp_path / "s.lance").uri)
    with pytest.raises(TypeError, match=r"column 'meta' has type struct<img: .*blob.* top-level column"):
        StreamingDataset(uri, num_splits=1)
    assert len(list(StreamingDataset(uri, num_splits=1, columns=["id"]))) == 4  # the fix works


def test_a_list_of_blobs_is_refused_at_construction(tmp_path):
    items = pa.array([[b"x"]] * 4, pa.list_(BLOB_FIELD))
    uri = str(lance.write_dataset(pa.table({"id": np.arange(4), "frames": items}), tmp_path / "l.lance").uri)
    with pytest.raises(TypeError, match=r"column 'frames' has type list<.*blob field inside it"):
        StreamingDataset(uri, num_splits=1)


def test_packing_a_blob_column_is_refused_at_construction(tables):
    with pytest.raises(
        TypeError, match=r"pack_sequences packs a column of token ids, but column 'img' is a blob"
    ):
        StreamingDataset(
            tables["blob"],
            num_splits=1,
            columns=["img"],
            pack_sequences=16,
            eos_id=0,
            pad_id=0,
            blocks_per_epoch=1,
        )


def test_an_unknown_blobs_mode_is_refused(tables):
    with pytest.raises(
        ValueError, match=r"blobs must be 'bytes' or 'handles', got 'lazy'; pass blobs='bytes'"
    ):
        StreamingDataset(tables["blob"], num_splits=1, blobs="lazy")


# -- memory: the plan of a blob table -------------------------------------------


@pytest.mark.parametrize(
    ("row_bytes", "block", "buffer"),
    [(8 << 20, 1, 8), (300 << 10, 2, 218), (1 << 10, 64, 32_768), (64 << 20, 1, 1)],
)
def test_a_blob_tables_buffer_holds_about_64_mib(row_bytes, block, buffer):
    fitted = sized(PROFILES["local"], row_bytes)
    assert (fitted.block_rows, fitted.shuffle_buffer_size) == (block, buffer)
    assert fitted.shuffle_buffer_size * row_bytes <= max(PROFILES["local"].buffer_bytes, row_bytes)


def test_the_default_plan_of_a_large_blob_table_is_sized_by_its_blobs(big, tables):
    """Four rows averaging a little over 16 MiB: one-row blocks and a buffer of 3 rows
    (within 64 MiB; the settings a state records); a table of kilobyte blobs keeps the
    profile's numbers."""
    state = StreamingDataset(big, num_splits=1).state_dict()["plan"]
    assert (state["block_rows"], state["window_rows"]) == (1, 3)
    small = StreamingDataset(tables["blob"], num_splits=1).state_dict()["plan"]
    assert (small["block_rows"], small["window_rows"]) == (64, 32_768)
    handles = StreamingDataset(big, num_splits=1, blobs="handles").state_dict()["plan"]
    assert handles["window_rows"] == 3, "the plan does not depend on blobs="


# -- object storage ---------------------------------------------------------------


@pytest.fixture(scope="module")
def s3() -> Iterator[dict[str, str]]:
    """moto's S3-compatible HTTP server on 127.0.0.1 (a thread of this process)."""
    with s3_server("blobs", key_id="AKIABLOBTEST", secret="blob-secret") as options:
        yield options


@pytest.mark.parametrize("cache", [False, True], ids=["bucket", "cache_dir"])
def test_a_blob_column_on_object_storage(s3, tables, tmp_path, cache):
    """The S3 stand-in, with and without the local cache: two epochs give the plain local
    table's samples and order, bytes exact, and the cache never warns."""
    name = f"s3://blobs/{tmp_path.name}.lance"
    uri = write(name, FRAGMENTS, blob=True, deleted=DELETED, storage_options=s3)
    kwargs = {"cache_dir": tmp_path / "cache"} if cache else {}
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        remote = dataset(uri, storage_options=s3, **kwargs)
        local = dataset(tables["plain"])
        for epoch in (0, 1):
            remote.set_epoch(epoch)
            local.set_epoch(epoch)
            got = list(remote)
            assert got == list(local), f"epoch {epoch}"
    assert all(sample["img"] == payload(int(sample["id"])) for sample in got)
