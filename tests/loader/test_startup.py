"""A loader with workers starts its fork server when it is built, not at its first iter()."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from helpers import make_table

SCRIPT = textwrap.dedent(
    """
    import multiprocessing.forkserver as forkserver
    import sys

    import psutil

    from streaming import StreamingDataLoader, StreamingDataset

    if __name__ == "__main__":
        uri, workers = sys.argv[1], int(sys.argv[2])
        loader = StreamingDataLoader(
            StreamingDataset(uri, num_splits=2, shuffle_seed=0), batch_size=5, num_workers=workers,
            head_start=False,  # the workers deliver from the first batch (no head start by the trainer)
        )
        server = forkserver._forkserver._forkserver_pid  # before any iter()
        assert (server is not None) == (workers > 0), server
        if workers:
            assert psutil.pid_exists(server)
        ids, parents = [], set()
        for batch in loader:
            ids += batch["id"].tolist()
            parents |= {child.ppid() for child in psutil.Process().children(recursive=True)
                        if child.pid != server}
        assert sorted(ids) == list(range(40)), ids
        assert (server in parents) == (workers > 0), "the workers are the early fork server's"
        print("ok", workers)
    """
)


def test_the_fork_server_starts_with_the_loader_and_serves_its_workers(tmp_path):
    uri = make_table(tmp_path / "t.lance", [20, 20])
    script = tmp_path / "start.py"
    script.write_text(SCRIPT)
    for workers in (0, 2):
        done = subprocess.run(
            [sys.executable, str(script), uri, str(workers)], capture_output=True, text=True, timeout=180
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.split() == ["ok", str(workers)]
