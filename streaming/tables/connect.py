"""A table of a LanceDB server (LanceDB Cloud or Enterprise) opened from its URI.

``db://DATABASE/[NAMESPACE/]TABLE`` is the URI a state records for such a table
(``remote.remote_uri``). The key is the caller's: it reaches lancedb's client and
nothing else (no message, ``repr`` or file holds it). lancedb's own errors at
``open_table`` (an ``HttpError`` with the server's status, a bare ``ValueError``) come
back as one sentence that names the fix.
"""

from __future__ import annotations

import re
from typing import Any

from ..core.uris import kind_of

__all__ = ["is_db_uri", "open_db_table"]

_SCHEME = "db://"
_REFUSED = (" 401 ", " 403 ")


def is_db_uri(uri: str) -> bool:
    """True for ``db://...``, the URI of a table on a LanceDB server (``core/uris.py``)."""
    return kind_of(uri) == "remote"


def open_db_table(
    uri: str, *, api_key: str, region: str = "us-east-1", host_override: str | None = None
) -> Any:
    """The ``RemoteTable`` at ``uri`` (``db://DATABASE/[NAMESPACE/]TABLE``), at its latest version.

    Raises:
        ValueError: ``uri`` names no table, or the server has no such table.
        PermissionError: the server refused ``api_key``.
        ConnectionError: the server could not be reached or answered another error.
    """
    database, _, path = uri.partition("://")[2].partition("/")
    parts = [part for part in path.split("/") if part]
    if not is_db_uri(uri) or not database or not parts:
        raise ValueError(
            f"{uri!r} names no table of a LanceDB server: write db://DATABASE/TABLE "
            "(or db://DATABASE/NAMESPACE/TABLE)"
        )
    import lancedb

    connection = lancedb.connect(
        f"{_SCHEME}{database}", api_key=api_key, region=region, host_override=host_override
    )
    try:
        return connection.open_table(parts[-1], namespace_path=parts[:-1] or None)
    except ValueError as error:  # lancedb: "Table 'x' was not found"
        raise ValueError(
            f"the LanceDB server of {uri!r} has no such table ({error}); check the database, "
            "namespace and table name, and that the region or host (--region, --host-override) "
            "is its server's"
        ) from None
    except RuntimeError as error:  # lancedb's HttpError and other client errors
        text = " ".join(str(error).split())
        if any(code in text for code in _REFUSED):
            raise PermissionError(
                f"the LanceDB server refused the API key for {uri!r} (it answered {_status(text)}); "
                "use a key of that database (and its server's region or host)"
            ) from None
        raise ConnectionError(
            f"could not open {uri!r} on its LanceDB server: {text}; check its region or host "
            "(--region, --host-override) and that the server is reachable"
        ) from None


def _status(text: str) -> str:
    """``401 Unauthorized`` out of lancedb's error text."""
    found = re.search(r"\b(40[13] [A-Za-z ]+?):", text)
    return found.group(1) if found else "a refusal"
