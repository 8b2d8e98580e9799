"""The settings of the local cache for tables on object storage: a directory and a size limit.

Opt-in: ``cache_dir=`` (or ``LANCE_STREAMING_CACHE_DIR``) turns it on, ``cache_limit=``
(or ``LANCE_STREAMING_CACHE_LIMIT``) bounds it. A keyword wins over its variable.
Never order-defining: the cache changes where bytes come from, never which row sits
at a position, so nothing of it is recorded in a state.

Pure: no torch, no Lance, no file system access.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["CACHE_DIR_ENV", "CACHE_LIMIT_ENV", "CacheSettings", "cache_settings", "parse_size"]

CACHE_DIR_ENV = "LANCE_STREAMING_CACHE_DIR"
CACHE_LIMIT_ENV = "LANCE_STREAMING_CACHE_LIMIT"

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


@dataclass(frozen=True)
class CacheSettings:
    """Where the cache lives and how many bytes it may hold (``None``: the disk's free space)."""

    directory: str
    limit: int | None


def parse_size(value: object, *, name: str) -> int:
    """``value`` in bytes: a positive integer, or a string such as ``"20GiB"`` or ``"500 MB"``.

    Raises:
        ValueError: anything else, naming ``name``, the value and what to pass.
    """
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    if isinstance(value, str):
        match = _SIZE.match(value)
        if match and match.group(2).lower() in _UNITS:
            size = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
            if size > 0:
                return size
    raise ValueError(
        f"{name} must be a positive number of bytes or a size such as '20GiB', got {value!r}; "
        f"pass {name}=20 * 2**30 or {name}='20GiB' (units: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"
    )


def cache_settings(
    cache_dir: object, cache_limit: object, environ: Mapping[str, str] = os.environ
) -> CacheSettings | None:
    """The cache a dataset uses: the keywords, else the environment; ``None``: no cache.

    Raises:
        ValueError: ``cache_dir`` is not a path, or a limit is not a size; also a
            limit without a directory (a limit alone would silently do nothing).
    """
    directory = cache_dir if cache_dir is not None else environ.get(CACHE_DIR_ENV) or None
    limit: object = cache_limit
    limit_name = "cache_limit"
    if limit is None and environ.get(CACHE_LIMIT_ENV):
        limit, limit_name = environ[CACHE_LIMIT_ENV], CACHE_LIMIT_ENV
    if directory is None:
        if cache_limit is not None:
            raise ValueError(
                f"cache_limit={cache_limit!r} needs a cache directory; pass cache_dir= as well "
                f"(or set {CACHE_DIR_ENV}), or leave cache_limit out"
            )
        return None
    if not isinstance(directory, (str, os.PathLike)) or not os.fspath(directory):
        raise ValueError(
            f"cache_dir must be a directory path (str or os.PathLike) or None, got {directory!r}; "
            "pass a folder on a local disk such as cache_dir='/local_nvme/lance-cache'"
        )
    size = None if limit is None else parse_size(limit, name=limit_name)
    return CacheSettings(os.path.abspath(os.fspath(directory)), size)
