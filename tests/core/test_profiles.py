"""Storage profiles: which plan settings a table gets, and adopting a saved plan (pure)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streaming import StreamingDataset
from streaming.core.options import Options
from streaming.core.plan import window_rows_for
from streaming.core.profiles import (
    BLOCK_BYTES,
    BLOCK_ROWS_RANGE,
    BUFFER_BYTES,
    PROFILES,
    WIDE_BLOCK_BYTES,
    choose_profile,
    profile_for,
    sized,
)
from streaming.tables import source

from helpers import make_table


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("s3://bucket/table.lance", "bucket"),
        ("S3://bucket/table.lance", "bucket"),
        ("gs://bucket/table.lance", "bucket"),
        ("az://container/table.lance", "bucket"),
        ("abfss://container@account.dfs.core.windows.net/t.lance", "bucket"),
        ("/data/table.lance", "local"),
        ("relative/table.lance", "local"),
        ("file:///data/table.lance", "local"),
        ("memory://table", "local"),
    ],
)
def test_auto_picks_by_scheme(uri, expected):
    assert choose_profile("auto", uri).name == expected
    assert choose_profile(expected, "s3://b/t.lance" if expected == "local" else "/t.lance").name == expected


@pytest.mark.parametrize("bad", ["fast", "", None, 3, "Remote"])
def test_an_unknown_profile_names_field_value_and_choices(bad):
    with pytest.raises(
        ValueError, match=r"storage_profile must be 'auto', 'local', 'bucket' or 'lancedb-server', got"
    ) as error:
        choose_profile(bad, "s3://b/t.lance")
    assert repr(bad) in str(error.value)


def test_the_old_name_remote_gives_the_bucket_profile_with_a_deprecation_warning(tmp_path):
    with pytest.warns(DeprecationWarning, match=r"storage_profile='remote' is deprecated.*'bucket'"):
        assert choose_profile("remote", "/t.lance") is PROFILES["bucket"]
    uri = make_table(tmp_path / "t.lance", [300])
    with pytest.warns(DeprecationWarning, match=r"pass storage_profile='bucket'") as warned:
        old = StreamingDataset(uri, num_splits=2, storage_profile="remote")
    assert [warning.filename for warning in warned] == [__file__], "the warning names the caller's line"
    plans = {
        name: StreamingDataset(uri, num_splits=2, storage_profile=name).state_dict()["plan"]
        for name in ("bucket", "local")
    }
    assert old.state_dict()["plan"] == plans["bucket"] != plans["local"]


def test_explicit_settings_win_and_mark_the_plan_as_the_users():
    remote = PROFILES["bucket"]
    chosen, from_profile = profile_for("auto", "s3://b/t", block_rows=None, shuffle_buffer_size=None)
    assert (chosen.block_rows, chosen.shuffle_buffer_size, from_profile) == (
        remote.block_rows,
        remote.shuffle_buffer_size,
        True,
    )
    chosen, from_profile = profile_for("auto", "s3://b/t", block_rows=128, shuffle_buffer_size=None)
    assert (chosen.block_rows, chosen.shuffle_buffer_size, from_profile) == (
        128,
        remote.shuffle_buffer_size,
        False,
    )
    assert chosen.take_rows == remote.take_rows and chosen.min_io_threads == remote.min_io_threads
    chosen, from_profile = profile_for("local", "s3://b/t", block_rows=None, shuffle_buffer_size=4096)
    assert (chosen.block_rows, chosen.shuffle_buffer_size, from_profile) == (64, 4096, False)


def _options(**changes) -> Options:
    required = [f.name for f in dataclasses.fields(Options) if f.default is dataclasses.MISSING]
    base: dict[str, object] = dict.fromkeys(required)
    base.update(
        num_splits=4,
        world_size=1,
        rank=0,
        epoch=0,
        shuffle=True,
        shuffle_seed=0,
        block_rows=64,
        shuffle_buffer_size=32768,
        read_batch_size=64,
        io_queue_depth=4,
        on_transform_error="raise",
    )
    base.update(changes)
    return Options(**base)  # type: ignore[arg-type]


@given(
    splits=st.integers(1, 64),
    block=st.integers(1, 8192),
    blocks_per_window=st.integers(1, 512),
)
def test_adopting_a_saved_plan_gives_back_its_window(splits, block, blocks_per_window):
    window = block * blocks_per_window
    options = _options(num_splits=splits, profile_plan=True).adopting(block_rows=block, window_rows=window)
    assert options.block_rows == block
    assert (
        window_rows_for(shuffle_buffer_size=options.shuffle_buffer_size, num_splits=splits, block_rows=block)
        == window
    )


def test_explicit_plans_are_never_adopted():
    options = _options(profile_plan=False)
    assert options.adopting(block_rows=4096, window_rows=8192) is options


def test_the_remote_profile_reads_with_more_threads():
    assert _options(io_queue_depth=4).io_threads == 4
    remote = _options(io_queue_depth=4, profile=PROFILES["bucket"])
    assert remote.io_threads == PROFILES["bucket"].min_io_threads == 16
    assert dataclasses.replace(remote, io_queue_depth=32).io_threads == 32


def _power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


@given(row_bytes=st.floats(0.01, 1e9, allow_nan=False))
def test_the_remote_block_fits_its_bytes_and_the_buffer_holds_128_blocks_within_its_bytes(row_bytes):
    profile = sized(PROFILES["bucket"], row_bytes)
    block = profile.block_rows
    low, high = BLOCK_ROWS_RANGE
    assert low <= block <= high and _power_of_two(block), "a power of two within range"
    assert block * row_bytes <= BLOCK_BYTES or block == low
    assert block == high or block * 2 * row_bytes > BLOCK_BYTES, "the largest that fits"
    buffer = profile.shuffle_buffer_size
    assert buffer % block == 0 and block <= buffer <= 128 * block, "whole blocks"
    assert buffer == 128 * block or (buffer + block) * row_bytes > BUFFER_BYTES, "128 unless too many bytes"
    assert buffer * row_bytes <= BUFFER_BYTES or buffer == block
    assert profile.take_rows == PROFILES["bucket"].take_rows == 0, "one take per fragment and read"


@given(row_bytes=st.floats(0.01, 1e9, allow_nan=False))
def test_every_profile_bounds_its_block_buffer_and_takes_in_bytes(row_bytes):
    """Local disk keeps its numbers for narrow rows and shrinks them for wide ones: a
    block within WIDE_BLOCK_BYTES, a buffer within BUFFER_BYTES, takes within
    take_bytes (at least one row each)."""
    local, server = PROFILES["local"], PROFILES["lancedb-server"]
    for base in (local, server):
        profile = sized(base, row_bytes)
        assert profile.shuffle_buffer_size * row_bytes <= base.buffer_bytes or (
            profile.shuffle_buffer_size == profile.block_rows
        )
        assert 1 <= profile.take_rows <= base.take_rows
        assert profile.take_rows * row_bytes <= base.take_bytes or profile.take_rows == 1
    profile = sized(local, row_bytes)
    block = profile.block_rows
    assert _power_of_two(block) and block <= local.block_rows
    assert block == local.block_rows or block * 2 * row_bytes > WIDE_BLOCK_BYTES, "the largest that fits"
    assert block * row_bytes <= WIDE_BLOCK_BYTES or block == 1
    if row_bytes * local.shuffle_buffer_size <= local.buffer_bytes:
        assert (block, profile.shuffle_buffer_size) == (local.block_rows, local.shuffle_buffer_size)


@pytest.mark.parametrize(
    ("row_bytes", "block", "buffer", "take"),
    [(524, 64, 32_768, 8_192), (100_000, 8, 664, 83), (1 << 20, 1, 64, 8), (8 << 20, 1, 8, 1)],
)
def test_the_local_profile_for_narrow_rows_and_images(row_bytes, block, buffer, take):
    profile = sized(PROFILES["local"], row_bytes)
    assert (profile.block_rows, profile.shuffle_buffer_size, profile.take_rows) == (block, buffer, take)


def test_without_a_row_size_the_remote_profile_keeps_its_numbers():
    assert sized(PROFILES["bucket"], None) == PROFILES["bucket"]
    half = sized(PROFILES["bucket"], 524)
    assert half.block_rows == PROFILES["bucket"].block_rows, "its block is that of 0.5 KiB rows"
    assert half.shuffle_buffer_size == 125 * 2_048, "its buffer: as many whole blocks as 128 MiB holds"
    tiny = sized(PROFILES["bucket"], 64)
    assert (tiny.block_rows, tiny.shuffle_buffer_size) == (8_192, 128 * 8_192), "128 blocks while they fit"


def test_row_bytes_from_metadata(tmp_path):
    import lance
    import numpy as np
    import pyarrow as pa

    vectors = pa.FixedSizeListArray.from_arrays(pa.array(np.zeros(100 * 128, dtype=np.float32)), 128)
    table = pa.table({"id": np.arange(100), "label": np.zeros(100, np.int32), "vec": vectors})
    fixed = lance.write_dataset(table, str(tmp_path / "fixed.lance"))
    assert source.row_bytes(fixed, None) == 8 + 4 + 512
    assert source.row_bytes(fixed, ["id", "label"]) == 12
    rng = np.random.default_rng(0)
    texts = table.append_column("text", pa.array([rng.bytes(1000) for _ in range(100)]))
    mixed = lance.write_dataset(texts, str(tmp_path / "mixed.lance"))
    estimate = source.row_bytes(mixed, None)
    assert estimate is not None and 1000 + 524 <= estimate < 2 * (1000 + 524), "file bytes over rows"


def test_a_window_of_part_blocks_is_never_adopted():
    """Block and window are adopted together or not at all: no plan has a window that
    is not whole blocks, so such a pair (an edited state) leaves the options as they are."""
    options = _options(profile_plan=True)
    assert options.adopting(block_rows=50, window_rows=16384) is options


def test_an_edited_block_size_is_refused_naming_block_rows(tmp_path):
    """A state whose plan.block_rows was edited is refused naming that field (not the
    window the adopted block would have changed), with the value and the fix."""
    uri = make_table(tmp_path / "t.lance", [300])
    state = StreamingDataset(uri, num_splits=2).state_dict()
    state["plan"]["block_rows"] = 50
    data = StreamingDataset(uri, num_splits=2)
    before = data.state_dict()
    with pytest.raises(
        ValueError, match=r"'plan\.block_rows'=50 does not divide 'plan\.window_rows'=\d+"
    ) as error:
        data.load_state_dict(state)
    assert "restore the plan values state_dict() wrote" in str(error.value)
    assert data.state_dict() == before


def test_a_storage_profile_is_one_registry_entry(monkeypatch):
    from streaming.core.profiles import Profile

    nfs = Profile(
        "nfs",
        block_rows=256,
        shuffle_buffer_size=65_536,
        min_io_threads=8,
        schemes=("nfs",),
        block_bytes=1 << 20,
    )
    monkeypatch.setitem(PROFILES, "nfs", nfs)
    assert choose_profile("auto", "NFS://host/t.lance") is nfs
    assert choose_profile("nfs", "/t.lance") is nfs
    assert choose_profile("auto", "s3://b/t.lance").name == "bucket"
    assert choose_profile("auto", "/t.lance").name == "local"
    assert choose_profile("auto", "db://bench/train").name == "lancedb-server"
    choices = r"'auto', 'local', 'bucket', 'lancedb-server' or 'nfs'"
    with pytest.raises(ValueError, match=rf"storage_profile must be {choices}, got"):
        choose_profile("fast", "/t.lance")
    sized_nfs = sized(nfs, 1024)
    assert (sized_nfs.block_rows, sized_nfs.shuffle_buffer_size) == (1024, 128 * 1024), "1 MiB blocks"
    assert _options(io_queue_depth=4, profile=nfs).io_threads == 8
