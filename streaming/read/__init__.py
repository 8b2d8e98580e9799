"""From a Lance snapshot to samples: the only wing that imports Lance (``handles``, ``cached``).

``handles`` opens snapshots, ``source`` reads ranges (and offers ``handles``' and
``tags``' names), ``tags`` keeps a version through cleanup, ``cached`` reads a remote
snapshot through the local cache whose files ``diskcache`` keeps (on ``cachefs``'s
locks and scans; ``cacheusage`` lists and clears it), ``view`` is one snapshot
planned for one epoch, ``reader`` reads windows ahead, ``rows``/``transformed`` turn
Arrow into samples, and ``iterate``, ``assemble`` and ``packing`` yield cycles,
columnar batches and packed blocks. Imports ``core`` and ``streaming.errors``.
"""

__all__: list[str] = []
