"""The trainer's watch over its worker processes, with real processes and real SIGKILLs.

- A scheduler kills the trainer, its workers, the fork server and multiprocessing's
  resource tracker together (``kill -9 -PGID``): once every worker delivered, no
  semaphore of the DataLoader queues is left in ``/dev/shm``.
- A worker killed mid-epoch is named in a ``RuntimeError`` at once, whatever the
  DataLoader ``timeout``, and ``iter()`` again continues exactly.
- Ordinary ends (superseded iterators, exceptions, a whole epoch, interpreter exit)
  leave nothing behind and print no warning.
- An iterator closed before its workers delivered (``iter()`` again, ``set_epoch``)
  removes its queues' semaphore names at once, though it is still referenced.

Start methods: the loader's default (forkserver) and spawn.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from streaming import StreamingDataLoader, StreamingDataset, _compat

from helpers import ids_of, make_table, plain_transform
from launching import PROCS, Group

CONTEXTS = ["default", "spawn"]
TRAINER = PROCS / "group_trainer.py"
TORCH_CHECK_SECONDS = 5.0
"""torch checks its workers every 5 s (``MP_STATUS_CHECK_INTERVAL``), or after ``timeout``."""


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    """200 rows: 4 splits of 50, 2 workers of 2 splits; 13 batches of 8 per worker."""
    return make_table(tmp_path_factory.mktemp("supervisor") / "t.lance", [90, 110])


def run_trainer(mode: str, uri: str, context: str, names: Path, *, workers: int = 2) -> Group:
    """The trainer in a process group of its own, as a scheduler's job."""
    return Group(
        [sys.executable, str(TRAINER), mode, uri, context, str(workers), "3", str(names)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def in_dev_shm(inodes: list[str]) -> list[str]:
    """The names in ``/dev/shm`` of the semaphores whose inode numbers are ``inodes``."""
    wanted = {int(inode) for inode in inodes}
    found = []
    for entry in os.scandir("/dev/shm"):
        try:
            if entry.name.startswith("sem.") and entry.inode() in wanted:
                found.append(entry.name)
        except FileNotFoundError:
            continue
    return found


@pytest.mark.parametrize("context", CONTEXTS)
def test_a_whole_group_sigkill_after_every_worker_delivered_leaves_no_semaphores(uri, context, tmp_path):
    names = tmp_path / "names"
    with run_trainer("kill", uri, context, names) as trainer:
        line = trainer.process.stdout.readline()
        if line != "ready\n":
            trainer.kill()
            pytest.fail(f"the trainer did not deliver its batches: {line!r} {trainer.process.stderr.read()}")
        mapped = names.read_text().split()
        assert len(mapped) >= 8 + 3 * 2, f"expected the queues' semaphores to be mapped, got {mapped}"
        killed = trainer.kill()
        assert killed >= 4, "the group should hold the trainer, the resource tracker and 2 workers"
        left = in_dev_shm(mapped)
        assert not left, f"{len(left)} of the trainer's {len(mapped)} semaphores left in /dev/shm: {left}"
        trainer.left_nothing()  # no worker runs, no /dev/shm entry of the job (rings included)


@pytest.mark.parametrize("context", CONTEXTS)
def test_ordinary_ends_leave_nothing_and_print_no_warning(uri, context, tmp_path):
    names = tmp_path / "names"
    with run_trainer("exit", uri, context, names) as trainer:
        out, err = trainer.process.communicate(timeout=300)
        assert trainer.process.returncode == 0, err
        assert out.startswith("done"), out
        for marker in ("Exception ignored", "resource_tracker", "leaked", "Traceback", "Warning"):
            assert marker not in err, f"{marker!r} on the trainer's stderr:\n{err}"
        mapped = names.read_text().split()
        assert not in_dev_shm(mapped), "semaphores of an ended trainer are left in /dev/shm"
        trainer.left_nothing()  # its workers, fork server and resource tracker end by themselves


def record_pid(directory: Path, worker_id: int) -> None:
    """A ``worker_init_fn``: write this worker's pid to ``directory / worker<id>``."""
    (directory / f"worker{worker_id}").write_text(str(os.getpid()))


def dataset(uri: str, **kwargs) -> StreamingDataset:
    return StreamingDataset(uri, num_splits=4, shuffle_seed=7, block_rows=4, shuffle_buffer_size=64, **kwargs)


@pytest.mark.parametrize(
    ("context", "timeout", "transform"),
    [(context, timeout, None) for context in CONTEXTS for timeout in (0, 60)]
    + [("default", 0, plain_transform)],
)
def test_a_killed_worker_is_named_at_once_and_iter_continues_exactly(
    uri, context, timeout, transform, tmp_path
):
    """With a transform, batches come as tensors shared through file descriptors, and a
    dying worker breaks that pipe (``ConnectionResetError``): named all the same."""
    planned = Counter(ids_of(dataset(uri)))
    data = dataset(uri, transform=transform)
    loader = StreamingDataLoader(
        data,
        batch_size=8,
        num_workers=2,
        timeout=timeout,
        multiprocessing_context=None if context == "default" else context,
        worker_init_fn=functools.partial(record_pid, tmp_path),
        head_start=False,  # the workers deliver from the first batch (test_head_start.py: with one)
    )
    iterator = iter(loader)
    seen = [i for _ in range(3) for i in next(iterator)["id"].tolist()]
    pid = int((tmp_path / "worker1").read_text())
    os.kill(pid, signal.SIGKILL)
    killed_at = time.monotonic()
    with pytest.raises(RuntimeError) as raised:
        for batch in iterator:  # worker 0's prefetched batches may still come
            seen += batch["id"].tolist()
    waited = time.monotonic() - killed_at
    message = str(raised.value)
    assert f"worker 1 (pid {pid}) was killed by SIGKILL" in message, message
    assert "iter(" in message and "committed position" in message, message
    assert waited < TORCH_CHECK_SECONDS - 1, f"the dead worker was noticed after {waited:.1f} s"
    rest = [i for batch in loader for i in batch["id"].tolist()]  # iter() again
    assert Counter(seen + rest) == planned, "a restart after the dead worker lost or repeated samples"


def semaphore_files(iterator) -> list[str]:
    """The ``/dev/shm`` files of the named semaphores of a loader iterator's queues."""
    names = [lock._semlock.name for lock in _compat.queue_semaphores(iterator._batches)]
    return [f"/dev/shm/sem.{name.lstrip('/')}" for name in names if name is not None]


@pytest.mark.parametrize("closed_by", ["iter", "set_epoch"])
def test_an_iterator_closed_before_its_workers_delivered_leaves_no_semaphore_name(uri, tmp_path, closed_by):
    """Found by a Lightning resume (issue 25): an iterator that ``set_epoch`` (or ``iter()``
    again) closes before every worker has sent a batch kept its queues' semaphore names
    while it stayed referenced (a framework holds it), so a SIGKILL of the whole job then
    left 8 + 3k ``sem.mp-*`` files. Once its workers have stopped, nobody opens them."""
    loader = StreamingDataLoader(dataset(uri), batch_size=8, num_workers=2)
    expected = Counter(ids_of(dataset(uri)))
    first = iter(loader)
    delivered = next(first)["id"].tolist()  # an iterator starts its workers at its first next()
    files = semaphore_files(first)
    # the names exist until every worker has opened them (then the supervisor removes
    # them); a worker not heard from yet keeps them, which is the case this test is about
    assert len(files) == 8 + 3 * 2, files
    if closed_by == "iter":
        rest = [i for batch in loader for i in batch["id"].tolist()]  # supersedes the first
        assert Counter(rest) + Counter(delivered) == expected, "the next iterator lost or repeated samples"
    else:
        loader.set_epoch(1)
        assert len(list(loader)) > 0, "the next epoch's iterator delivers"
        with pytest.raises(RuntimeError, match="closed by set_epoch"):
            next(first)
    left = [file for file in files if os.path.exists(file)]
    assert not left, f"a closed iterator, still referenced, keeps {len(left)} semaphore names: {left}"


@pytest.mark.parametrize("context", CONTEXTS)
def test_a_worker_killed_holding_the_done_lock_does_not_deadlock_the_trainer(uri, context):
    """torch's trainer reads the "workers done" event, whose lock every worker takes once
    per index; a worker killed holding it used to block the trainer forever. Now the dead
    worker is named, and the rest of the epoch comes exactly."""
    script = PROCS / "dead_lock_holder.py"
    result = subprocess.run(
        [sys.executable, str(script), uri, context], capture_output=True, text=True, timeout=90, check=False
    )
    assert result.returncode == 0 and result.stdout.startswith("OK"), result.stdout + result.stderr
