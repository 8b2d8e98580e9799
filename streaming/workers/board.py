"""How a loader's persistent workers learn the committed position at every ``iter()``.

With ``persistent_workers=True`` a DataLoader keeps its worker processes, and each
new iterator makes every worker call ``iter()`` again on the copy of the dataset
it received when it started, which knows nothing of what the trainer committed
since (nor of ``set_epoch``, ``load_state_dict``, an evaluation pass restarting).
So the loader posts, on one pipe per worker, where the dataset (or mixture) stands
when the new iterator starts: its engine's ``handover()``, a state dict (plain
JSON data). Each worker loads it into its own engine (``reset``) before it reads
anything: every iterator continues from the committed position, in the workers
it already has, and the worker's own read counters carry on. Pipes carry no names in ``/dev/shm`` (queues'
semaphores would).
"""

from __future__ import annotations

import json
from multiprocessing.connection import Connection
from typing import Any

__all__ = ["STOP", "Board"]


STOP = {"stop": True}
"""Posted instead of a position: the worker's iterator ends without reading (its loader
finished before it needed the worker)."""


class Board:
    """One pipe per worker: the trainer writes, the worker reads at each later ``iter()``
    (at every one, the first included, with ``first_waits``: a loader whose trainer
    draws the first batches itself, ``loader.headstart``).

    Travels to the workers inside the dataset's pickle when they start (the readers
    only); ``received`` counts the iterators of the process it is in.
    """

    def __init__(self, context: Any, workers: int, *, first_waits: bool = False) -> None:
        pipes = [context.Pipe(duplex=False) for _ in range(workers)]
        self._readers: list[Connection] = [reader for reader, _ in pipes]
        self._writers: list[Connection] = [writer for _, writer in pipes]
        self._iterations = 0
        self._first_waits = first_waits
        # with first_waits, each worker says on its own pipe when it waits for a position
        waiting = [context.Pipe(duplex=False) for _ in range(workers)] if first_waits else []
        self._waiting_readers: list[Connection] = [reader for reader, _ in waiting]
        self._waiting_writers: list[Connection] = [writer for _, writer in waiting]
        self._waiting: set[int] = set()

    def __getstate__(self) -> dict[str, Any]:
        return {
            "_readers": self._readers,
            "_writers": [],
            "_iterations": 0,
            "_first_waits": self._first_waits,
            "_waiting_readers": [],
            "_waiting_writers": self._waiting_writers,
            "_waiting": set(),
        }

    def all_waiting(self) -> bool:
        """In the trainer (``first_waits``): whether every worker has started and waits for
        its first position (never blocks)."""
        for worker, reader in enumerate(self._waiting_readers):
            if worker not in self._waiting and reader.poll():
                reader.recv_bytes()
                self._waiting.add(worker)
        return len(self._waiting) == len(self._waiting_readers)

    def post(self, handover: dict[str, Any]) -> None:
        """In the trainer, after the workers were asked to start again: where the host
        stands (its engine's ``handover()``, plain JSON data)."""
        message = json.dumps(handover).encode()
        for writer in self._writers:
            writer.send_bytes(message)

    def post_stop(self) -> None:
        """In the trainer: the workers waiting for a position are not needed (``STOP``)."""
        self.post(STOP)

    def received(self, worker: int) -> dict[str, Any] | None:
        """In a worker, as its iterator starts: the trainer's ``handover()`` (or ``STOP``),
        or ``None`` on the worker's first iterator unless ``first_waits`` (the position
        it was pickled with is current)."""
        self._iterations += 1
        if self._iterations == 1 and not self._first_waits:
            return None
        if self._iterations == 1:
            self._waiting_writers[worker].send_bytes(b"waiting")
        handover: dict[str, Any] = json.loads(self._readers[worker].recv_bytes())
        return handover

    def close(self) -> None:
        """Close both ends in this process."""
        for connection in (*self._readers, *self._writers, *self._waiting_readers, *self._waiting_writers):
            connection.close()
