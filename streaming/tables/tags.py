"""Lance tags that keep a snapshot's version through ``cleanup_old_versions``.

A dataset built with ``tag_snapshot=True`` tags the version it reads
(``protect``) and removes the tag when asked (``release``), through the ``tags``
of the snapshot's ``Table``, whatever its kind.
"""

from __future__ import annotations

from .opening import Snapshot, open_snapshot

__all__ = ["protect", "release", "tag_name"]


def tag_name(version: int) -> str:
    """The Lance tag that protects ``version`` from cleanup."""
    return f"lance-streaming-v{version}"


def protect(snapshot: Snapshot) -> str:
    """Tag the snapshot's version so ``cleanup_old_versions`` keeps it; idempotent."""
    dataset = open_snapshot(snapshot)
    name = tag_name(snapshot.version)
    if name not in dataset.tags.list():
        dataset.tags.create(name, snapshot.version)
    return name


def release(snapshot: Snapshot) -> bool:
    """Delete the snapshot's protecting tag; False when there was none."""
    dataset = open_snapshot(snapshot)
    name = tag_name(snapshot.version)
    if name not in dataset.tags.list():
        return False
    dataset.tags.delete(name)
    return True
