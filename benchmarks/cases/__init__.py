"""What the suites measure: the contenders (ours, the peer, raw Lance), the
scenarios, the fresh-process probes, and the Markdown of the suites with several
parts (``report``, ``document``, ``bucket_report``).

Imports ``benchmarks.harness`` and ``streaming``'s public API, never a suite.
"""
