"""The kind of table a URI names, and every reader of a URI's scheme agreeing with it (pure)."""

from __future__ import annotations

import pytest

from streaming.core.profiles import choose_profile
from streaming.core.uris import kind_of, scheme_of
from streaming.tables.connect import is_db_uri

KINDS = [
    # (uri, scheme, kind, the profile storage_profile="auto" picks)
    ("/data/table.lance", "", "local", "local"),
    ("relative/table.lance", "", "local", "local"),
    ("C:\\data\\table.lance", "", "local", "local"),
    ("file:///data/table.lance", "file", "local", "local"),
    ("FILE:///data/table.lance", "file", "local", "local"),
    ("file+uring:///data/table.lance", "file+uring", "local", "local"),
    ("memory://table", "memory", "local", "local"),
    ("s3://bucket/table.lance", "s3", "bucket", "bucket"),
    ("S3://bucket/table.lance", "s3", "bucket", "bucket"),
    ("s3+ddb://bucket/table.lance?ddbTableName=t", "s3+ddb", "bucket", "bucket"),
    ("gs://bucket/table.lance", "gs", "bucket", "bucket"),
    ("az://container/table.lance", "az", "bucket", "bucket"),
    ("abfss://container@account.dfs.core.windows.net/t.lance", "abfss", "bucket", "bucket"),
    ("oss://bucket/table.lance", "oss", "bucket", "bucket"),
    ("hf://datasets/org/table.lance", "hf", "bucket", "bucket"),
    ("db://database/table", "db", "remote", "lancedb-server"),
    ("DB://database/namespace/table", "db", "remote", "lancedb-server"),
    # unknown schemes: object storage everywhere (Lance opens a scheme only through a store)
    ("nfs://host/table.lance", "nfs", "bucket", "bucket"),
    ("cos://bucket/table.lance", "cos", "bucket", "bucket"),
    ("http://host/table.lance", "http", "bucket", "bucket"),
]


@pytest.mark.parametrize(("uri", "scheme", "kind", "profile"), KINDS)
def test_one_function_tells_the_kind_and_every_reader_agrees(uri, scheme, kind, profile):
    assert scheme_of(uri) == scheme
    assert kind_of(uri) == kind
    assert choose_profile("auto", uri).name == profile
    assert is_db_uri(uri) == (kind == "remote")
