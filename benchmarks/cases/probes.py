"""Measurements that need a fresh process: start-up and peak memory.

The parent runs ``python -m benchmarks.cases.probes CASE JSON`` once per case; the child
imports everything first, takes its RSS as the baseline, measures, and prints one
JSON line. RSS comes from ``/proc/self/status`` (``VmRSS`` now, ``VmHWM`` peak).
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from benchmarks.cases.contenders import BATCH_SIZE, NUM_SPLITS, import_ours
from benchmarks.harness.measure import proc_status_kib, reset_peak
from benchmarks.harness.process import run_json
from benchmarks.harness.tables import TableRef


def _mib(kib: int) -> float:
    return kib / 1024


def _import_libraries() -> None:
    """Import torch, pyarrow, Lance and our loader before the baseline, as a trainer would have."""
    for name in ("torch", "pyarrow", "lance"):
        importlib.import_module(name)
    import_ours()


def startup(table: TableRef, *, peer: bool) -> dict[str, Any]:
    """Time and RSS growth from building the dataset to its first sample."""
    _import_libraries()
    cls: Callable[..., Any]
    if peer:
        from lancedb.streaming import StreamingDataset as peer_dataset

        cls, handle = peer_dataset, table.open()  # the peer takes a LanceDB table
    else:
        from streaming import StreamingDataset

        cls, handle = StreamingDataset, table.uri  # ours opens the URI inside the timed region
    before = reset_peak()
    start = time.perf_counter()
    iterator = iter(cls(handle, num_splits=NUM_SPLITS, shuffle=True))
    next(iterator)
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "rss_growth_mib": _mib(proc_status_kib("VmRSS") - before),
        "peak_growth_mib": _mib(proc_status_kib("VmHWM") - before),
    }


def memory(table: TableRef) -> dict[str, Any]:
    """Peak RSS while streaming the whole table through our loader (k=0, batch 256)."""
    _import_libraries()
    from streaming import StreamingDataLoader, StreamingDataset

    before = reset_peak()
    start = time.perf_counter()
    loader = StreamingDataLoader(StreamingDataset(table.uri, num_splits=NUM_SPLITS), batch_size=BATCH_SIZE)
    rows = sum(len(batch["id"]) for batch in loader)
    return {
        "rows": rows,
        "seconds": time.perf_counter() - start,
        "baseline_mib": _mib(before),
        "peak_mib": _mib(proc_status_kib("VmHWM")),
        "peak_growth_mib": _mib(proc_status_kib("VmHWM") - before),
    }


def run_probe(case: str, table: TableRef, *, timeout: float) -> dict[str, Any]:
    """Run one probe in a fresh interpreter; a failure comes back as ``{"error": ...}``."""
    return run_json("benchmarks.cases.probes", case, json.dumps(table.to_json()), timeout=timeout)


_CASES = {
    "startup-ours": lambda table: startup(table, peer=False),
    "startup-peer": lambda table: startup(table, peer=True),
    "memory": memory,
}


def main(argv: list[str]) -> None:
    """Entry point of the child: ``CASE JSON`` in, one JSON line out."""
    case, spec = argv
    print(json.dumps(_CASES[case](TableRef(**json.loads(spec)))))


if __name__ == "__main__":
    main(sys.argv[1:])
