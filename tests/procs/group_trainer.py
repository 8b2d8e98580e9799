"""A trainer that a test kills together with its whole process group.

Usage: ``python group_trainer.py MODE URI CONTEXT WORKERS BATCHES NAMES``
(``CONTEXT`` ``default`` is the loader's forkserver).

- ``kill``: iterate a ``StreamingDataLoader`` until ``BATCHES`` batches were
  delivered, write the semaphores this process maps to the file ``NAMES``, print
  ``ready`` and wait for stdin to close (it never does: the test kills the group).
- ``exit``: the loops of a real training script (an iterator superseded after
  ``BATCHES`` batches, one superseded before all its workers delivered, a loop left
  by an exception, a whole epoch), write ``NAMES`` the same way and exit normally.

``NAMES`` holds one inode number a line: every POSIX semaphore the process has
mapped (those of its DataLoader queues), whether its name is still in ``/dev/shm``
or not.
"""

from __future__ import annotations

import sys

from streaming import StreamingDataLoader, StreamingDataset

import shm_watch


def mapped_semaphores() -> list[int]:
    """Inode numbers of the ``sem.*`` files of ``/dev/shm`` this process maps.

    Inodes, not names: glibc creates a semaphore under a temporary name and links
    it to its real one, so the mapping shows the temporary name.
    """
    inodes = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].startswith("/dev/shm/sem."):
                inodes.add(int(fields[4]))
    return sorted(inodes)


def write_inodes(path: str) -> None:
    with open(path, "w") as out:
        out.write("".join(f"{inode}\n" for inode in mapped_semaphores()))


def killed(loader: StreamingDataLoader, batches: int, names: str) -> None:
    iterator = iter(loader)
    for _ in range(batches):
        next(iterator)
    write_inodes(names)
    print("ready", flush=True)
    sys.stdin.read()


def exits(loader: StreamingDataLoader, batches: int, names: str) -> None:
    first = iter(loader)
    for _ in range(batches):
        next(first)
    second = iter(loader)  # supersedes the first
    next(second)  # worker 0 delivered, the others perhaps not
    try:
        for step, _batch in enumerate(loader):  # supersedes the second
            if step == batches:
                raise KeyError("left by an exception")
    except KeyError:
        pass
    for _batch in loader:  # the rest of the epoch
        pass
    write_inodes(names)
    print("done", len(mapped_semaphores()), flush=True)


def main(mode: str, uri: str, context: str, workers: int, batches: int, names: str) -> None:
    shm_watch.adopt_mark()  # the test judges the /dev/shm entries of this job as its run's own
    dataset = StreamingDataset(uri, num_splits=4, shuffle_seed=3, block_rows=4, shuffle_buffer_size=64)
    loader = StreamingDataLoader(
        dataset,
        batch_size=4,
        num_workers=workers,
        multiprocessing_context=None if context == "default" else context,
        timeout=120,
    )
    (killed if mode == "kill" else exits)(loader, batches, names)


if __name__ == "__main__":
    mode, uri, context, workers, batches, names = sys.argv[1:]
    main(mode, uri, context, int(workers), int(batches), names)
