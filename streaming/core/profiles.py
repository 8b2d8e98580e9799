"""Storage profiles: plan settings chosen for where the table lives.

A local disk answers a small read in microseconds, so small blocks (good mixing
from a small buffer) cost little. Object storage answers each request after tens
of milliseconds and charges for it, so a remote table is read in larger blocks,
and a larger shuffle buffer keeps the mixing. ``storage_profile="auto"`` picks by
the table's URI; explicit ``block_rows`` / ``shuffle_buffer_size`` always win.

Pure: no torch, no Lance.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

__all__ = [
    "PROFILES",
    "REMOTE_SCHEMES",
    "Profile",
    "choose_profile",
    "profile_for",
    "sized",
]


@dataclass(frozen=True)
class Profile:
    """One profile: plan settings (recorded in every state) and I/O settings (never)."""

    name: str
    block_rows: int
    shuffle_buffer_size: int
    min_io_threads: int = 1
    """Read threads at least (``io_queue_depth`` threads read windows, as many take)."""
    take_rows: int = 8_192
    """Offsets per Lance take: a fragment's part of a window is cut into takes of this
    many, run in parallel, so reads of few, big local fragments still use every read
    thread (0: one take per fragment, which Lance splits into requests itself;
    concurrent takes of one remote file would each fetch its metadata)."""


PROFILES = {
    "local": Profile("local", block_rows=64, shuffle_buffer_size=32_768),
    "remote": Profile(
        "remote", block_rows=2_048, shuffle_buffer_size=262_144, min_io_threads=16, take_rows=0
    ),
}

BLOCK_BYTES = 2 << 20
"""The remote profile's block is the largest power of two of rows up to this many bytes."""
BLOCK_ROWS_RANGE = (16, 8_192)
"""... within these bounds (narrow rows do not make blocks of millions of rows)."""
BLOCKS_PER_BUFFER = 128
"""The remote profile's shuffle buffer holds this many blocks: the mixing depends on
how many blocks a window draws from, the memory on their bytes."""

REMOTE_SCHEMES = ("s3", "s3+ddb", "gs", "gcs", "az", "abfs", "abfss", "azure", "oss", "hf")
"""URI schemes of object stores: ``auto`` picks the remote profile for them."""


def choose_profile(storage_profile: object, uri: str) -> Profile:
    """The profile ``storage_profile`` names; ``"auto"`` picks by the scheme of ``uri``.

    Raises:
        ValueError: ``storage_profile`` is not ``"auto"``, ``"local"`` or ``"remote"``.
    """
    if storage_profile == "auto":
        scheme = uri.split("://", 1)[0].lower() if "://" in uri else "file"
        return PROFILES["remote" if scheme in REMOTE_SCHEMES else "local"]
    if isinstance(storage_profile, str) and storage_profile in PROFILES:
        return PROFILES[storage_profile]
    raise ValueError(
        f"storage_profile must be 'auto', 'local' or 'remote', got {storage_profile!r}; 'auto' "
        "picks 'remote' for object-store URIs (s3://, gs://, az://) and 'local' otherwise"
    )


def profile_for(
    storage_profile: object, uri: str, *, block_rows: int | None, shuffle_buffer_size: int | None
) -> tuple[Profile, bool]:
    """The settings to use, and whether they are all the profile's.

    Explicit ``block_rows`` / ``shuffle_buffer_size`` win over the profile's. The
    flag is True when neither was given, so the plan is the profile's and a
    checkpoint of another profile's plan may be adopted (``Options.adopting``).
    """
    profile = choose_profile(storage_profile, uri)
    chosen = dataclasses.replace(
        profile,
        block_rows=profile.block_rows if block_rows is None else block_rows,
        shuffle_buffer_size=profile.shuffle_buffer_size
        if shuffle_buffer_size is None
        else shuffle_buffer_size,
    )
    return chosen, block_rows is None and shuffle_buffer_size is None


def sized(profile: Profile, row_bytes: float | None) -> Profile:
    """``profile`` with its block and buffer sized for rows of ``row_bytes`` bytes.

    Only the remote profile depends on the row size: its block is the largest
    power of two of rows within ``BLOCK_BYTES`` (clamped to ``BLOCK_ROWS_RANGE``)
    and its buffer ``BLOCKS_PER_BUFFER`` blocks, so a read request carries one to
    two megabytes and a window draws from 128 blocks whatever the rows hold.
    Without a size (``None``) the profile is returned as it is (its numbers suit
    rows of about 0.5 to 1 KiB).
    """
    if profile.name != "remote" or row_bytes is None or row_bytes <= 0:
        return profile
    low, high = BLOCK_ROWS_RANGE
    fit = max(1, int(BLOCK_BYTES // row_bytes))
    block = min(high, max(low, 1 << (fit.bit_length() - 1)))
    return dataclasses.replace(profile, block_rows=block, shuffle_buffer_size=block * BLOCKS_PER_BUFFER)
