"""``LanceDBStandIn``: start the LanceDB server stand-in in a process of its own, and steer it.

```python
with LanceDBStandIn(folder, api_key="sk-test") as server:
    db = server.connect()                   # lancedb.connect("db://bench", host_override=...)
    table = db.open_table("training")       # a RemoteTable over folder/training.lance
    server.stats()                          # {"requests": {"query": 3, ...}, "total": 5, "rows": 900}
```

The server (``python -m streaming.testing.server``) runs in a process of its own so it
never shares the GIL with the loader it serves; its API key travels to it in its
environment, never on a command line. This module imports only the standard library
(``connect`` imports lancedb when called).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.request
from types import TracebackType
from typing import Any

__all__ = ["FAST_RETRIES", "KEY_VARIABLE", "SERVER_MODULE", "LanceDBStandIn", "Outage"]

KEY_VARIABLE = "LANCEDB_STAND_IN_API_KEY"
"""The environment variable that hands the server the API key it accepts (never an argument:
a command line is visible to every user of the machine)."""
SERVER_MODULE = "streaming.testing.server"
"""The module the server process runs (``python -m``), found wherever ``streaming`` is installed."""
FAST_RETRIES: dict[str, Any] = {"retry_config": {"retries": 2, "backoff_factor": 0.01, "backoff_jitter": 0.0}}
"""A lancedb ``client_config`` whose own retries are quick, for tests that inject faults."""


class LanceDBStandIn:
    """A stand-in for a LanceDB server (Cloud or Enterprise), for tests: serves the tables
    of a local folder to lancedb's own remote client, from a process of its own.

    ``root`` is a folder in ``lancedb.connect(root)``'s layout: each ``root/NAME.lance`` is
    table ``NAME`` of database ``database``. Write the tables with a local connection
    (``lancedb.connect(root).create_table(...)``, ``.add``, ``.delete``); read them through
    the stand-in with ``lancedb.connect(self.uri, api_key=..., host_override=self.host)``
    (or ``connect()``). Used as a context manager, it starts on entry and stops on exit;
    ``start()``/``stop()`` do the same by hand. Constructing one starts nothing.

    Guaranteed: what it answers comes from the real table through Lance's own engine (a
    count, a version's schema, a filter, a take, the rows at an offset are what Lance
    gives for that table and version, at what it costs), so a pipeline tested against it
    reads what it would read from a server holding the same table; an append or a
    deletion made locally is a new version the client sees, as on a server. It checks
    the ``x-api-key`` header (401 for another key) and the database header (404 for
    another database), refuses a request body over 1 MiB (413), counts every request
    (``stats``) and injects the failures a real server or its network has (``fault``,
    ``set_latency``, ``restart``, ``outage``). The server process exits when this process does, even
    if it is killed. The key is never on a command line, in a ``repr`` or in an error.

    The lancedb calls it answers (lancedb 0.40's remote client, ``RemoteTable``):
    ``open_table``, ``version``, ``schema``, ``count_rows`` (with a filter), queries
    (``search()``/``query()`` with ``select``, ``where``, ``limit``, ``offset``,
    ``with_row_id``), ``take_offsets``, ``take_row_ids``, ``checkout`` of a version,
    ``list_versions`` and ``tags`` (``list``, ``create``, ``delete``). Anything else
    (``list_tables``, ``create_table``, ``add``, ``delete``, ``merge_insert``, vector
    and full-text search, indexes) is answered 404: lancedb raises its ``HttpError``, or
    a ``ValueError`` saying the table was not found.

    It is NOT a LanceDB server: one process on ``127.0.0.1`` with tables on local disk
    (no replicas, so never a stale version), no TLS, one static key, no rate limit of
    its own (429 and 409 come only from ``fault``), writes only through the local
    folder, and its error messages are not the server's wording (only their statuses
    mean anything).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        api_key: str,
        latency_ms: float = 0.0,
        database: str = "bench",
    ) -> None:
        if not isinstance(api_key, str) or not api_key:
            raise ValueError("api_key must be a non-empty string: the key the stand-in accepts")
        if not database or "/" in database:
            raise ValueError(f"database must be a name without '/', got {database!r}")
        self._root = os.fspath(root)
        self._api_key = api_key
        self._latency_ms = float(latency_ms)
        self._database = database
        self._port = 0
        self._process: subprocess.Popen[str] | None = None

    def __repr__(self) -> str:
        where = self.host if self.running else "not running"
        return f"LanceDBStandIn({self._root!r}, database={self._database!r}, {where})"

    @property
    def root(self) -> str:
        """The folder of ``NAME.lance`` tables it serves."""
        return self._root

    @property
    def database(self) -> str:
        """The database it serves (``x-lancedb-database``); requests for another are 404."""
        return self._database

    @property
    def uri(self) -> str:
        """What to pass ``lancedb.connect``: ``db://DATABASE``."""
        return f"db://{self._database}"

    @property
    def running(self) -> bool:
        """Whether its server process is up (started and not stopped)."""
        return self._process is not None and self._process.poll() is None

    @property
    def host(self) -> str:
        """Where it listens, ``http://127.0.0.1:PORT``: lancedb's ``host_override``."""
        if not self._port:
            raise RuntimeError("the stand-in has not been started: use it in a with block or call start()")
        return f"http://127.0.0.1:{self._port}"

    def start(self) -> LanceDBStandIn:
        """Start the server process (on the port it had, after a ``stop``); returns ``self``."""
        if self._process is not None:
            raise RuntimeError("the stand-in is already running")
        command = [sys.executable, "-m", SERVER_MODULE, "--root", self._root, "--exit-with-stdin"]
        command += ["--latency-ms", str(self._latency_ms), "--database", self._database]
        command += ["--port", str(self._port)]
        environment = {**os.environ, KEY_VARIABLE: self._api_key}
        self._process = subprocess.Popen(  # stdin: closed when this process ends, and the server with it
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=environment, text=True
        )
        assert self._process.stdout is not None
        port = self._process.stdout.readline().strip()
        if not port.isdigit():
            self._end(kill=True)
            raise RuntimeError(f"the LanceDB stand-in did not start (its error is above): {port!r}")
        self._port = int(port)
        return self

    def stop(self) -> None:
        """Stop the server process (SIGTERM); nothing when it is not running."""
        self._end(kill=False)

    def restart(self) -> None:
        """Kill the server (SIGKILL, mid-answer if it is answering) and start it again on its
        port: the server going away mid-epoch. Its counts and faults start afresh."""
        if self._process is None:
            raise RuntimeError("only a running stand-in can restart")
        self._end(kill=True)
        self.start()

    def outage(self, seconds: float) -> Outage:
        """Kill the server now (SIGKILL, mid-answer if it is answering) and start it again on its
        port ``seconds`` later, from a thread of this process: a server that goes away for a
        while. Returns the ``Outage``; its ``join()`` returns once the server is back."""
        if self._process is None:
            raise RuntimeError("only a running stand-in can go away")
        if not seconds >= 0:
            raise ValueError(f"seconds must be a number of seconds >= 0, got {seconds!r}")
        self._end(kill=True)
        return Outage(self, seconds)

    def _end(self, *, kill: bool) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if kill:
            process.kill()
        else:
            process.terminate()
        process.wait(timeout=30)
        for pipe in (process.stdin, process.stdout):
            if pipe is not None:
                pipe.close()

    def __enter__(self) -> LanceDBStandIn:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()

    def connect(self, *, api_key: str | None = None, client_config: dict[str, Any] | None = None) -> Any:
        """A lancedb remote connection to the stand-in (``lancedb.DBConnection``); ``api_key``
        defaults to the one it accepts, ``client_config`` is lancedb's (``FAST_RETRIES``)."""
        import lancedb

        return lancedb.connect(
            self.uri,
            api_key=self._api_key if api_key is None else api_key,
            host_override=self.host,
            client_config=client_config,
        )

    def _control(self, command: str, body: dict[str, Any] | None = None, timeout: float = 30) -> Any:
        data = json.dumps(body or {}).encode()
        address = f"{self.host}/_stand_in/{command}"  # always http://127.0.0.1:PORT, never another scheme
        request = urllib.request.Request(address, data=data, method="POST")  # noqa: S310
        with urllib.request.urlopen(request, timeout=timeout) as reply:  # noqa: S310
            return json.loads(reply.read())

    def stats(self) -> dict[str, Any]:
        """Since the last ``reset``: requests by route (``requests``, e.g. ``{"query": 3}``) and
        in all (``total``), rows answered (``rows``), take requests (``takes``) and the rows they
        answered (``taken``); ``faults_left``: injected faults not yet suffered."""
        result: dict[str, Any] = self._control("stats")
        return result

    def query_bodies(self) -> list[dict[str, Any]]:
        """Every ``query`` body since the last reset, its filter replaced by ``take``: the column a
        take names (``_rowid``, ``_rowoffset``), None for another query (take lists are long)."""
        result: list[dict[str, Any]] = self._control("bodies")
        return result

    def reset(self) -> None:
        """Zero the counts (faults and latency stay)."""
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
        """Make the next ``count`` requests of ``route`` (``"query"``, ``"describe"``,
        ``"count_rows"``, ``"*"``) fail: answer ``status`` (with ``Retry-After: retry_after_s``
        if given), close the connection unanswered (``drop``), cut the real answer half way
        (``cut``: its whole length announced, half its body sent), or stall ``stall_s`` first."""
        fault = {"route": route, "count": count, "status": status, "drop": drop, "cut": cut}
        fault |= {"stall_s": stall_s, "retry_after_s": retry_after_s}
        self._control("fault", fault)

    def clear_faults(self) -> None:
        """Forget every fault not yet suffered."""
        self._control("clear")

    def set_scan_order(self, order: str) -> None:
        """``"reversed"``: answer plain queries (not takes) in reverse storage order, as a server
        that scans in parallel may; ``"storage"``: Lance's order (the default)."""
        self._control("scan_order", {"order": order})

    def wait_stalled(self, count: int, *, timeout_s: float = 60.0) -> None:
        """Return once ``count`` requests have stalled (a ``fault`` with ``stall_s``) since it
        started; ``TimeoutError`` after ``timeout_s``."""
        found = self._control("stalled", {"count": count, "timeout_s": timeout_s}, timeout=timeout_s + 30)
        if found["stalled"] < count:
            raise TimeoutError(f"{found['stalled']} of {count} requests stalled in {timeout_s} s")


class Outage:
    """A stand-in that is away: it starts again ``seconds`` after it went (or at ``end()``)."""

    def __init__(self, stand_in: LanceDBStandIn, seconds: float) -> None:
        self._stand_in = stand_in
        self._back_now = threading.Event()
        self._failed: list[BaseException] = []
        self._thread = threading.Thread(target=self._return, args=(seconds,), daemon=True)
        self._thread.start()

    def _return(self, seconds: float) -> None:
        self._back_now.wait(seconds)  # the outage's length (or until end())
        try:
            self._stand_in.start()
        except BaseException as error:  # raised by join(), in the caller's thread
            self._failed.append(error)

    def end(self) -> None:
        """Start the server again now."""
        self._back_now.set()

    def join(self, timeout: float = 60.0) -> None:
        """Return once the server is back; its start's error if it could not start."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"the stand-in did not start again within {timeout} s")
        if self._failed:
            raise self._failed[0]
