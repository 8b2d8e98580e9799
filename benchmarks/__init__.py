"""Benchmarks: throughput, start-up, resume, memory and mixing, side by side.

One entry point, from the repository root: ``python -m benchmarks SUITE [OPTIONS]``
(``--list`` lists the suites, ``SUITE --help`` gives its options). Three layers,
each importing only the ones before it: ``harness`` (measuring, servers, tables,
Markdown sections), ``cases`` (the contenders and scenarios), ``suites`` (one
module per suite). Suites use ``streaming``'s public API. Results go to stdout
and, with ``--out``, to ``docs/benchmarks.md``. The peer (``lancedb.streaming``) is
only imported here to measure it; nothing of it is copied into ``streaming``.
"""
