"""A local copy of the first rows of a table, stored as it is or with its binary columns
blob-encoded: how ``streaming.profile`` tries blob encoding without touching the
user's table (it reads both copies and compares them)."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from .table import Table

__all__ = ["write_copy"]

BLOB_METADATA = {"lance-encoding:blob": "true"}


def write_copy(table: Table, uri: str, *, rows: int, blob_columns: Sequence[str] = ()) -> str:
    """Write the first ``rows`` live rows of ``table`` (storage order) as a new Lance table
    at ``uri``, in four fragments, the ``blob_columns`` stored as ``large_binary`` with
    ``lance-encoding:blob`` and every other column as it is; the URI."""
    import lance

    data = table.to_table(columns=[field.name for field in table.schema], limit=rows)
    fields = [
        pa.field(field.name, pa.large_binary(), nullable=field.nullable, metadata=BLOB_METADATA)
        if field.name in blob_columns
        else field
        for field in data.schema
    ]
    data = data.cast(pa.schema(fields))
    lance.write_dataset(data, uri, max_rows_per_file=max(1, -(-data.num_rows // 4)))
    return uri
