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


@dataclass(frozen=True)
class StandIn:
    """A running stand-in: where it listens and how to reach and steer it."""

    host: str
    api_key: str = field(repr=False)

    def connect(self, *, api_key: str | None = None, client_config: dict[str, Any] | None = None) -> Any:
        """A lancedb remote connection to the stand-in (``api_key`` defaults to the one it accepts)."""
        import lancedb

        return lancedb.connect(
            f"db://{DATABASE}",
            api_key=self.api_key if api_key is None else api_key,
            host_override=self.host,
            client_config=client_config,
        )

    def _control(self, command: str, body: dict[str, Any] | None = None) -> Any:
        data = json.dumps(body or {}).encode()
        request = urllib.request.Request(f"{self.host}/_stand_in/{command}", data=data, method="POST")
        with urllib.request.urlopen(request, timeout=30) as reply:
            return json.loads(reply.read())

    def stats(self) -> dict[str, Any]:
        """Requests by route (``total``) and rows answered since the last ``reset``."""
        result: dict[str, Any] = self._control("stats")
        return result

    def query_bodies(self) -> list[dict[str, Any]]:
        """Every ``query`` body since the last reset, without its filter (take lists are long)."""
        result: list[dict[str, Any]] = self._control("bodies")
        return result

    def reset(self) -> None:
        """Zero the counts."""
        self._control("reset")

    def set_latency(self, milliseconds: float) -> None:
        """Delay every answer by ``milliseconds`` from now on."""
        self._control("latency", {"seconds": milliseconds / 1000})

    def fault(
        self, route: str, *, count: int, status: int = 503, drop: bool = False, stall_s: float = 0.0
    ) -> None:
        """Make the next ``count`` requests of ``route`` (``"query"``, ``"describe"``, ``"*"``) fail:
        answer ``status``, or close the connection unanswered (``drop``), or stall ``stall_s`` first."""
        self._control(
            "fault", {"route": route, "count": count, "status": status, "drop": drop, "stall_s": stall_s}
        )


@contextlib.contextmanager
def running(root: str, *, api_key: str, latency_ms: float = 0.0) -> Iterator[StandIn]:
    """Serve the tables of ``root`` (``lancedb.connect(root)``'s layout) until the block ends."""
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    paths = [here, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    environment = {**os.environ, KEY_VARIABLE: api_key, "PYTHONPATH": os.pathsep.join(paths)}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "benchmarks.harness.lancedb_server",
            "--root",
            root,
            "--latency-ms",
            str(latency_ms),
        ],
        stdout=subprocess.PIPE,
        env=environment,
        text=True,
    )
    try:
        assert process.stdout is not None
        port = process.stdout.readline().strip()
        if not port:
            raise RuntimeError("the LanceDB stand-in did not start (see its stderr)")
        yield StandIn(f"http://127.0.0.1:{int(port)}", api_key)
    finally:
        process.terminate()
        process.wait(timeout=30)
