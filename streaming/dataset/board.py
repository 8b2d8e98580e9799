"""How a loader's persistent workers learn the committed position at every ``iter()``.

With ``persistent_workers=True`` a DataLoader keeps its worker processes, and each
new iterator makes every worker call ``iter()`` again on the copy of the dataset
it received when it started, which knows nothing of what the trainer committed
since (nor of ``set_epoch``, ``load_state_dict``, an evaluation pass restarting).
So the loader posts, on one pipe per worker, a fresh pickle of the dataset (or
mixture) as it stands when the new iterator starts, and each worker takes it over
before it reads anything: every iterator continues from the committed position,
in the workers it already has. Pipes carry no names in ``/dev/shm`` (queues'
semaphores would).
"""

from __future__ import annotations

from multiprocessing.connection import Connection
from typing import Any

__all__ = ["Board"]


class Board:
    """One pipe per worker: the trainer writes, the worker reads at each later ``iter()``.

    Travels to the workers inside the dataset's pickle when they start (the readers
    only); ``fresh`` counts the iterators of the process it is in.
    """

    def __init__(self, context: Any, workers: int) -> None:
        pipes = [context.Pipe(duplex=False) for _ in range(workers)]
        self._readers: list[Connection] = [reader for reader, _ in pipes]
        self._writers: list[Connection] = [writer for _, writer in pipes]
        self._iterations = 0

    def __getstate__(self) -> dict[str, Any]:
        return {"_readers": self._readers, "_writers": [], "_iterations": 0}

    def post(self, message: bytes) -> None:
        """In the trainer, after the workers were asked to start again: the host's pickle."""
        for writer in self._writers:
            writer.send_bytes(message)

    def fresh(self, worker: int) -> Any | None:
        """In a worker, as its iterator starts: the trainer's copy of the host, or ``None``
        on the worker's first iterator (its own copy came with it)."""
        self._iterations += 1
        if self._iterations == 1:
            return None
        from multiprocessing.reduction import ForkingPickler

        return ForkingPickler.loads(self._readers[worker].recv_bytes())

    def take_over(self, target: object, worker: int, *, keep: tuple[str, ...] = ()) -> None:
        """In a worker, as its iterator starts: after its first, make ``target`` the
        trainer's copy of it, keeping this process's own ``keep`` attributes (and the
        board itself)."""
        fresh = self.fresh(worker)
        if fresh is None:
            return
        own = {name: vars(target)[name] for name in (*keep, "_board")}
        vars(target).update(vars(fresh))
        vars(target).update(own)

    def close(self) -> None:
        """Close both ends in this process."""
        for connection in (*self._readers, *self._writers):
            connection.close()
