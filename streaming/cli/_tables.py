"""The table a command names, opened and planned without importing torch.

A table is a Lance dataset URI (local path, ``s3://``, ``gs://``, ``az://``, with
``--storage-option``) or a table on a LanceDB server, ``db://DATABASE/[NAMESPACE/]TABLE``
(LanceDB Cloud and Enterprise). A server's API key comes from ``LANCEDB_API_KEY`` or
the file ``--api-key-file`` names; it is never taken from the command line itself,
never printed and never written anywhere.

``plan`` and ``inspect`` build the dataset's engine (``dataset/build.py``) rather than
a ``StreamingDataset``: the same checks, snapshot and plan, without the torch import
(about a second) that the ``IterableDataset`` base class costs.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from ..core import keywords
from ._common import KEY_VARIABLE, storage_options

__all__ = ["DATASET_DEFAULTS", "engine", "open_table"]

DATASET_DEFAULTS: dict[str, Any] = keywords.DEFAULTS
"""``StreamingDataset``'s keywords and defaults, as ``core/keywords.py`` declares them."""


def open_table(uri: str, args: argparse.Namespace) -> Any:
    """What ``StreamingDataset`` is given for ``uri``: the URI itself, or for ``db://`` the
    server's table (opened here with the key; nothing of the key is kept or shown).

    Raises:
        ValueError: a ``db://`` URI without a table name or API key, or no such table.
        PermissionError: the server refused the key.
    """
    from ..tables.connect import is_db_uri, open_db_table

    if not is_db_uri(uri):
        return uri
    return open_db_table(
        uri, api_key=_api_key(uri, args), region=args.region, host_override=args.host_override
    )


def _api_key(uri: str, args: argparse.Namespace) -> str:
    if args.api_key_file is not None:
        try:
            key = args.api_key_file.read_text().strip()
        except OSError as error:
            raise ValueError(
                f"--api-key-file {str(args.api_key_file)!r} cannot be read ({error.strerror or error}); "
                f"name a file that holds the API key, or set {KEY_VARIABLE} instead"
            ) from None
        if not key:
            raise ValueError(f"--api-key-file {str(args.api_key_file)!r} is empty; write the API key in it")
        return key
    key = os.environ.get(KEY_VARIABLE, "")
    if not key:
        raise ValueError(
            f"{uri!r} is a table on a LanceDB server, which needs its API key: set {KEY_VARIABLE} "
            "(or pass --api-key-file FILE), and --host-override URL for LanceDB Enterprise"
        )
    return key


def engine(table: Any, args: argparse.Namespace, **settings: Any) -> Any:
    """The engine of ``StreamingDataset(table, **settings)`` (a ``DatasetEngine``), built
    without importing torch; ``--storage-option`` gives its ``storage_options``."""
    from ..dataset.build import build_engine

    unknown = set(settings) - set(DATASET_DEFAULTS)
    if unknown:
        raise TypeError(f"not a StreamingDataset keyword: {sorted(unknown)}")
    options = storage_options(args.storage_option)
    return build_engine(table, {**DATASET_DEFAULTS, "storage_options": options, **settings})
