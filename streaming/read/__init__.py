"""From a snapshot to samples: the only wing that imports Lance and lancedb.

Every table it reads is a ``Table`` (``table``: the protocol), one class per kind:
``lancetable`` (a Lance table on local disk or in a bucket), ``remote`` (a table of
a LanceDB server, with ``remoteids``, ``remoteretry`` and ``connect``) and ``cached``
(a bucket's table read through the local cache whose files ``diskcache`` keeps, on
``cachefs``'s locks and scans; ``cacheusage`` lists and clears it). ``opening`` is
the one module that tells the kinds apart: it opens tables and snapshots. ``source``
reads ranges of any ``Table`` (and offers ``opening``'s and ``tags``' names),
``tags`` keeps a version through cleanup, ``blobs`` reads blob columns, ``view`` is
one snapshot planned for one epoch, ``reader`` reads windows ahead, ``planahead``
plans the next read, ``rows``/``transformed`` turn Arrow into samples, and
``iterate``, ``assemble`` and ``packing`` yield cycles, columnar batches and packed
blocks. Imports ``core`` and ``streaming.errors``.
"""

__all__: list[str] = []
