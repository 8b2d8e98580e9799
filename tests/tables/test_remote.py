"""Remote LanceDB tables against the stand-in server (``streaming/testing/server.py``).

The stand-in answers lancedb's own remote client (``lancedb.connect("db://...",
host_override=...)``) from real Lance tables in a process of its own, so versions,
counts, filters and takes are Lance's, and it counts every request.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from itertools import chain
from pathlib import Path

import lance
import lancedb
import pyarrow as pa
import pytest

from streaming import (
    SnapshotGoneError,
    StreamingDataLoader,
    StreamingDataset,
    StreamingMixture,
)
from streaming.tables import remote
from streaming.testing import FAST_RETRIES, LanceDBStandIn

from helpers import check_resume_everywhere, ids_of, json_roundtrip, plain_transform, table_data, take
from launching import PROCS, free_port

API_KEY = "sk-remote-0123456789-never-on-disk"
ROWS = (50, 40, 30)  # three appends: 120 rows, then some deleted
DELETED = (3, 41, 42, 99)
LIVE = sorted(set(range(sum(ROWS))) - set(DELETED))
SMALL = {"block_rows": 4, "shuffle_buffer_size": 48}  # many windows and requests on a small table


def write(root: Path, name: str) -> None:
    """Table ``name`` under ``root``: ``ROWS`` appended in turn, ``DELETED`` ids deleted."""
    database = lancedb.connect(str(root))
    start = 0
    for index, count in enumerate(ROWS):
        if index == 0:
            table = database.create_table(name, table_data(start, count))
        else:
            table.add(table_data(start, count))
        start += count
    table.delete(f"id IN ({', '.join(map(str, DELETED))})")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("server")
    write(folder, "train")
    return folder


@pytest.fixture(scope="module")
def server(root: Path) -> Iterator[LanceDBStandIn]:
    with LanceDBStandIn(str(root), api_key=API_KEY) as stand_in:
        yield stand_in


@pytest.fixture
def table(server: LanceDBStandIn):
    return server.connect().open_table("train")


def test_one_epoch_is_exact_and_every_worker_count_gives_the_same_batches(server, table):
    """G1, G3: every live row once, for k = 0 and 2, the same global batches, each row
    fetched from the server once."""
    server.reset()
    data = StreamingDataset(table, num_splits=4, shuffle_seed=7, **SMALL)
    assert data.state_dict()["table"] == {"uri": "db://bench/train", "version": 4}
    # no row-id scan at start-up: one query of the first 16 rows measures how wide they are
    assert [body.get("k", body.get("limit")) for body in server.query_bodies()] == [16]
    batches, served = {}, {}
    for workers in (0, 2):
        data = StreamingDataset(table, num_splits=4, shuffle_seed=7, **SMALL)
        # head_start=False: the workers read every row (a head start has the trainer read the first batches)
        loader = StreamingDataLoader(data, batch_size=8, num_workers=workers, head_start=False)
        server.reset()
        batches[workers] = [sorted(int(i) for i in batch["id"]) for batch in loader]
        stats = server.stats()
        served[workers] = (stats["taken"], stats["requests"]["query"] - stats["takes"])
    assert batches[0] == batches[2]
    # each row taken once (workers read only their splits); one row-id query per reading process
    assert served == {0: (len(LIVE), 1), 2: (len(LIVE), 2)}
    assert sorted(i for batch in batches[0] for i in batch) == LIVE  # 116 rows, 4 splits: none left out


def test_rows_arrive_in_large_takes(server, table):
    """The server profile's blocks: a whole epoch of 116 rows is one take request."""
    data = StreamingDataset(table, num_splits=2, shuffle_seed=1)
    assert (
        data.state_dict()["plan"]["block_rows"] >= 2_048
    )  # the lancedb-server profile, sized for these rows
    server.reset()
    ids = ids_of(data)
    assert sorted(ids) == LIVE
    assert server.stats()["requests"] == {"query": 2}  # the virtual fragment's row ids, then one take
    assert server.stats()["takes"] == 1


def test_resume_after_any_sample_is_exact(table):
    prefixes = [0, 1, 5, 37, 38, 76, 113, 114]  # 114 samples: 3 splits of 38; cycle edges and inside
    check_resume_everywhere(
        lambda: StreamingDataset(table, num_splits=3, shuffle_seed=5, **SMALL), prefixes=prefixes
    )


@pytest.mark.parametrize("steps", [1, 4, 9])
def test_resume_on_one_then_two_then_three_ranks(table, steps):
    """Global batches of 12 over 6 splits: 1 rank stops after ``steps`` batches, 2 ranks
    resume from its loader's state and stop 2 steps later, 3 ranks finish from the merged
    states. Every row of the epoch exactly once, and every global step the step an
    uninterrupted run makes."""
    splits, global_batch = 6, 12

    def loaders(world: int) -> list[StreamingDataLoader]:
        return [
            StreamingDataLoader(
                StreamingDataset(table, num_splits=splits, shuffle_seed=2, rank=r, world_size=world, **SMALL),
                batch_size=global_batch // world,
            )
            for r in range(world)
        ]

    whole = [sorted(int(i) for i in batch["id"]) for batch in loaders(1)[0]]
    delivered: list[list[int]] = []
    states = None
    for world, stop in ((1, steps), (2, steps + 2), (3, None)):
        ranks = loaders(world)
        merged = None if states is None else StreamingDataset.merge_state_dicts(states)
        per_rank = []
        for loader in ranks:
            if merged is not None:
                loader.load_state_dict(json_roundtrip(merged))
            batches = iter(loader)
            count = len(loader) if stop is None else min(stop - len(delivered), len(loader))
            per_rank.append([[int(i) for i in next(batches)["id"]] for _ in range(count)])
        delivered += [sorted(chain.from_iterable(step)) for step in zip(*per_rank, strict=True)]
        states = [json_roundtrip(loader.state_dict()) for loader in ranks]
    assert delivered == whole
    every = list(chain.from_iterable(delivered))
    assert len(every) == len(set(every)) == 114  # 6 splits of 19: all delivered once


def test_a_filter_is_one_narrow_query(server, table):
    server.reset()
    data = StreamingDataset(table, num_splits=2, shuffle_seed=3, filter="label < 3", **SMALL)
    bodies = server.query_bodies()
    sample, scan = bodies  # the first 16 rows measure the row size; the filter is one query
    assert sample.get("k", sample.get("limit")) == 16 and scan.get("columns") == ["_rowoffset"]
    assert sorted(ids_of(data)) == [i for i in LIVE if i % 10 < 3]  # 34 rows, 2 splits


def test_the_version_stays_pinned_across_a_remote_append(root, server):
    write(root, "grow")
    table = server.connect().open_table("grow")
    data = StreamingDataset(table, num_splits=2, shuffle_seed=4, **SMALL)
    iterator = iter(data)
    first = take(iterator, 10)
    state = json_roundtrip(data.state_dict())
    iterator.close()
    lancedb.connect(str(root)).open_table("grow").add(table_data(1_000, 60))  # a new version on the server
    latest = server.connect().open_table("grow")
    assert latest.version == state["table"]["version"] + 1
    resumed = StreamingDataset(latest, num_splits=2, shuffle_seed=4, **SMALL)
    resumed.load_state_dict(state)
    rest = ids_of(resumed)
    assert sorted(first + rest) == LIVE  # the appended rows (ids >= 1000) are not in the pinned version
    fresh = StreamingDataset(latest, num_splits=2, shuffle_seed=4, **SMALL)
    assert fresh.state_dict()["table"]["version"] == latest.version


def test_a_version_the_server_no_longer_has_is_a_clear_error_at_load(root, server):
    write(root, "cleaned")
    table = server.connect().open_table("cleaned")
    old = StreamingDataset(table, num_splits=2, shuffle_seed=4, **SMALL)
    state = json_roundtrip(old.state_dict())
    local = lance.dataset(str(root / "cleaned.lance"))
    local.delete("id = 0")
    local.cleanup_old_versions(older_than=timedelta(0))
    latest = server.connect().open_table("cleaned")
    with pytest.raises(SnapshotGoneError, match=r"no longer has version 4.*tag_snapshot=True.*tags\.create"):
        StreamingDataset(latest, num_splits=2, shuffle_seed=4, **SMALL).load_state_dict(state)


def test_a_tagged_snapshot_survives_cleanup_on_the_server(root, server):
    write(root, "tagged")
    table = server.connect().open_table("tagged")
    data = StreamingDataset(table, num_splits=2, shuffle_seed=4, tag_snapshot=True, **SMALL)
    state = json_roundtrip(data.state_dict())
    assert "lance-streaming-v4" in table.tags.list()
    local = lance.dataset(str(root / "tagged.lance"))
    local.delete("id = 0")
    local.cleanup_old_versions(older_than=timedelta(0), error_if_tagged_old_versions=False)
    assert [v["version"] for v in local.versions()] == [4, 5]  # the untagged old versions are gone
    resumed = StreamingDataset(server.connect().open_table("tagged"), num_splits=2, shuffle_seed=4, **SMALL)
    resumed.load_state_dict(state)
    assert sorted(ids_of(resumed)) == LIVE
    assert resumed.release_snapshot() and "lance-streaming-v4" not in table.tags.list()


def test_a_mixture_of_a_remote_and_a_local_table(tmp_path, table):
    local = str(tmp_path / "local.lance")
    lance.write_dataset(table_data(10_000, 60), local)
    sources = {
        "remote": StreamingDataset(table, num_splits=4, shuffle_seed=1, **SMALL),
        "local": StreamingDataset(local, num_splits=4, shuffle_seed=1, **SMALL),
    }
    mixture = StreamingMixture(
        sources, weights={"remote": 0.5, "local": 0.5}, global_batch_size=8, stop="first_exhausted"
    )
    loader = StreamingDataLoader(mixture, batch_size=8, num_workers=2)
    ids = [int(i) for batch in loader for i in batch["id"]]
    remote_ids = [i for i in ids if i < 10_000]
    assert len(ids) == len(set(ids))
    assert set(remote_ids) <= set(LIVE) and remote_ids
    assert {i for i in ids if i >= 10_000} <= set(range(10_000, 10_060))


class OpenWith:
    """A picklable ``connection_factory``: every process connects to the stand-in itself."""

    def __init__(self, host: str) -> None:
        self.host = host

    def __call__(self, name: str):
        return lancedb.connect("db://bench", api_key=API_KEY, host_override=self.host).open_table(name)


def test_an_evaluation_loader_with_a_connection_factory_passes_every_row_each_time(server, table):
    """Persistent spawn workers serve two evaluation passes; every process opens the table through
    the user's ``connection_factory`` (no serialized connection travels)."""
    factory = OpenWith(server.host)
    assert remote.open_remote(table, version=None, factory=factory)[0].state is None
    data = StreamingDataset(
        table, num_splits=2, shuffle=False, evaluation=True, connection_factory=factory, **SMALL
    )
    loader = StreamingDataLoader(
        data, batch_size=6, num_workers=2, persistent_workers=True, multiprocessing_context="spawn"
    )
    for _ in range(2):
        ids = [int(i) for batch in loader for i in batch["id"]]
        assert sorted(ids) == LIVE


@pytest.mark.parametrize(
    "fault", [{"status": 503}, {"drop": True}, {"stall_s": 1.5}], ids=["5xx", "drop", "slow"]
)
def test_transient_faults_are_retried_and_logged_nothing_lost_or_repeated(server, caplog, fault):
    config = {**FAST_RETRIES, "timeout_config": {"read_timeout": 0.5}}
    table = server.connect(client_config=config).open_table("train")
    data = StreamingDataset(table, num_splits=2, shuffle_seed=6, **SMALL)
    iterator = iter(data)
    first = take(iterator, 20)
    server.fault("query", count=4, **fault)  # more than the client's own two retries
    with caplog.at_level(logging.WARNING, logger="streaming"):
        rest = list(ids_of(iterator))
    assert sorted(first + rest) == LIVE
    assert any("retrying" in record.getMessage() for record in caplog.records)


def test_what_cannot_succeed_is_a_clear_error_at_construction(root, server):
    """A refused key, a connection that cannot travel, storage_options, a missing table."""
    table = server.connect().open_table("train")
    server.fault("describe", count=1, status=401)
    with pytest.raises(PermissionError, match=r"refused the API key.*pass a valid api_key") as refused:
        StreamingDataset(table, num_splits=2)
    assert API_KEY not in str(refused.value)
    from lancedb.remote.header import StaticHeaderProvider

    provided = server.connect(client_config={"header_provider": StaticHeaderProvider({"x-team": "a"})})
    with pytest.raises(ValueError, match=r"cannot be reopened in other processes.*pass connection_factory="):
        StreamingDataset(provided.open_table("train"), num_splits=2)
    with pytest.raises(ValueError, match="storage_options= does not apply to a remote LanceDB table"):
        StreamingDataset(table, num_splits=2, storage_options={"aws_region": "us-east-1"})
    write(root, "dropped")
    doomed = server.connect().open_table("dropped")
    shutil.rmtree(root / "dropped.lance")
    with pytest.raises(ValueError, match="has no table 'dropped'"):
        StreamingDataset(doomed, num_splits=2)


def test_the_api_key_is_in_no_repr_or_state(table):
    data = StreamingDataset(table, num_splits=2, **SMALL)
    snapshot = data.state_dict()
    assert API_KEY not in repr(data) + repr(snapshot) + str(snapshot)
    connection, handle = remote.open_remote(table, version=None, factory=None)
    assert API_KEY not in repr(connection) + repr(handle)


def test_unshuffled_it_reads_what_the_local_table_reads_transformed_and_packed(root, server, table):
    """Without a shuffle the plan is storage order for both: the remote table gives exactly the
    local table's samples, through a transform and packed into blocks too."""
    local = str(root / "train.lance")
    for options in ({"transform": plain_transform}, {"columns": ["text"], "transform": plain_transform}):
        remote_samples = list(StreamingDataset(table, num_splits=2, shuffle=False, **SMALL, **options))
        local_samples = list(StreamingDataset(local, num_splits=2, shuffle=False, **SMALL, **options))
        assert remote_samples == local_samples and len(remote_samples) == len(LIVE)
    database = lancedb.connect(str(root))
    tokens = [[1000 * i + j for j in range(i % 7)] for i in range(90)]
    database.create_table("docs", pa.table({"tokens": pa.array(tokens, pa.list_(pa.int32()))}))
    packing = {"columns": ["tokens"], "pack_sequences": 16, "eos_id": 1, "pad_id": 0, "blocks_per_epoch": 20}
    remote_docs = server.connect().open_table("docs")
    blocks = [
        [
            b["input_ids"].tolist()
            for b in StreamingDataset(source, num_splits=2, shuffle=False, **SMALL, **packing)
        ]
        for source in (remote_docs, str(root / "docs.lance"))
    ]
    assert blocks[0] == blocks[1] and len(blocks[0]) == 20


def test_an_endless_remote_dataset_moves_through_epochs(table):
    data = StreamingDataset(table, num_splits=4, shuffle_seed=8, endless=True, **SMALL)
    iterator = iter(data)
    for epoch in range(2):
        assert take(iterator, len(LIVE)) == ids_of(
            StreamingDataset(table, num_splits=4, shuffle_seed=8, epoch=epoch, **SMALL)
        )


RANK_SCRIPT = PROCS / "remote_rank.py"


def test_gloo_ranks_cover_the_table_and_write_the_key_nowhere(tmp_path, server, short_tmp):
    """Two gloo ranks with two workers each: every row once, equal lengths; then every file
    the run wrote (logs at DEBUG, checkpoints, temporary files, its output) is read for the key."""
    out, scratch = tmp_path / "out", short_tmp
    out.mkdir()
    environment = {**os.environ, "REMOTE_RANK_API_KEY": API_KEY, "TMPDIR": str(scratch)}
    port = free_port()
    flags = [f"--out={out}", f"--host={server.host}", f"--port={port}", "--world-size=2"]
    flags += ["--filter=label >= 1"]  # its index travels to the workers through a temporary file
    ranks = [
        subprocess.Popen(
            [sys.executable, str(RANK_SCRIPT), f"--rank={rank}", *flags],
            env=environment,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for rank in range(2)
    ]
    outputs = [rank.communicate(timeout=300)[0] for rank in ranks]
    assert [rank.returncode for rank in ranks] == [0, 0], b"\n".join(outputs).decode()
    delivered = [json.loads((out / f"ids{rank}.json").read_text()) for rank in range(2)]
    assert len(delivered[0]) == len(delivered[1])
    expected = [i for i in LIVE if i % 10 >= 1]  # 104 rows, 4 splits: none left out
    assert sorted(delivered[0] + delivered[1]) == expected
    written = [path for path in tmp_path.rglob("*") if path.is_file()]
    assert any(path.name == "checkpoint.pt" for path in written) and any(
        path.suffix == ".txt" for path in written
    )
    for path in written:
        assert API_KEY.encode() not in path.read_bytes(), path
    for output in outputs:
        assert API_KEY.encode() not in output


def test_a_blob_column_of_a_remote_table_is_refused_at_construction_naming_it(root, server):
    """Blob bytes are not read through a LanceDB server: the column is named with the fix at
    construction (never a decoder error in the loop), and the other columns stream."""
    from blob_tables import rows as blob_rows

    lance.write_dataset(blob_rows(0, 40, blob=True), str(root / "pictures.lance"))
    table = server.connect().open_table("pictures")
    with pytest.raises(TypeError, match=r"'img'.*remote table.*columns="):
        StreamingDataset(table, num_splits=2, shuffle_seed=4)
    plain = StreamingDataset(table, num_splits=2, shuffle_seed=4, columns=["id", "label"])
    assert sorted(ids_of(plain)) == list(range(40))


def test_a_local_table_never_imports_lancedb(tmp_path):
    """A URI or a lance.LanceDataset is told from a server's table without importing
    lancedb (about a second of start-up), and still reads."""
    uri = str(tmp_path / "local.lance")
    lance.write_dataset(pa.table({"id": list(range(64))}), uri)
    script = (
        "import sys, lance\n"
        "from streaming import StreamingDataset\n"
        f"for table in ({uri!r}, lance.dataset({uri!r})):\n"
        "    assert sorted(row['id'] for row in StreamingDataset(table, num_splits=2)) == list(range(64))\n"
        "print('lancedb' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
