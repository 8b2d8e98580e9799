"""The local cache of tables on object storage (``cache_dir=``), against moto's S3 server in a process
of its own behind the benchmarks' relay, which logs every request it passes on.

A fill is one GET of a whole data or deletion file with the user agent
``lance-streaming-cache``, so the relay's log counts the downloads of every cache
entry exactly. Runs that must be
separate processes (gloo ranks and their workers, a run SIGKILLed mid-fill, a run
whose disk is full) are ``tests/procs/cache_run.py``.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import lance
import pytest

from benchmarks.harness.s3 import BUCKET, Store, running_store, started_relay
from benchmarks.harness.tables import wide_chunk
from streaming import CacheUnusedWarning, StreamingDataLoader, StreamingDataset
from streaming.cli import main as cli
from streaming.core.cachesettings import CACHE_DIR_ENV, CACHE_LIMIT_ENV, CacheSettings, cache_settings
from streaming.tables import diskcache
from streaming.tables.snapshotcache import FILL_USER_AGENT

from helpers import json_roundtrip
from launching import PROCS, free_port

RUN_SCRIPT = PROCS / "cache_run.py"
ROWS, ROWS_PER_FILE = 4000, 500
DELETED = (3, 700, 1500, 3999)


@pytest.fixture(scope="module")
def relay_log(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("relay") / "requests.log"


@pytest.fixture(scope="module")
def store(tmp_path_factory, relay_log) -> Iterator[Store]:
    """moto's server and the relay (which logs every request to ``relay_log``)."""
    before = os.environ.get("RELAY_LOG")
    os.environ["RELAY_LOG"] = str(relay_log)
    try:
        with running_store(str(tmp_path_factory.mktemp("server") / "server.log")) as running:
            yield running
    finally:
        os.environ.pop("RELAY_LOG") if before is None else os.environ.update(RELAY_LOG=before)


@pytest.fixture
def table(store, request) -> str:
    """8 data files and their deletion files on the server, written straight to it."""
    uri = f"s3://{BUCKET}/{request.node.name.replace('[', '_').replace(']', '')}.lance"
    direct = store.options(relayed=False)
    lance.write_dataset(wide_chunk(0, ROWS), uri, max_rows_per_file=ROWS_PER_FILE, storage_options=direct)
    lance.dataset(uri, storage_options=direct).delete(f"id IN {DELETED}")
    store.set_delay(0)
    return uri


def build(uri: object, store: Store, **kwargs) -> StreamingDataset:
    return StreamingDataset(
        uri,
        storage_options=store.options(relayed=True),
        num_splits=8,
        block_rows=64,
        shuffle_buffer_size=2048,
        **kwargs,
    )


def epoch_ids(data: StreamingDataset, epoch: int, *, workers: int = 0) -> list[int]:
    data.set_epoch(epoch)
    return [
        i
        for batch in StreamingDataLoader(data, batch_size=16, num_workers=workers)
        for i in batch["id"].tolist()
    ]


def table_files(uri: str, store: Store) -> dict[str, int | None]:
    """Every data and deletion file of the table's latest version, and its size."""
    handle = lance.dataset(uri, storage_options=store.options(relayed=False))
    files: dict[str, int | None] = {}
    for fragment in handle.get_fragments():
        files.update({f"data/{file.path}": file.file_size_bytes for file in fragment.data_files()})
        if fragment.deletion_file():
            files[fragment.deletion_file()] = None
    return files


class Requests:
    """The relay's log from the moment this was made."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self.start = log.stat().st_size if log.exists() else 0

    def lines(self) -> list[list[str]]:
        """(method, path, user agent, range) of every request."""
        with self.log.open() as file:
            file.seek(self.start)
            return [[*line.rstrip("\n").split(" ", 3), "", ""][:4] for line in file]

    def downloads(self) -> Counter[str]:
        """The fills' GETs, by table-relative path."""
        found: Counter[str] = Counter()
        for method, path, agent, _ in self.lines():
            if method == "GET" and agent == FILL_USER_AGENT:
                found[path.split(".lance/", 1)[1]] += 1
        return found

    def count(self) -> int:
        return len(self.lines())


def wait_filled(cache: Path, files: dict[str, int | None], timeout: float = 60) -> None:
    """Wait until every file is in the cache (the fills run in the background)."""
    deadline = time.monotonic() + timeout
    while True:
        stored = (
            {
                str(path.relative_to(table)): path
                for table in (cache / "store").iterdir()
                for path in table.rglob("*")
                if path.is_file()
            }
            if (cache / "store").exists()
            else {}
        )
        if set(files) <= set(stored):
            return
        assert time.monotonic() < deadline, f"not filled: {sorted(set(files) - set(stored))}"
        time.sleep(0.05)


def spawn_run(uri: str, store: Store, out: Path, *flags: str) -> subprocess.Popen[str]:
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "CACHE_TEST_OPTIONS": json.dumps(store.options(relayed=True))}
    env["PYTHONPATH"] = os.pathsep.join([str(RUN_SCRIPT.parent), env.get("PYTHONPATH", "")])
    return subprocess.Popen(
        [sys.executable, str(RUN_SCRIPT), f"--uri={uri}", f"--out={out}", *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


def finish(process: subprocess.Popen[str]) -> str:
    try:
        output, _ = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, output
    return output


def logged(out: Path) -> tuple[dict[int, list[int]], list[dict]]:
    """(ids delivered per epoch over every rank, the stats records)."""
    ids: dict[int, list[int]] = {}
    stats = []
    for path in sorted(out.glob("rank*.jsonl")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if "stats" in record:
                stats.append(record)
            else:
                ids.setdefault(record["epoch"], []).extend(record["ids"])
    return ids, stats


# -- settings ----------------------------------------------------------------------


def test_cache_settings_come_from_the_keywords_else_the_environment(tmp_path):
    environ = {CACHE_DIR_ENV: str(tmp_path / "env"), CACHE_LIMIT_ENV: "2GiB"}
    assert cache_settings(None, None, {}) is None
    assert cache_settings(None, None, environ) == CacheSettings(str(tmp_path / "env"), 2 << 30)
    assert cache_settings(tmp_path / "kw", "500 MB", environ) == CacheSettings(
        str(tmp_path / "kw"), 500 * 10**6
    )
    assert cache_settings(str(tmp_path), 4096, {}) == CacheSettings(str(tmp_path), 4096)
    with pytest.raises(ValueError, match=r"cache_limit must be .* got 'lots'; pass .*'20GiB'"):
        cache_settings(tmp_path, "lots", {})
    with pytest.raises(ValueError, match=rf"{CACHE_LIMIT_ENV} must be.*got '-1'"):
        cache_settings(tmp_path, None, {CACHE_LIMIT_ENV: "-1"})
    with pytest.raises(ValueError, match="cache_limit=4096 needs a cache directory; pass cache_dir="):
        cache_settings(None, 4096, {})
    with pytest.raises(ValueError, match="cache_dir must be a directory path"):
        cache_settings(3, None, {})


def test_a_local_table_ignores_the_cache_and_warns_once(tmp_path, monkeypatch):
    """``cache_dir=`` cannot speed up a table already on local disk: one
    ``CacheUnusedWarning`` per process and table, nothing written, the same samples."""
    uri, folder = str(tmp_path / "t.lance"), tmp_path / "cache"
    lance.write_dataset(wide_chunk(0, 64), uri)
    with pytest.warns(CacheUnusedWarning, match=r"cache_dir='.*cache' is not used for '.*t\.lance'.*leave"):
        data = StreamingDataset(uri, num_splits=2, cache_dir=folder)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per process and table: no second warning
        again = StreamingDataset(uri, num_splits=2, cache_dir=folder)
        monkeypatch.setenv(CACHE_DIR_ENV, str(folder))  # meant for every table: never warned
        from_env = StreamingDataset(uri, num_splits=2)
    for each in (data, again, from_env):
        assert sorted(
            i for batch in StreamingDataLoader(each, batch_size=8) for i in batch["id"].tolist()
        ) == list(range(64))
        assert each.stats()["rows_cached"] == 0
    assert not folder.exists(), "nothing is cached for a local table"


# -- one process -----------------------------------------------------------------------


def test_epoch_two_reads_local_with_the_same_samples_and_states(store, table, relay_log, tmp_path):
    """Epoch 1 fills the cache as it reads; epoch 2 makes no request; every sample, the
    order and every state are those of a run without the cache, and states cross over."""
    cache = tmp_path / "cache"
    plain = build(table, store)
    reference = [epoch_ids(plain, 0), epoch_ids(plain, 1)]
    data = build(table, store, cache_dir=cache)
    assert epoch_ids(data, 0) == reference[0]
    files = table_files(table, store)
    wait_filled(cache, files)
    requests = Requests(relay_log)
    assert epoch_ids(data, 1) == reference[1]
    assert requests.count() == 0, requests.lines()
    assert data.stats()["rows_cached"] >= len(reference[1])
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700

    states, heads = {}, {}
    for name, kwargs in (("plain", {}), ("cached", {"cache_dir": cache})):
        before = build(table, store, epoch=1, **kwargs)
        iterator = iter(StreamingDataLoader(before, batch_size=16))
        heads[name] = [i for _ in range(7) for i in next(iterator)["id"].tolist()]
        states[name] = json_roundtrip(before.state_dict())
        del iterator
    assert states["plain"] == states["cached"] and heads["plain"] == heads["cached"]
    for taken, kwargs in (("cached", {}), ("plain", {"cache_dir": cache})):  # and the other way round
        after = build(table, store, epoch=1, **kwargs)
        after.load_state_dict(states[taken])
        rest = [i for batch in StreamingDataLoader(after, batch_size=16) for i in batch["id"].tolist()]
        assert heads[taken] + rest == reference[1]


def test_the_cache_folder_holds_no_credential(store, table, tmp_path):
    cache = tmp_path / "cache"
    data = build(table, store, cache_dir=cache)
    epoch_ids(data, 0)
    wait_filled(cache, table_files(table, store))
    secrets = [store.options(relayed=True)[key] for key in ("aws_access_key_id", "aws_secret_access_key")]
    assert all(len(secret) >= 8 for secret in secrets)
    for path in cache.rglob("*"):
        assert not any(secret in str(path) for secret in secrets), path
        if path.is_file():
            content = path.read_bytes()
            assert not any(secret.encode() in content for secret in secrets), path
    listed = diskcache.usage(str(cache))
    assert [table["uri"] for table in listed["tables"]] == [table]


def test_the_command_line_shows_and_clears_the_cache(store, table, tmp_path, capsys):
    cache = tmp_path / "cache"
    data = build(table, store, cache_dir=cache)
    epoch_ids(data, 0)
    files = table_files(table, store)
    wait_filled(cache, files)
    assert cli(["cache", str(cache)]) == 0
    shown = capsys.readouterr().out
    assert table in shown and f"{len(files)} entries" in shown and f"version {data.version}" in shown
    assert f"{len(files)}/{len(files)} files cached" in shown
    assert cli(["cache", str(cache), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["entries"] == len(files) and listed["bytes"] == sum(
        os.path.getsize(path) for path in (cache / "store").rglob("*") if path.is_file()
    )
    assert cli(["cache", str(cache), "--clear"]) == 0
    assert "removed" in capsys.readouterr().out
    assert diskcache.usage(str(cache))["entries"] == 0
    assert epoch_ids(data, 1) == epoch_ids(build(table, store), 1)  # refills, reads right
    assert cli(["cache", str(tmp_path / "nothing")]) == 1
    assert "no cache at" in capsys.readouterr().err


@pytest.mark.parametrize("workers", [0, 2])
def test_the_users_storage_options_win_over_a_handles_in_every_reader(
    store, table, relay_log, tmp_path, workers
):
    """A ``lance.LanceDataset`` opened with other options (through a second relay, stopped
    once it is open: its options reach nothing after) and the user's ``storage_options``:
    the trainer (k=0) or two worker processes (k=2, forkserver) and the cache's downloads
    all read with the user's, so the epoch is a plain run's and every file is downloaded
    once, through the user's relay."""
    reference = epoch_ids(build(table, store), 0)
    unlogged = {name: value for name, value in os.environ.items() if name != "RELAY_LOG"}
    with started_relay(store.server_endpoint, env=unlogged) as endpoint:
        handle = lance.dataset(
            table,
            storage_options={
                **store.options(relayed=False),
                "aws_endpoint": endpoint,
                "client_max_retries": "0",
            },
        )
    assert handle.initial_storage_options["aws_endpoint"] == endpoint
    cache, requests = tmp_path / "cache", Requests(relay_log)
    data = build(handle, store, cache_dir=cache)
    assert epoch_ids(data, 0, workers=workers) == reference
    files = table_files(table, store)
    wait_filled(cache, files)
    assert requests.downloads() == Counter(dict.fromkeys(files, 1))


# -- several processes ------------------------------------------------------------------


def planned(table: str, store: Store, epochs: int) -> dict[int, list[int]]:
    plain = build(table, store)
    return {epoch: sorted(epoch_ids(plain, epoch)) for epoch in range(epochs)}


def test_two_ranks_of_two_workers_fill_one_cache_downloading_each_file_once(
    store, table, relay_log, tmp_path
):
    """Six processes on one machine share the cache: every file is downloaded once, every
    epoch delivers every planned row once, and the second epoch reads from the cache."""
    cache, out = tmp_path / "cache", tmp_path / "out"
    requests = Requests(relay_log)
    port = free_port()
    ranks = [
        spawn_run(
            table,
            store,
            out,
            f"--cache-dir={cache}",
            "--epochs=2",
            "--workers=2",
            f"--rank={rank}",
            "--world-size=2",
            f"--port={port}",
        )
        for rank in range(2)
    ]
    for rank in ranks:
        finish(rank)
    ids, stats = logged(out)
    assert {epoch: sorted(found) for epoch, found in ids.items()} == planned(table, store, 2)
    files = table_files(table, store)
    assert requests.downloads() == Counter(dict.fromkeys(files, 1))
    assert sum(record["stats"]["rows_cached"] for record in stats if record["epoch"] == 1) > 0
    assert diskcache.usage(str(cache))["entries"] == len(files)


def test_a_run_killed_mid_fill_leaves_nothing_a_later_run_reads_as_valid(store, table, tmp_path):
    """SIGKILL while downloads are in flight (the relay holds each request 1.5 s), then a
    run that reads the right rows, finishes the epoch exactly and fills the cache whole."""
    cache, out = tmp_path / "cache", tmp_path / "out"
    store.set_delay(1500)
    killed = spawn_run(table, store, out, f"--cache-dir={cache}")
    try:
        deadline = time.monotonic() + 120
        while not any((cache / "tmp").glob("*")) if (cache / "tmp").exists() else True:
            assert killed.poll() is None and time.monotonic() < deadline, "no fill started"
            time.sleep(0.02)
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait()
    finally:
        store.set_delay(0)
        if killed.poll() is None:
            killed.kill()
            killed.wait()
    assert any((cache / "tmp").iterdir()), "the killed fill left its temporary file"
    files = table_files(table, store)
    for path in (cache / "store").rglob("*"):
        if path.is_file():  # only complete entries were ever renamed into the store
            relative = str(path.relative_to(next((cache / "store").iterdir())))
            assert files[relative] in (None, path.stat().st_size)
    reference = epoch_ids(build(table, store), 0)
    again = build(table, store, cache_dir=cache)
    assert epoch_ids(again, 0) == reference
    wait_filled(cache, files)
    assert not any((cache / "tmp").iterdir()), "the dead run's temporary file was removed"
    for relative, size in files.items():
        if size is not None:
            assert (next((cache / "store").iterdir()) / relative).stat().st_size == size
    assert epoch_ids(again, 1) == epoch_ids(build(table, store), 1)
    assert again.stats()["rows_cached"] > 0


def test_a_limit_smaller_than_the_table_evicts_and_delivers_every_sample_once(
    store, table, relay_log, tmp_path
):
    cache, out = tmp_path / "cache", tmp_path / "out"
    files = table_files(table, store)
    largest = max(size for size in files.values() if size is not None)
    limit = 3 * largest  # three of the eight data files
    requests = Requests(relay_log)
    finish(
        spawn_run(
            table, store, out, f"--cache-dir={cache}", f"--cache-limit={limit}", "--epochs=3", "--workers=2"
        )
    )
    ids, stats = logged(out)
    assert {epoch: sorted(found) for epoch, found in ids.items()} == planned(table, store, 3)
    assert all(len(found) == len(set(found)) for found in ids.values())
    listing = diskcache.usage(str(cache))
    assert 0 < listing["bytes"] <= limit and listing["entries"] < len(files)
    assert sum(requests.downloads().values()) > listing["entries"], "entries were evicted and filled again"
    assert sum(record["stats"]["rows_cached"] for record in stats) > 0


def test_a_full_disk_reads_the_bucket_with_one_warning(store, table, tmp_path):
    """No file of the cache's disk may grow past 64 KiB (RLIMIT_FSIZE: writes fail with
    EFBIG), so every fill fails: the run warns once and delivers every row exactly."""
    cache, out = tmp_path / "cache", tmp_path / "out"
    output = finish(
        spawn_run(table, store, out, f"--cache-dir={cache}", "--epochs=2", f"--file-size-limit={64 << 10}")
    )
    ids, _ = logged(out)
    assert ids == {epoch: epoch_ids(build(table, store), epoch) for epoch in range(2)}
    assert output.count("CacheWarning") == 1, output
    assert "stopped filling" in output
    assert diskcache.usage(str(cache))["entries"] == 0
