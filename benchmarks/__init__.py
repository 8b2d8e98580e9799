"""Benchmarks: throughput, start-up, resume, memory and mixing, side by side.

Run ``python -m benchmarks.bench`` from the repository root; ``--quick`` runs tiny
sizes in well under a minute. Results go to stdout, ``docs/benchmarks.md`` and
``docs/benchmarks.png``. The peer (``lancedb.streaming``) is only imported here to
measure it; nothing of it is copied into ``streaming``.
"""
