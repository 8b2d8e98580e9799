"""Start the LanceDB server stand-in (``benchmarks.harness.lancedb_server``) in its own process and steer it.

```python
with running(root, api_key="sk-test") as server:
    db = server.connect()                    # lancedb.connect("db://bench", host_override=...)
    table = db.open_table("training")        # a RemoteTable over root/training.lance
    server.stats()                           # {"requests": {"query": 3, ...}, "total": 5, "rows": 900}
```

The server runs in a process of its own so it never shares the GIL with the loader
it serves; its API key travels to it in its environment, never on a command line.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from benchmarks.harness.lancedb_server import KEY_VARIABLE

__all__ = ["DATABASE", "StandIn", "running"]

DATABASE = "bench"
"""The database name clients connect to (``db://bench``); the stand-in answers any."""
FAST_RETRIES = {"retry_config": {"retries": 2, "backoff_factor": 0.01, "backoff_jitter": 0.0}}
"""A client config whose own retries are quick, for tests that inject faults."""


class _Process:
    """The stand-in's server process: started, killed and started again on the same port."""

    def __init__(self, root: str, *, api_key: str, latency_ms: float) -> None:
        here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        paths = [here, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        self.environment = {**os.environ, KEY_VARIABLE: api_key, "PYTHONPATH": os.pathsep.join(paths)}
        self.root, self.latency_ms, self.port = root, latency_ms, 0
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> int:
        """Start the server (on the port it had, if any); its port."""
        command = [sys.executable, "-m", "benchmarks.harness.lancedb_server", "--root", self.root]
        command += ["--latency-ms", str(self.latency_ms), "--database", DATABASE, "--port", str(self.port)]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, env=self.environment, text=True)
        assert self.process.stdout is not None
        port = self.process.stdout.readline().strip()
        if not port:
            self.stop()
            raise RuntimeError("the LanceDB stand-in did not start (see its stderr)")
        self.port = int(port)
        return self.port

    def kill(self) -> None:
        """SIGKILL: every connection and answer in flight is cut where it stands."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=30)
            self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=30)
            self.process = None


@dataclass(frozen=True)
class StandIn:
    """A running stand-in: where it listens and how to reach and steer it."""

    host: str
    api_key: str = field(repr=False)
    process: _Process | None = field(default=None, repr=False, compare=False)

    def connect(self, *, api_key: str | None = None, client_config: dict[str, Any] | None = None) -> Any:
        """A lancedb remote connection to the stand-in (``api_key`` defaults to the one it accepts)."""
        import lancedb

        return lancedb.connect(
            f"db://{DATABASE}",
            api_key=self.api_key if api_key is None else api_key,
            host_override=self.host,
            client_config=client_config,
        )

    def _control(self, command: str, body: dict[str, Any] | None = None, timeout: float = 30) -> Any:
        data = json.dumps(body or {}).encode()
        request = urllib.request.Request(f"{self.host}/_stand_in/{command}", data=data, method="POST")
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return json.loads(reply.read())

    def stats(self) -> dict[str, Any]:
        """Requests by route (``total``), rows answered (``rows``), take requests (``takes``) and the
        rows they answered (``taken``) since the last ``reset``; ``faults_left``: injected faults not yet
        suffered."""
        result: dict[str, Any] = self._control("stats")
        return result

    def query_bodies(self) -> list[dict[str, Any]]:
        """Every ``query`` body since the last reset, its filter replaced by ``take``: the column a
        take names (``_rowid``, ``_rowoffset``), None for another query (take lists are long)."""
        result: list[dict[str, Any]] = self._control("bodies")
        return result

    def reset(self) -> None:
        """Zero the counts."""
        self._control("reset")

    def set_latency(self, milliseconds: float) -> None:
        """Delay every answer by ``milliseconds`` from now on."""
        self._control("latency", {"seconds": milliseconds / 1000})

    def fault(
        self,
        route: str,
        *,
        count: int,
        status: int = 503,
        drop: bool = False,
        cut: bool = False,
        stall_s: float = 0.0,
        retry_after_s: float | None = None,
    ) -> None:
        """Make the next ``count`` requests of ``route`` (``"query"``, ``"describe"``, ``"*"``) fail:
        answer ``status`` (with ``Retry-After: retry_after_s`` if given), close the connection
        unanswered (``drop``), cut the real answer half way (``cut``), or stall ``stall_s`` first."""
        fault = {"route": route, "count": count, "status": status, "drop": drop, "cut": cut}
        fault |= {"stall_s": stall_s, "retry_after_s": retry_after_s}
        self._control("fault", fault)

    def set_scan_order(self, order: str) -> None:
        """``"reversed"``: answer plain queries (not takes) in reverse storage order; ``"storage"``."""
        self._control("scan_order", {"order": order})

    def clear_faults(self) -> None:
        """Forget every fault not yet suffered."""
        self._control("clear")

    def wait_stalled(self, count: int, *, timeout_s: float = 60.0) -> None:
        """Return once ``count`` requests have stalled (a ``fault`` with ``stall_s``) since it started."""
        found = self._control("stalled", {"count": count, "timeout_s": timeout_s}, timeout=timeout_s + 30)
        if found["stalled"] < count:
            raise TimeoutError(f"{found['stalled']} of {count} requests stalled in {timeout_s} s")

    def restart(self) -> None:
        """Kill the server (SIGKILL, mid-answer if it is answering) and start it again on its port:
        its counts and faults start afresh; the tables are the same."""
        assert self.process is not None, "only a stand-in started by running() can restart"
        self.process.kill()
        self.process.start()


@contextlib.contextmanager
def running(root: str, *, api_key: str, latency_ms: float = 0.0) -> Iterator[StandIn]:
    """Serve the tables of ``root`` (``lancedb.connect(root)``'s layout) until the block ends."""
    process = _Process(root, api_key=api_key, latency_ms=latency_ms)
    port = process.start()
    try:
        yield StandIn(f"http://127.0.0.1:{port}", api_key, process)
    finally:
        process.stop()
