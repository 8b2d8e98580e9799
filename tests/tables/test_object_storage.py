"""Object storage against a real S3-compatible server (moto) started on 127.0.0.1.

Every state dict, repr and error message these runs produce is collected and
checked for the credentials, which must never appear.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta

import lance
import lancedb
import pytest
from moto_s3 import s3_server

from streaming import SnapshotGoneError, StreamingDataLoader, StreamingDataset, TableMovedWarning
from streaming.core.profiles import PROFILES, sized
from streaming.tables import source

from helpers import ids_of, json_roundtrip, table_data, take

KEY_ID = "AKIALANCESTREAMINGID"
SECRET = "lance-streaming-secret-value-0123456789"
SECRETS = (KEY_ID, SECRET)


@pytest.fixture(scope="module")
def s3() -> Iterator[dict[str, str]]:
    """moto's S3-compatible HTTP server on 127.0.0.1 (a thread of this process; start() waits)."""
    with s3_server("tables", key_id=KEY_ID, secret=SECRET) as options:
        yield options


@pytest.fixture
def s3_uri(s3, request) -> str:
    uri = f"s3://tables/{request.node.name.replace('[', '_').replace(']', '')}.lance"
    start = 0
    for index, size in enumerate([70, 45, 60]):
        lance.write_dataset(
            table_data(start, size), uri, mode="create" if index == 0 else "append", storage_options=s3
        )
        start += size
    lance.dataset(uri, storage_options=s3).delete("id IN (3, 50, 120)")
    return uri


seen_text: list[str] = []  # every state, repr and message of this module's runs


def record(*items: object) -> None:
    for item in items:
        seen_text.append(json.dumps(item) if isinstance(item, dict) else str(item))


def dataset(uri: str, options: dict, **kwargs) -> StreamingDataset:
    kwargs.setdefault("num_splits", 4)
    kwargs.setdefault("block_rows", 4)
    kwargs.setdefault("shuffle_buffer_size", 48)
    data = StreamingDataset(uri, storage_options=options, **kwargs)
    record(repr(data), data.__dict__.get("_snapshot"))
    return data


def test_full_epoch_checkpoint_and_resume(s3, s3_uri):
    full = ids_of(dataset(s3_uri, s3))
    live = set(lance.dataset(s3_uri, storage_options=s3).to_table(columns=["id"]).column("id").to_pylist())
    assert len(full) == len(set(full)) == 4 * (len(live) // 4) and set(full) <= live
    first = dataset(s3_uri, s3)
    head = take(iter(first), 22)
    state = json_roundtrip(first.state_dict())
    record(state)
    lance.write_dataset(table_data(1000, 30), s3_uri, mode="append", storage_options=s3)
    resumed = dataset(s3_uri, s3)
    resumed.load_state_dict(state)
    assert head + ids_of(resumed) == full  # every sample handed out is counted (G7)
    record(resumed.state_dict())


def test_worker_processes_read_object_storage(s3, s3_uri):
    reference = [
        batch["id"].tolist()
        for batch in StreamingDataLoader(dataset(s3_uri, s3), batch_size=4, num_workers=2)
    ]
    first = dataset(s3_uri, s3)
    loader = StreamingDataLoader(first, batch_size=4, num_workers=2)
    iterator = iter(loader)
    before = [next(iterator)["id"].tolist() for _ in range(4)]
    state = json_roundtrip(loader.state_dict())
    record(state, repr(loader))
    del iterator
    resumed = dataset(s3_uri, s3)
    resumed.load_state_dict(state)
    after = [batch["id"].tolist() for batch in StreamingDataLoader(resumed, batch_size=4, num_workers=2)]
    assert before + after == reference
    assert Counter(i for batch in reference for i in batch) == Counter(ids_of(dataset(s3_uri, s3)))


def test_errors_on_object_storage_name_no_secrets(s3, s3_uri):
    errors = []
    for kwargs in ({"filter": "no_such_column > 3"}, {"columns": ["id", "nope"]}, {"num_splits": 10_000}):
        with pytest.raises(ValueError) as error:
            len(dataset(s3_uri, s3, **kwargs))  # what the version cannot plan: at the first use
        errors.append(error.value)
    first = dataset(s3_uri, s3)
    state = json_roundtrip(first.state_dict())
    lance.write_dataset(table_data(2000, 10), s3_uri, mode="append", storage_options=s3)
    lance.dataset(s3_uri, storage_options=s3).cleanup_old_versions(
        older_than=timedelta(0), delete_unverified=True
    )
    with pytest.raises(SnapshotGoneError) as gone:
        dataset(s3_uri, s3).load_state_dict(state)
    errors.append(gone.value)
    with pytest.raises(ValueError) as wrong:
        dataset(s3_uri, s3, shuffle_seed=5).load_state_dict(state)
    errors.append(wrong.value)
    record(*(str(error) for error in errors), *(repr(error) for error in errors))


def open_handle(kind: str, uri: str, options: dict):
    """The table as a user holds it: a LanceDB table or a lance.LanceDataset, with credentials."""
    if kind == "lance":
        return lance.dataset(uri, storage_options=options)
    bucket, name = uri.rsplit("/", 1)
    return lancedb.connect(bucket, storage_options=options).open_table(name.removesuffix(".lance"))


def from_handle(handle, **kwargs) -> StreamingDataset:
    """A dataset built from the handle alone: no storage_options passed again."""
    data = StreamingDataset(handle, num_splits=4, block_rows=4, shuffle_buffer_size=48, **kwargs)
    record(repr(data))
    return data


@pytest.mark.parametrize(
    ("kind", "workers", "context"),
    [
        ("lancedb", 0, None),
        ("lancedb", 2, None),
        ("lancedb", 2, "spawn"),
        ("lance", 0, None),
        ("lance", 2, None),
    ],
)
def test_a_table_handle_carries_its_credentials(s3, s3_uri, kind, workers, context):
    """Iteration, workers, resume and merge with nothing but the handle (forkserver default, spawn)."""
    handle = open_handle(kind, s3_uri, s3)

    def run(data: StreamingDataset):
        return StreamingDataLoader(
            data,
            batch_size=4,
            num_workers=workers,
            multiprocessing_context=context,
            timeout=120 if workers else 0,
        )

    reference = [batch["id"].tolist() for batch in run(dataset(s3_uri, s3))]
    first = from_handle(handle)
    loader = run(first)
    iterator = iter(loader)
    before = [next(iterator)["id"].tolist() for _ in range(4)]
    state = json_roundtrip(loader.state_dict())
    record(state)
    del iterator
    resumed = from_handle(open_handle(kind, s3_uri, s3))
    resumed.load_state_dict(state)
    assert before + [batch["id"].tolist() for batch in run(resumed)] == reference
    ranks = [from_handle(handle, rank=rank, world_size=2) for rank in range(2)]
    for data in ranks:
        take(iter(data), 6)  # three cycles of the rank's two splits
    merged = StreamingDataset.merge_state_dicts([data.state_dict() for data in ranks])
    record(merged)
    again = from_handle(handle)
    again.load_state_dict(merged)
    assert len(again) == len(ids_of(dataset(s3_uri, s3))) - 12


def _local_copy(s3_uri: str, s3: dict, path) -> str:
    """The same writes and deletion as ``s3_uri``'s, on local disk (same fragments, same rows)."""
    uri, start = str(path), 0
    for index, size in enumerate([70, 45, 60]):
        lance.write_dataset(table_data(start, size), uri, mode="create" if index == 0 else "append")
        start += size
    lance.dataset(uri).delete("id IN (3, 50, 120)")
    return uri


def test_object_store_uris_get_the_remote_profile(s3, s3_uri, tmp_path):
    remote = StreamingDataset(s3_uri, storage_options=s3, num_splits=4)
    row_bytes = source.row_bytes(lance.dataset(s3_uri, storage_options=s3), None)
    expected = sized(PROFILES["bucket"], row_bytes)
    assert expected.block_rows >= 2048 and expected.shuffle_buffer_size == 128 * expected.block_rows
    assert remote.state_dict()["plan"]["block_rows"] == expected.block_rows
    local_plan = StreamingDataset(s3_uri, storage_options=s3, num_splits=4, storage_profile="local")
    assert local_plan.state_dict()["plan"]["block_rows"] == 64
    explicit = StreamingDataset(s3_uri, storage_options=s3, num_splits=4, block_rows=8)
    assert explicit.state_dict()["plan"]["block_rows"] == 8
    on_disk = StreamingDataset(_local_copy(s3_uri, s3, tmp_path / "copy.lance"), num_splits=4)
    assert on_disk.state_dict()["plan"]["block_rows"] == 64
    assert sorted(ids_of(remote)) == sorted(ids_of(on_disk))


@pytest.mark.parametrize("direction", ["bucket to disk", "disk to bucket"])
def test_a_copied_table_resumes_under_the_other_profile(s3, s3_uri, tmp_path, direction):
    """A state written under one profile resumes exactly where the other is the default."""
    copy = _local_copy(s3_uri, s3, tmp_path / "copy.lance")

    def build(where: str) -> StreamingDataset:
        if where == "bucket":
            return StreamingDataset(s3_uri, storage_options=s3, num_splits=4)
        return StreamingDataset(copy, num_splits=4)

    before, after = direction.split(" to ")
    first = build(before)
    full = ids_of(build(before))
    head = take(iter(first), 22)
    state = json_roundtrip(first.state_dict())
    record(state)
    resumed = build(after)
    with pytest.warns(TableMovedWarning):
        resumed.load_state_dict(state)
    assert resumed.state_dict()["plan"] == state["plan"]
    assert head + ids_of(resumed) == full  # every sample handed out is counted (G7)
    target = copy if after == "disk" else s3_uri
    pinned = StreamingDataset(target, storage_options=s3, num_splits=4, block_rows=2)
    with pytest.raises(ValueError, match="block_rows"):
        pinned.load_state_dict(state)


def test_remote_profile_workers_resume_on_a_local_copy(s3, s3_uri, tmp_path):
    """Workers (forkserver) read with the remote profile's settings; the state resumes
    on a copy on local disk, whose dataset adopts the remote plan: the same batches."""
    copy = _local_copy(s3_uri, s3, tmp_path / "copy.lance")

    def loader(data: StreamingDataset) -> StreamingDataLoader:
        return StreamingDataLoader(data, batch_size=4, num_workers=2)

    remote = StreamingDataset(s3_uri, storage_options=s3, num_splits=4)
    reference = [batch["id"].tolist() for batch in loader(remote)]
    first = StreamingDataset(s3_uri, storage_options=s3, num_splits=4)
    iterator = iter(loader(first))
    before = [next(iterator)["id"].tolist() for _ in range(6)]
    state = json_roundtrip(first.state_dict())
    record(state)
    del iterator
    resumed = StreamingDataset(copy, num_splits=4)
    with pytest.warns(TableMovedWarning):
        resumed.load_state_dict(state)
    after = [batch["id"].tolist() for batch in loader(resumed)]
    assert before + after == reference


def test_no_secret_in_any_state_repr_or_message():
    """Runs last in this module: everything recorded above is free of credentials."""
    assert len(seen_text) > 10, "the runs above recorded nothing"
    for text in seen_text:
        for secret in SECRETS:
            assert secret not in text, f"a secret leaked into: {text[:200]}"
