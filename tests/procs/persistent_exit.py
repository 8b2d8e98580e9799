"""A program that ends with a loader's persistent workers running.

Usage: ``python persistent_exit.py URI CONTEXT WORKERS WHERE`` (``CONTEXT`` ``default``
is the loader's forkserver; ``WHERE`` is ``after an epoch`` or ``mid-epoch``).

It iterates a ``StreamingDataLoader`` with ``persistent_workers=True`` (a whole epoch,
or one batch), prints its workers' pids and ``time.monotonic()`` (one JSON line) and
ends with the loader and its iterator still referenced by the module, as a training
script's last line does. ``tests/loader/test_dropping_workers.py`` measures how long
the workers outlive the program's last statement.
"""

from __future__ import annotations

import json
import multiprocessing
import sys
import time

from streaming import StreamingDataLoader, StreamingDataset

import shm_watch


def main(uri: str, context: str, workers: int, where: str) -> tuple[StreamingDataLoader, object]:
    shm_watch.adopt_mark()  # the test judges the /dev/shm entries of this program as its run's
    dataset = StreamingDataset(uri, num_splits=4, shuffle_seed=5)
    loader = StreamingDataLoader(
        dataset,
        batch_size=4,
        num_workers=workers,
        persistent_workers=True,
        multiprocessing_context=None if context == "default" else context,
        timeout=120,
    )
    iterator = iter(loader)
    next(iterator)
    if where == "after an epoch":
        for _batch in iterator:
            pass
    pids = [process.pid for process in multiprocessing.active_children()]
    print(json.dumps({"workers": pids, "ended": time.monotonic()}), flush=True)
    return loader, iterator


if __name__ == "__main__":
    kept = main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
