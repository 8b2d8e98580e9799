"""The making of samples: from one snapshot planned for an epoch to samples, batches and
packed blocks.

``view`` is one snapshot planned for one epoch and chooses how it streams; ``window`` is
one read of windows, put in yield order; ``reader`` reads them ahead on threads and
``planahead`` works out the next read's plan meanwhile; ``blobs`` reads blob columns
(``blobhandle``: the public ``BlobHandle``); ``rows`` turns Arrow into columns and
samples, ``transformed`` runs ``transform`` lazily; ``iterate``, ``assemble`` and
``packing`` yield samples cycle after cycle, columnar batches and packed blocks;
``collated`` makes a columnar batch into the batch ``default_collate`` would build, and
``spans`` packs wide strings and binaries into one byte array. Reads tables only through
``streaming.tables`` (the ``Table`` protocol and ``source``); imports ``core``,
``tables`` and ``streaming.errors``.
"""

__all__: list[str] = []
