"""One loader's first batch and epoch, in a fresh interpreter.

    python -m benchmarks.cases.start_probe SPEC


``SPEC`` is JSON: ``table`` (a ``TableRef``'s fields) or ``server`` (``uri``, ``host``,
``key``, ``name``: a LanceDB server), ``workers``, ``head_start``, ``batch``, ``rows``, and
optionally ``num_splits`` (left out: the default, chosen for the table). The probe imports
what a trainer has imported before it builds its loader (``from streaming import
...``, torch, lancedb), opens the table, then times building the dataset and the
loader to the first batch, and the rest of one epoch (every planned id checked once:
``len(dataset)`` of them, at most ``rows``). It prints one JSON line: ``first`` (s),
``rate`` (rows/s after the first batch), ``rows`` (delivered), ``num_splits``, and the
trainer's peak RSS in MiB (``trainer_mb``: its own process).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any


def _open(spec: dict[str, Any]) -> Any:
    import lancedb

    if "server" in spec:
        server = spec["server"]
        connection = lancedb.connect(server["uri"], api_key=server["key"], host_override=server["host"])
        return connection.open_table(server["name"])
    table = spec["table"]
    return lancedb.connect(table["directory"]).open_table(table["name"])


def measure(spec: dict[str, Any]) -> dict[str, float]:
    """Build, draw the first batch, drain the epoch; check every id once."""
    from streaming import StreamingDataLoader, StreamingDataset

    table = _open(spec)
    start = time.perf_counter()
    dataset = StreamingDataset(table, shuffle_seed=1, num_splits=spec.get("num_splits"))
    planned = len(dataset)
    loader = StreamingDataLoader(
        dataset, batch_size=spec["batch"], num_workers=spec["workers"], head_start=spec["head_start"]
    )
    batches = iter(loader)
    ids = [batch_ids := next(batches)["id"].numpy()]
    first = time.perf_counter() - start
    steady = time.perf_counter()
    ids += [batch["id"].numpy() for batch in batches]
    rate = (sum(len(part) for part in ids) - len(batch_ids)) / max(time.perf_counter() - steady, 1e-9)
    import numpy as np

    seen = np.concatenate(ids)
    if len(np.unique(seen)) != len(seen) or len(seen) != planned or planned > spec["rows"]:
        raise AssertionError(f"{len(seen)} ids, {len(np.unique(seen))} distinct, {planned} planned")
    import resource

    return {
        "first": first,
        "rate": rate,
        "rows": float(len(seen)),
        "num_splits": float(dataset.num_splits),
        "trainer_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


if __name__ == "__main__":
    import lancedb  # noqa: F401 - a trainer has imported these before it builds its loader
    import torch  # noqa: F401

    import streaming  # noqa: F401

    print(json.dumps(measure(json.loads(sys.argv[1]))))
