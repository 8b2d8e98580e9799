"""A worker killed while it holds its loader's "workers done" lock: ``python dead_lock_holder.py URI METHOD``.

``tests/loader/test_supervisor.py`` runs it with a time limit. Worker 1's ``worker_init_fn``
takes the lock of the event torch's worker loop reads once per index (found in the
calling frame of ``_worker_loop``) and SIGKILLs itself, as a kill (the OOM killer,
a scheduler) that lands while a worker reads the event would. The trainer must
name the dead worker and continue exactly with ``iter()`` again, not block on the
lock. Prints ``OK <samples>`` on success.
"""

from __future__ import annotations

import os
import signal
import sys
from collections import Counter

from streaming import StreamingDataLoader, StreamingDataset


def die_holding_the_done_lock(worker_id: int) -> None:
    if worker_id != 1:
        return
    frame = sys._getframe(1)
    while frame is not None and "done_event" not in frame.f_locals:
        frame = frame.f_back
    assert frame is not None, "torch's worker loop no longer has a done_event local"
    frame.f_locals["done_event"]._cond._lock.acquire()
    os.kill(os.getpid(), signal.SIGKILL)


def main(uri: str, method: str) -> None:
    def dataset() -> StreamingDataset:
        return StreamingDataset(uri, num_splits=4, shuffle_seed=7, block_rows=4, shuffle_buffer_size=64)

    planned = Counter(sample["id"] for sample in dataset())
    loader = StreamingDataLoader(
        dataset(),
        batch_size=8,
        num_workers=2,
        multiprocessing_context=None if method == "default" else method,
        worker_init_fn=die_holding_the_done_lock,
        head_start=False,  # the loop waits on the workers from its first batch, where the lock matters
    )
    seen: list[int] = []
    try:
        for batch in loader:
            seen += batch["id"].tolist()
    except RuntimeError as error:
        assert "worker 1" in str(error) and "SIGKILL" in str(error), error
    else:
        raise AssertionError("the dead worker was not reported")
    loader = StreamingDataLoader(loader.dataset, batch_size=8, num_workers=0)
    rest = [i for batch in loader for i in batch["id"].tolist()]
    assert Counter(seen + rest) == planned, "lost or repeated samples after the dead worker"
    print("OK", len(seen + rest))


if __name__ == "__main__":
    main(*sys.argv[1:])
