"""Storage profiles: plan settings chosen for where the table lives.

A local disk answers a small read in microseconds, so small blocks (good mixing
from a small buffer) cost little. Object storage answers each request after tens
of milliseconds and charges for it, so a table there is read in larger blocks,
and a larger shuffle buffer keeps the mixing. A table on a LanceDB server
(``db://``) is read the same way, in takes of up to ``take_rows`` rows each (one
request). ``storage_profile="auto"`` picks by
the table's URI; explicit ``block_rows`` / ``shuffle_buffer_size`` always win.

Pure: no torch, no Lance.
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass

from .uris import Kind, kind_of, scheme_of

__all__ = [
    "AUTO",
    "DEFAULT_PROFILE",
    "PROFILES",
    "RENAMED",
    "Profile",
    "choose_profile",
    "profile_for",
    "sized",
]


BLOCK_BYTES = 2 << 20
"""The bucket and LanceDB server profiles' block is the largest power of two of rows up to this many bytes."""
WIDE_BLOCK_BYTES = 1 << 20
"""Any other profile's block holds at most this many bytes of rows (one row at least)."""
BUFFER_BYTES = 128 << 20
"""A profile's shuffle buffer holds at most this many bytes of rows (one block at least),
unless it says otherwise (``Profile.buffer_bytes``: local disks 64 MiB). Rows of up to
0.5 KiB keep all 128 blocks; wider rows get fewer, so that a rank's two windows of 100 KB
images take about as much memory on object storage as on a local disk (1.3x measured)."""
BLOCK_ROWS_RANGE = (1, 8_192)
"""Blocks sized by ``block_bytes`` stay within these bounds (narrow rows do not make
blocks of millions of rows; a row wider than a block is a block of one)."""
BLOCKS_PER_BUFFER = 128
"""A profile sized for its rows has a shuffle buffer of this many blocks: the mixing
depends on how many blocks a window draws from, the memory on their bytes."""


@dataclass(frozen=True)
class Profile:
    """One profile: plan settings (recorded in every state) and I/O settings (never).

    Adding a profile is one entry in ``PROFILES``: what ``auto`` picks it for, how
    it sizes its plan and how it reads all come from its fields, never its name.
    """

    name: str
    block_rows: int
    shuffle_buffer_size: int
    min_io_threads: int = 1
    """Read threads at least (``io_queue_depth`` threads read windows, as many take)."""
    take_rows: int = 8_192
    """Offsets per Lance take: a fragment's part of a window is cut into takes of about
    equal size, at most this many offsets each, run in parallel, so reads of few, big
    fragments still use every read thread (0: one take per fragment, which Lance
    splits into requests itself)."""
    kind: Kind | None = None
    """The kind of URI (``core/uris.py`` ``kind_of``) ``storage_profile="auto"`` picks this
    profile for (the first such profile), unless a profile's ``schemes`` claim the URI's scheme."""
    schemes: tuple[str, ...] = ()
    """URI schemes ``storage_profile="auto"`` picks this profile for, before any ``kind``."""
    block_bytes: int | None = None
    """When set, ``sized`` gives a table's rows blocks of up to this many bytes (and a
    buffer of ``BLOCKS_PER_BUFFER`` blocks), larger or smaller than ``block_rows``;
    ``None``: the numbers above, made smaller for wide rows (``WIDE_BLOCK_BYTES``)."""
    buffer_bytes: int = BUFFER_BYTES
    """The shuffle buffer holds at most this many bytes of rows (whole blocks, one at least)."""
    take_bytes: int | None = None
    """When set, a take carries at most about this many bytes of rows (fewer offsets
    than ``take_rows`` for wide rows: Lance's large takes of wide rows cost several
    times more per row than takes of a few megabytes)."""


PROFILES = {
    profile.name: profile
    for profile in (
        Profile(
            "local",
            kind="local",
            block_rows=64,
            shuffle_buffer_size=32_768,
            buffer_bytes=64 << 20,
            take_bytes=8 << 20,
        ),
        Profile(
            "bucket",
            block_rows=2_048,
            shuffle_buffer_size=262_144,
            min_io_threads=16,
            take_rows=0,
            kind="bucket",
            block_bytes=BLOCK_BYTES,
        ),
        Profile(
            "lancedb-server",
            block_rows=2_048,
            shuffle_buffer_size=262_144,
            min_io_threads=16,
            take_rows=8_192,
            kind="remote",
            block_bytes=BLOCK_BYTES,
            take_bytes=16 << 20,
        ),
    )
}
"""Every storage profile, by name."""
DEFAULT_PROFILE = PROFILES["local"]
"""The profile ``auto`` picks for a URI no profile claims (none does: every kind has one)."""
AUTO = "auto"
"""The ``storage_profile`` that picks a profile by the table URI's scheme."""
RENAMED = {"remote": "bucket"}
"""Old profile names, still accepted with a ``DeprecationWarning`` that names the new one
(``"remote"`` was object storage's profile; "remote" names a LanceDB server now)."""


def choose_profile(storage_profile: object, uri: str, *, stacklevel: int = 1) -> Profile:
    """The profile ``storage_profile`` names; ``"auto"`` picks by the scheme of ``uri``: the
    profile whose ``schemes`` name it, else the profile of its kind (``core/uris.py``).

    An old name (``RENAMED``) gives the profile of its new name and warns
    ``DeprecationWarning`` at the frame ``stacklevel`` above the caller (1: the caller).

    Raises:
        ValueError: ``storage_profile`` is not ``"auto"`` or a name in ``PROFILES``.
    """
    if isinstance(storage_profile, str) and storage_profile in RENAMED:
        new = RENAMED[storage_profile]
        warnings.warn(
            f"storage_profile={storage_profile!r} is deprecated: the object storage profile is named "
            f"{new!r} now (a 'remote' table is one of a LanceDB server); pass storage_profile={new!r}",
            DeprecationWarning,
            stacklevel=stacklevel + 1,
        )
        storage_profile = new
    if storage_profile == AUTO:
        scheme, kind = scheme_of(uri), kind_of(uri)
        claimed = next((p for p in PROFILES.values() if scheme in p.schemes), None)
        return claimed or next((p for p in PROFILES.values() if p.kind == kind), DEFAULT_PROFILE)
    if isinstance(storage_profile, str) and storage_profile in PROFILES:
        return PROFILES[storage_profile]
    *names, last = [repr(name) for name in (AUTO, *PROFILES)]
    raise ValueError(
        f"storage_profile must be {', '.join(names)} or {last}, got {storage_profile!r}; 'auto' "
        "picks 'bucket' for object-store URIs (s3://, gs://, az://), 'lancedb-server' for a table "
        "on a LanceDB server (db://) and 'local' otherwise"
    )


def profile_for(
    storage_profile: object,
    uri: str,
    *,
    block_rows: int | None,
    shuffle_buffer_size: int | None,
    stacklevel: int = 1,
) -> tuple[Profile, bool]:
    """The settings to use, and whether they are all the profile's.

    Explicit ``block_rows`` / ``shuffle_buffer_size`` win over the profile's. The
    flag is True when neither was given, so the plan is the profile's and a
    checkpoint of another profile's plan may be adopted (``Options.adopting``).
    An old profile name warns at the frame ``stacklevel`` above the caller (``choose_profile``).
    """
    profile = choose_profile(storage_profile, uri, stacklevel=stacklevel + 1)
    chosen = dataclasses.replace(
        profile,
        block_rows=profile.block_rows if block_rows is None else block_rows,
        shuffle_buffer_size=profile.shuffle_buffer_size
        if shuffle_buffer_size is None
        else shuffle_buffer_size,
    )
    return chosen, block_rows is None and shuffle_buffer_size is None


def sized(profile: Profile, row_bytes: float | None) -> Profile:
    """``profile`` with its block, buffer and takes sized for rows of ``row_bytes`` bytes.

    - A profile with ``block_bytes`` (object storage, LanceDB servers): the block is
      the largest power of two of rows within ``block_bytes`` (within
      ``BLOCK_ROWS_RANGE``) and the buffer ``BLOCKS_PER_BUFFER`` blocks, so a read
      request carries one to two megabytes and a window draws from 128 blocks
      whatever the rows hold.
    - Any other (local disk): its numbers (64-row blocks, a 32,768-row buffer),
      made smaller for rows wide enough that a block would pass ``WIDE_BLOCK_BYTES``.
    - Either way the buffer holds at most ``buffer_bytes`` (whole blocks, one at
      least; 64 MiB on a local disk, 128 MiB in a bucket or on a server), so the rows read ahead stay
      within two buffers whether a row holds a vector, an image or a video; and
      with ``take_bytes`` a take carries at most that many bytes of rows.

    Without a size (``None``) the profile is returned as it is.
    """
    if row_bytes is None or row_bytes <= 0:
        return profile
    low, high = BLOCK_ROWS_RANGE
    if profile.block_bytes is not None:
        block = min(high, max(low, _power_of_two_within(profile.block_bytes / row_bytes)))
        buffer = block * BLOCKS_PER_BUFFER
    else:
        block = min(profile.block_rows, _power_of_two_within(WIDE_BLOCK_BYTES / row_bytes))
        buffer = profile.shuffle_buffer_size
    buffer = max(block, min(buffer, int(profile.buffer_bytes // row_bytes) // block * block))
    take = profile.take_rows
    if profile.take_bytes is not None:
        fit = max(1, int(profile.take_bytes // row_bytes))
        take = fit if take == 0 else min(take, fit)
    return dataclasses.replace(profile, block_rows=block, shuffle_buffer_size=buffer, take_rows=take)


def _power_of_two_within(rows: float) -> int:
    """The largest power of two not above ``rows`` (1 at least)."""
    fit = max(1, int(rows))
    return 1 << (fit.bit_length() - 1)
