"""One pass of one contender in a fresh process: ``python -m benchmarks.cases.bucket_probe KEY WHERE CAP``.

``WHERE`` is the JSON of a ``Where``; ``CAP`` the seconds after which the pass
stops early. Imports come first (a trainer has them before its first batch), then
the peak-memory mark is reset and the clock starts: construction, the first read
and every batch of the pass are timed. The last stdout line is the result as JSON.
"""

from __future__ import annotations

import json
import resource
import sys
import time
import warnings

from benchmarks.cases.bucket_contenders import Where, batch_rows, factory
from benchmarks.cases.contenders import preload
from benchmarks.harness.measure import proc_status_kib, reset_peak


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def probe(key: str, where: Where, cap_s: float) -> dict[str, object]:
    """Rows, seconds, first-batch seconds, CPU seconds and peak RSS of one pass."""
    preload()
    warnings.simplefilter("ignore")
    base_kib = reset_peak()
    cpu = _cpu_s()
    start = time.perf_counter()
    rows, first_rows, first_s, stopped = 0, 0, float("nan"), "end"
    for batch in factory(key)(where):
        rows += batch_rows(batch)
        if not first_rows:
            first_rows, first_s = rows, time.perf_counter() - start
        if time.perf_counter() - start > cap_s:
            stopped = "cap"
            break
    seconds = time.perf_counter() - start
    return {
        "key": key,
        "rows": rows,
        "seconds": seconds,
        "first_s": first_s,
        "first_rows": first_rows,
        "cpu_s": _cpu_s() - cpu,
        "peak_rss_mib": proc_status_kib("VmHWM") / 1024,
        "base_rss_mib": base_kib / 1024,
        "stopped_by": stopped,
    }


def main() -> None:
    """Run the probe named on the command line and print its result."""
    key, where, cap = sys.argv[1], Where(**json.loads(sys.argv[2])), float(sys.argv[3])
    print(json.dumps(probe(key, where, cap)), flush=True)


if __name__ == "__main__":
    main()
