"""SIGINT while a loader's workers start: ``python interrupted_start.py URI FIFO METHOD``.

``tests/loader/test_interrupted_start.py`` runs it and reads its stderr.

The trainer sends itself SIGINT right after its first worker process started, as
Ctrl-C or a launcher's signal would, and handles the KeyboardInterrupt (a job
saving a checkpoint, say) while the worker is still unpickling what it was
sent. The worker waits, inside that unpickling, until the trainer has let go of
the iterator it was interrupted in: a byte through a FIFO, no sleeps.

The trainer first installs Python's SIGINT handler: a process started with SIGINT
ignored (``nohup cmd &``, many CI runners) inherits that, Python keeps it, and the
SIGINT it sends itself would then do nothing: the iterator would never be let go
of, and the trainer would wait for batches from workers that wait on the FIFO.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import multiprocessing
import os
import signal
import sys
from multiprocessing.context import ForkServerContext, ForkServerProcess, SpawnContext, SpawnProcess

import pyarrow as pa

from streaming import StreamingDataLoader, StreamingDataset

import shm_watch


class HoldOnArrival:
    """A transform whose copy in a worker waits for a byte on ``fifo`` as it is unpickled."""

    def __init__(self, fifo: str, trainer: int) -> None:
        self.fifo, self.trainer = fifo, trainer

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if os.getpid() != self.trainer:
            with open(self.fifo, "rb") as fifo:  # blocks until the trainer opens it to write
                fifo.read(1)

    def __call__(self, batch: pa.RecordBatch) -> list[dict]:
        return batch.to_pylist()


def _interrupt_after(start) -> None:
    start()
    os.kill(os.getpid(), signal.SIGINT)  # the next worker never starts


class ForkServerWorker(ForkServerProcess):
    def start(self) -> None:
        _interrupt_after(super().start)


class SpawnWorker(SpawnProcess):
    def start(self) -> None:
        _interrupt_after(super().start)


class ForkServer(ForkServerContext):
    Process = ForkServerWorker


class Spawn(SpawnContext):
    Process = SpawnWorker


def main(uri: str, fifo: str, method: str) -> int:
    """Interrupt the first ``next()`` after the first worker started, let it finish starting, report."""
    signal.signal(signal.SIGINT, signal.default_int_handler)  # an inherited SIG_IGN would hang us
    shm_watch.adopt_mark()
    dataset = StreamingDataset(uri, num_splits=2, shuffle_seed=1, transform=HoldOnArrival(fifo, os.getpid()))
    contexts = {"forkserver": ForkServer, "spawn": Spawn}
    context = contexts[method]() if method in contexts else None
    if context is None:  # the loader's own fork server, with its preloaded modules
        start = ForkServerProcess.start
        ForkServerProcess.start = lambda self: _interrupt_after(functools.partial(start, self))  # type: ignore[method-assign]
    # head_start=False: the workers start on the trainer's thread, inside next(), where the
    # SIGINT meets them (a head start would start them on a thread of their own)
    loader = StreamingDataLoader(
        dataset, batch_size=4, num_workers=2, multiprocessing_context=context, head_start=False
    )
    with contextlib.suppress(KeyboardInterrupt):
        next(iter(loader))  # the first next() starts the workers
    gc.collect()  # the interrupted iterator's queues are gone: their semaphores unlinked
    workers = multiprocessing.active_children()
    with open(fifo, "wb") as release:
        release.write(b"x" * len(workers))
    for worker in workers:
        worker.join(timeout=60)  # a guard against a hang, not a synchronisation
    print(f"interrupted; {len(workers)} worker(s) had started", flush=True)
    return 130


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
