"""The kind of table a URI names, and every reader of a URI's scheme agreeing with it (pure)."""

from __future__ import annotations

import pytest

from streaming.core.profiles import choose_profile
from streaming.core.uris import kind_of, scheme_of
from streaming.read.connect import is_db_uri

KINDS = [
    # (uri, scheme, kind, the profile storage_profile="auto" picks)
    ("/data/table.lance", "", "local", "local"),
    ("relative/table.lance", "", "local", "local"),
    ("C:\\data\\table.lance", "", "local", "local"),
    ("file:///data/table.lance", "file", "local", "local"),
    ("FILE:///data/table.lance", "file", "local", "local"),
    ("file+uring:///data/table.lance", "file+uring", "local", "local"),
    ("memory://table", "memory", "local", "local"),
    ("s3://bucket/table.lance", "s3", "bucket", "remote"),
    ("S3://bucket/table.lance", "s3", "bucket", "remote"),
    ("s3+ddb://bucket/table.lance?ddbTableName=t", "s3+ddb", "bucket", "remote"),
    ("gs://bucket/table.lance", "gs", "bucket", "remote"),
    ("az://container/table.lance", "az", "bucket", "remote"),
    ("abfss://container@account.dfs.core.windows.net/t.lance", "abfss", "bucket", "remote"),
    ("oss://bucket/table.lance", "oss", "bucket", "remote"),
    ("hf://datasets/org/table.lance", "hf", "bucket", "remote"),
    ("db://database/table", "db", "remote", "lancedb-server"),
    ("DB://database/namespace/table", "db", "remote", "lancedb-server"),
    # unknown schemes: object storage everywhere (Lance opens a scheme only through a store)
    ("nfs://host/table.lance", "nfs", "bucket", "remote"),
    ("cos://bucket/table.lance", "cos", "bucket", "remote"),
    ("http://host/table.lance", "http", "bucket", "remote"),
]


@pytest.mark.parametrize(("uri", "scheme", "kind", "profile"), KINDS)
def test_one_function_tells_the_kind_and_every_reader_agrees(uri, scheme, kind, profile):
    assert scheme_of(uri) == scheme
    assert kind_of(uri) == kind
    assert choose_profile("auto", uri).name == profile
    assert is_db_uri(uri) == (kind == "remote")
