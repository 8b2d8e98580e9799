"""What kind of table a URI names: the one place that reads a URI's scheme.

- ``"local"``: a path (no scheme), ``file://``, ``file+uring://`` or ``memory://``;
- ``"remote"``: ``db://``, a table of a LanceDB server ("remote" names a LanceDB
  server and nothing else);
- ``"bucket"``: any other scheme, object storage (``s3://``, ``gs://``, ``az://``,
  ...). An unknown scheme is a bucket too: Lance opens a URI with a scheme only
  through an object store, and refuses one it has no store for.

Schemes are read case-insensitively (``S3://`` is ``s3://``). Pure: no torch, no Lance.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["LOCAL_SCHEMES", "SERVER_SCHEMES", "Kind", "kind_of", "scheme_of"]

Kind = Literal["local", "bucket", "remote"]
"""Where a table lives: local disk, object storage (a bucket), or a LanceDB server."""

LOCAL_SCHEMES = ("", "file", "file+uring", "memory")
"""The schemes of a table on this machine (``""``: a path without a scheme)."""
SERVER_SCHEMES = ("db",)
"""The schemes of a table of a LanceDB server."""


def scheme_of(uri: str) -> str:
    """The scheme of ``uri``, in lower case: ``"s3"`` for ``S3://b/t``, ``""`` for a path."""
    scheme, separator, _ = uri.partition("://")
    return scheme.lower() if separator else ""


def kind_of(uri: str) -> Kind:
    """The kind of table ``uri`` names: ``"local"``, ``"remote"`` (a LanceDB server) or ``"bucket"``."""
    scheme = scheme_of(uri)
    if scheme in LOCAL_SCHEMES:
        return "local"
    return "remote" if scheme in SERVER_SCHEMES else "bucket"
