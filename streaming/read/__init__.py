"""From a Lance snapshot to samples: the only wing that imports Lance.

``source`` opens snapshots and reads ranges, ``jobplan`` shares one filter scan per
job, ``view`` is one snapshot planned for one epoch, ``reader`` reads windows ahead,
``rows``/``transformed`` turn Arrow into samples, and ``iterate``, ``assemble`` and
``packing`` yield cycles, columnar batches and packed blocks. Imports ``core``,
``state`` and ``streaming.errors``.
"""

__all__: list[str] = []
