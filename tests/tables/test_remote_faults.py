"""Remote tables under faults and deletions, against the stand-in server in its own process.

Every fault ends one of two ways (``streaming/tables/remoteretry.py``): retried and exact
(every row once), or a clear error naming the fix with a state that resumes exactly.
Deleted rows never make a take cost offsets x rows: every take is by row id.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import lance
import lancedb
import numpy as np
import pyarrow as pa
import pytest

from streaming import SnapshotGoneError, StreamingDataLoader, StreamingDataset
from streaming.tables import remote
from streaming.tables.remoteretry import BUDGET_VARIABLE
from streaming.testing import FAST_RETRIES, LanceDBStandIn

from helpers import LogToFolder, ids_of, json_roundtrip, table_data
from launching import await_exits

API_KEY = "sk-faults-0123456789-never-on-disk"
ROWS = 2_000
DELETED = set(range(7, ROWS, 13))  # 154 rows, spread over both fragments
LIVE = sorted(set(range(ROWS)) - DELETED)
SETTINGS = {"num_splits": 4, "shuffle_seed": 3, "block_rows": 8, "shuffle_buffer_size": 64}
FAULTS = (  # every retried kind of RETRIED, queued: each hits the next requests in turn (statuses
    {"cut": True, "count": 1},  # twice: once more than the client's own retries of FAST_RETRIES)
    {"status": 429, "retry_after_s": 1, "count": 2},
    {"drop": True, "count": 1},
    {"status": 409, "count": 2},
    {"status": 503, "count": 2},
)


def write(root: Path, name: str) -> None:
    """``ROWS`` rows in two appends, then ``DELETED`` deleted."""
    table = lancedb.connect(str(root)).create_table(name, table_data(0, ROWS // 2))
    table.add(table_data(ROWS // 2, ROWS // 2))
    table.delete(f"id IN ({', '.join(map(str, sorted(DELETED)))})")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("faults")
    write(folder, "train")
    return folder


@pytest.fixture(scope="module")
def server(root: Path) -> Iterator[LanceDBStandIn]:
    with LanceDBStandIn(str(root), api_key=API_KEY) as stand_in:
        yield stand_in


@pytest.fixture(scope="module")
def epoch(server: LanceDBStandIn) -> list[int]:
    """The planned rows of one epoch with ``SETTINGS`` (1,844 of the 1,846 live rows: 4 splits of 461)."""
    planned = sorted(ids_of(StreamingDataset(server.connect().open_table("train"), **SETTINGS)))
    assert len(planned) == len(set(planned)) == 1_844 and set(planned) <= set(LIVE)
    return planned


def loader(
    table, workers: int, *, multiprocessing_context=None, worker_init_fn=None, **options
) -> StreamingDataLoader:
    data = StreamingDataset(table, **SETTINGS, **options)
    return StreamingDataLoader(
        data,
        batch_size=16,
        num_workers=workers,
        multiprocessing_context=multiprocessing_context,
        worker_init_fn=worker_init_fn,
    )


def retry_warnings(caplog: pytest.LogCaptureFixture, logs: LogToFolder) -> list[str]:
    """What the trainer (``caplog``) and every worker (``logs``) warned of retries."""
    lines = [record.getMessage() for record in caplog.records]
    lines += [line for worker in logs.records().values() for line in worker]
    return [line for line in lines if "retrying in" in line]


def test_deleted_rows_are_taken_by_row_id_and_read_what_the_local_table_reads(root, server):
    """No take names offsets; the unshuffled remote epoch is the local table's, row for row."""
    table = server.connect().open_table("train")
    server.reset()
    remote_ids = ids_of(StreamingDataset(table, num_splits=2, shuffle=False, block_rows=8))
    local_ids = ids_of(StreamingDataset(str(root / "train.lance"), num_splits=2, shuffle=False, block_rows=8))
    assert remote_ids == local_ids and sorted(remote_ids) == LIVE
    bodies = server.query_bodies()
    sized = [body for body in bodies if body["take"] is None and body.get("k", body.get("limit")) == 16]
    assert len(sized) == 1, "one read of the first 16 rows measures the row size"
    kinds = [body["take"] for body in bodies if body not in sized]
    assert kinds.count(None) == 1 and set(kinds) == {None, "_rowid"}  # one row-id query, takes by row id
    assert all(body["version"] == table.version for body in server.query_bodies())  # pinned


def test_a_server_that_scans_out_of_storage_order_gives_the_same_row_ids(root, server):
    """A page of row ids that is not the offsets asked for (its _rowoffset says so) is noticed: the
    table's row ids are read in one scan instead, and they are the same."""
    ids = pa.array(np.arange(80_000), pa.int64())
    table = lancedb.connect(str(root)).create_table("long", pa.table({"id": ids}))
    table.delete("id % 10 = 3")
    remote_table = server.connect().open_table("long")
    _, ordered = remote.open_remote(remote_table, version=None, factory=None)
    expected = [ordered.fragment_ids(1), ordered.fragment_ids(0)]
    server.set_scan_order("reversed")
    try:
        server.reset()
        _, handle = remote.open_remote(remote_table, version=None, factory=None)
        found = [handle.fragment_ids(1), handle.fragment_ids(0)]
        kinds = [body["take"] for body in server.query_bodies()]
    finally:
        server.set_scan_order("storage")
    assert all(np.array_equal(a, b) for a, b in zip(found, expected, strict=True))
    assert len(expected[0]) == 72_000 - 65_536 and len(expected[1]) == 65_536
    assert kinds == [None, None]  # the page, then the whole table's row ids once, kept


def test_a_table_with_stable_row_ids_compacted_after_deletions(tmp_path):
    """Row ids that are not addresses (stable row ids, moved by a compaction) read the same rows."""
    uri = tmp_path / "stable.lance"
    lance.write_dataset(table_data(0, 300), str(uri), enable_stable_row_ids=True, max_rows_per_file=100)
    dataset = lance.dataset(str(uri))
    dataset.delete("id % 7 = 0")
    dataset.optimize.compact_files(target_rows_per_fragment=1_000)
    expected = ids_of(StreamingDataset(str(uri), num_splits=2, shuffle_seed=5, block_rows=8))
    with LanceDBStandIn(str(tmp_path), api_key=API_KEY) as stand_in:
        table = stand_in.connect().open_table("stable")
        assert ids_of(StreamingDataset(table, num_splits=2, shuffle_seed=5, block_rows=8)) == expected
    assert len(expected) == 256 and set(expected) <= {i for i in range(300) if i % 7}  # 257 live, 2 splits


@pytest.mark.parametrize(("workers", "context"), [(0, None), (2, None), (2, "spawn")])
def test_every_retried_fault_is_retried_and_every_row_arrives_once(server, epoch, caplog, workers, context):
    """Answers cut half way, 429 with Retry-After, dropped connections, 409 and 503, more of each than
    the client's own retries: retried here (logged), nothing lost or repeated. Workers start with
    the loader's default start method, and with spawn."""
    table = server.connect(client_config=FAST_RETRIES).open_table("train")
    data = loader(table, workers, multiprocessing_context=context)
    server.clear_faults()
    for fault in FAULTS:
        server.fault("query", **fault)
    with caplog.at_level(logging.WARNING, logger="streaming"):
        ids = [int(i) for batch in data for i in batch["id"]]
    assert sorted(ids) == epoch
    assert server.stats()["faults_left"] == 0  # every fault was met, and got past
    if workers == 0:
        waits = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
        assert any("error decoding response body" in w for w in waits), waits
        assert any("HTTP 429" in w and "retrying in 1.00 s" in w for w in waits), waits  # the floor


DOWN_S = 1.0
"""How long the server stays away: longer than lancedb's own retries (FAST_RETRIES: a few ms),
shorter than this package's budget (32 s)."""


@pytest.mark.parametrize(("workers", "context"), [(0, None), (2, None), (2, "spawn")])
def test_a_server_away_longer_than_the_clients_retries_costs_a_pause(
    server, epoch, caplog, tmp_path, workers, context
):
    """A take stalls, the server is killed under it (SIGKILL: every connection cut) and comes back on
    its port DOWN_S later: lancedb gives up (its RetryError, or a plain RuntimeError 'Hit retry
    limit'), this package retries, the epoch is exact, and the warnings name the server, what could
    not be done and what failed."""
    table = server.connect(client_config=FAST_RETRIES).open_table("train")
    logs = LogToFolder(tmp_path)
    data = loader(table, workers, multiprocessing_context=context, worker_init_fn=logs if workers else None)
    batches = iter(data)
    outages = []

    def go_away() -> None:
        try:
            server.wait_stalled(1)
            outages.append(server.outage(DOWN_S))
        except BaseException as error:  # reported below, in the test's thread
            outages.append(error)

    with caplog.at_level(logging.WARNING, logger="streaming"):
        ids = [int(i) for i in next(batches)["id"]]
        server.clear_faults()
        server.fault("query", count=1, stall_s=120)
        away = threading.Thread(target=go_away)
        away.start()
        ids += [int(i) for batch in batches for i in batch["id"]]
    away.join(timeout=120)
    assert len(outages) == 1 and not isinstance(outages[0], BaseException), outages
    outages[0].join()
    assert sorted(ids) == epoch
    said = retry_warnings(caplog, logs)
    assert said, "the outage was met and retried"
    assert all(server.host in line and "could not" in line for line in said), said
    assert any("Hit retry limit" in line or "error sending request" in line for line in said), said


def test_a_server_away_past_the_budget_ends_with_one_error_and_resumes_exactly(
    server, epoch, tmp_path, monkeypatch
):
    """The server stays away past the retry budget (3 s here, through LANCE_STREAMING_REMOTE_RETRY_S):
    one error naming the server, the table, what was retried and for how long, within the budget
    plus 10 s; no worker left behind; the loader's state resumes exactly once the server is back."""
    monkeypatch.setenv(BUDGET_VARIABLE, "3")
    table = server.connect(client_config=FAST_RETRIES).open_table("train")
    logs = LogToFolder(tmp_path)
    first = loader(table, 2, worker_init_fn=logs)
    batches = iter(first)
    delivered = [int(i) for i in next(batches)["id"]]
    server.stop()
    went = time.monotonic()
    try:
        with pytest.raises(RuntimeError) as raised:
            for batch in batches:
                delivered += [int(i) for i in batch["id"]]
        took = time.monotonic() - went
        state = json_roundtrip(first.state_dict())
    finally:
        server.start()
    message = str(raised.value)
    assert f"the LanceDB server {server.host} (database 'bench') kept failing for" in message, message
    assert "'db://bench/train'" in message and "retry budget is 3 s" in message, message
    assert "'hit retry limit' x" in message and BUDGET_VARIABLE in message, message  # what, how often
    assert took < 3 + 10, f"the error came {took:.1f} s after the server went away"
    workers = list(logs.records())
    assert len(workers) == 2 and not await_exits(workers, within=10), "the workers stopped"
    again = loader(server.connect().open_table("train"), 0)
    again.load_state_dict(state)
    rest = [int(i) for batch in again for i in batch["id"]]
    assert sorted(delivered + rest) == epoch


@pytest.mark.parametrize("workers", [0, 2])
def test_a_version_cleaned_up_mid_epoch_is_snapshot_gone_and_the_state_resumes(tmp_path, epoch, workers):
    """The pinned version is cleaned up on the server mid-epoch: SnapshotGoneError naming the fix
    (not a missing table). The loader's state is exact: once the version is back and tagged, it
    resumes with the rest of the epoch, every row once."""
    write(tmp_path, "gone")
    folder, backup = tmp_path / "gone.lance", tmp_path / "backup"
    with LanceDBStandIn(str(tmp_path), api_key=API_KEY) as stand_in:
        table = stand_in.connect(client_config=FAST_RETRIES).open_table("gone")
        first = loader(table, workers)
        batches = iter(first)
        delivered = [int(i) for i in next(batches)["id"]]
        shutil.copytree(folder, backup)
        local = lance.dataset(str(folder))
        local.delete("id = 0")
        local.cleanup_old_versions(older_than=timedelta(0))
        with pytest.raises(SnapshotGoneError, match=r"no longer has version 3 .*tag_snapshot=True"):
            for batch in batches:
                delivered += [int(i) for i in batch["id"]]
        state = json_roundtrip(first.state_dict())
        shutil.rmtree(folder)
        shutil.copytree(backup, folder)  # the version is back (restored from a backup), and tagged
        stand_in.connect().open_table("gone").tags.create("keep", 3)
        again = loader(stand_in.connect().open_table("gone"), workers, version=3)
        again.load_state_dict(state)
        rest = [int(i) for batch in again for i in batch["id"]]
    assert state["table"]["version"] == 3
    assert sorted(delivered + rest) == epoch  # the same table written again: the same plan


def test_what_no_retry_can_fix_is_final(server):
    """A refused key mid-epoch is PermissionError; a body over the server's bound (413) is raised as
    lancedb gave it, once; an answer missing rows asked for (a row id past the end) is an error."""
    table = server.connect(client_config=FAST_RETRIES).open_table("train")
    batches = iter(StreamingDataset(table, **SETTINGS))
    next(batches)
    server.clear_faults()
    server.fault("query", count=1, status=401)
    with pytest.raises(PermissionError, match=r"refused the API key.*pass a valid api_key"):
        list(batches)
    _, handle = remote.open_remote(table, version=None, factory=None)
    server.reset()
    with pytest.raises(Exception, match="413") as refused:
        handle.take(np.arange(200_000, dtype=np.uint64), ["id"])  # about 1.5 MB of row ids
    assert not isinstance(refused.value, SnapshotGoneError | PermissionError)
    assert server.stats()["requests"]["query"] == 1  # not retried
    past = np.array([ROWS + 5], dtype=np.uint64) | (np.uint64(1) << np.uint64(32))
    with pytest.raises(RuntimeError, match="not the rows asked for"):
        handle.take(past, ["id"])


def test_the_stand_in_checks_the_database_header(server):
    """Every process opened its connection with the database it was given: the stand-in answers
    only that database (which the k=2 tests above rely on)."""
    other = lancedb.connect("db://another", api_key=API_KEY, host_override=server.host)
    with pytest.raises(ValueError, match="not found"):
        other.open_table("train")
    assert pa.types.is_int64(server.connect().open_table("train").schema.field("id").type)
