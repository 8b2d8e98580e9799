"""What the suites measure: the contenders (ours, the peer, raw Lance), the
scenarios, the fresh-process probes (``probes``, ``blob_probe``, ``width_probe``, ...),
the training step of the ``gpu`` suite (``gpu_step``), and the Markdown of the suites
with several parts (``report``, ``targets``, ``document``, ``bucket_report``).

Imports ``benchmarks.harness`` and ``streaming``'s public API, never a suite.
"""
