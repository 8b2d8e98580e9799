"""The kinds of table and their caches: the wing that talks to Lance and to LanceDB servers.

Every table the package reads is a ``Table`` (``table``: the protocol), one class per
kind: ``lancetable`` (a Lance table on local disk or in a bucket), ``remote`` (a table
of a LanceDB server, with ``remoteconn``, ``remoteids`` and ``remoteretry``; ``connect``
opens one from a ``db://`` URI) and ``cached`` (a bucket's table read through the local
cache: ``snapshotcache`` holds a snapshot's cached files, ``diskcache`` keeps them on
``cachefs``'s locks and scans, ``cacheusage`` lists and clears them). ``opening`` is
the one module that tells the kinds apart: it opens tables and snapshots. ``source``
reads ranges of any ``Table`` (and offers ``opening``'s and ``tags``' names), ``tags``
keeps a version through cleanup, ``copies`` writes a local copy of a table's first rows.
Imports ``core`` and ``streaming.errors``; the making of samples (``streaming.samples``)
reads tables through this wing.
"""

__all__: list[str] = []
