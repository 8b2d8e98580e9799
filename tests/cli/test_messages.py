"""What a user meets when a table does not open: the package's sentence with the fix
first, Lance's words after it, never a Rust source path (from Python and from the
command line, which prints it as one line)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import lance
import pytest
from moto_s3 import s3_server

from streaming import StreamingDataset

from helpers import table_data

KEY_ID, SECRET = "AKIAMESSAGESTEST", "messages-secret-never-shown"


def plan(uri: str, *options: str) -> str:
    """The one error line of ``lance-streaming plan URI`` (exit 1 asserted)."""
    result = subprocess.run(
        [sys.executable, "-m", "streaming", "plan", uri, "--num-splits", "2", *options],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lance-streaming: error: "), result.stderr
    assert ".rs:" not in lines[0] and SECRET not in lines[0], lines[0]
    return lines[0].removeprefix("lance-streaming: error: ")


def refused(uri: str, **kwargs) -> str:
    with pytest.raises(ValueError) as error:
        StreamingDataset(uri, **kwargs)
    assert ".rs:" not in str(error.value), error.value
    return str(error.value)


def test_a_missing_table_names_the_uri_and_the_fix(tmp_path):
    missing = str(tmp_path / "missing.lance")
    assert refused(missing).startswith(f"no Lance table at {missing!r}: check the URI (Lance said: ")
    assert plan(missing).startswith(f"no Lance table at {missing!r}: check the URI")


def test_a_uri_lance_cannot_read_says_which_it_can():
    assert refused("ftp://host/t.lance").startswith(
        "cannot open table 'ftp://host/t.lance': Lance reads no 'ftp' URIs; pass a local path or an s3://"
    )
    assert refused("db://bench/train") == (
        "'db://bench/train' is a table on a LanceDB server, not a Lance dataset URI: pass the table, "
        "lancedb.connect('db://DATABASE', api_key=...).open_table(NAME)"
    )


@pytest.fixture(scope="module")
def s3() -> Iterator[tuple[str, dict[str, str]]]:
    with s3_server("messages", key_id=KEY_ID, secret=SECRET) as options:
        uri = "s3://messages/table.lance"
        lance.write_dataset(table_data(0, 20), uri, storage_options=options)
        yield uri, options


def test_s3_without_storage_options_or_credentials_says_to_pass_them(s3):
    """moto accepts any key, so the refusals here are the ones Lance makes itself: no
    options at all (no endpoint, region or credentials), or an endpoint without credentials."""
    uri, options = s3
    assert plan(uri).startswith(f"cannot open table {uri!r} on object storage: pass storage_options= (")
    no_credentials = {name: options[name] for name in ("aws_endpoint", "allow_http", "aws_region")}
    message = refused(uri, storage_options=no_credentials)
    assert message.startswith(
        f"cannot open table {uri!r} on object storage: check storage_options= (credentials"
    )
    full = [f"--storage-option={name}={value}" for name, value in options.items()]
    assert plan("s3://messages/missing.lance", *full).startswith(
        "no Lance table at 's3://messages/missing.lance': check the URI"
    )
