"""From a Lance snapshot to samples: the only wing that imports Lance (``source``, ``cached``).

``source`` opens snapshots and reads ranges, ``cached`` reads a remote snapshot
through the local cache whose files ``diskcache`` keeps, ``jobplan`` shares one
filter scan per job, ``view`` is one snapshot planned for one epoch, ``reader`` reads
windows ahead, ``rows``/``transformed`` turn Arrow into samples, and ``iterate``,
``assemble`` and ``packing`` yield cycles, columnar batches and packed blocks.
Imports ``core`` and ``streaming.errors``.
"""

__all__: list[str] = []
