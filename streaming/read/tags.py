"""Lance tags that keep a snapshot's version through ``cleanup_old_versions``.

A dataset built with ``tag_snapshot=True`` tags the version it reads
(``protect``) and removes the tag when asked (``release``); ``latest_version``
answers what ``follow_latest`` moves to.
"""

from __future__ import annotations

from .handles import Snapshot, mark_used, open_dataset, open_snapshot

__all__ = ["latest_version", "protect", "release", "tag_name"]


def tag_name(version: int) -> str:
    """The Lance tag that protects ``version`` from cleanup."""
    return f"lance-streaming-v{version}"


def latest_version(snapshot: Snapshot) -> int:
    """The newest version of the snapshot's table now."""
    if snapshot.remote is not None:
        return snapshot.remote.latest()
    if snapshot.connection_factory is not None and snapshot.table_name is not None:
        mark_used()
        return int(snapshot.connection_factory(snapshot.table_name).to_lance().version)
    return int(open_dataset(snapshot.uri, None, snapshot.storage_options).version)


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
