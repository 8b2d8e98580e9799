"""A LanceDB server stand-in: the HTTP API of lancedb's remote client, over local Lance tables.

``python -m benchmarks.harness.lancedb_server --root DIR`` serves every ``DIR/NAME.lance``
(the layout of ``lancedb.connect(DIR)``) as table ``NAME`` of database ``--database``
(``bench``), to a client made with ``lancedb.connect("db://bench", api_key=...,
host_override=URL)``. Counts, versions, filters and takes are answered by Lance from
the real table through its own engine (a take is Lance's scanner with the take
filter, as in lancedb), so they are what a server would answer, and cost what it
would, not canned. It prints its port on stdout.

What it answers (the routes lancedb 0.40's Rust client sends, all ``POST``):
``describe`` (version and schema, at a version or the latest; 404 for a missing
table or version), ``count_rows``, ``query`` (``columns``, ``filter``, ``k``,
``offset``, ``with_row_id``; ``_rowoffset IN (...)`` and ``_rowid IN (...)`` are
takes, ``_rowoffset`` and ``_rowid`` can be selected), ``version/list`` and
``tags/list|create|delete``. It checks the ``x-api-key`` header against
``LANCEDB_STAND_IN_API_KEY`` (401 otherwise) and the ``x-lancedb-database`` header
against ``--database`` (404 otherwise), and refuses a request body over
``MAX_BODY_BYTES`` (413, the connection closed).

Control routes (``/_stand_in/...``, never counted): ``stats`` (requests by route,
rows answered), ``reset``, ``latency`` (per-request delay), ``fault`` (the next
``count`` requests of a route answer a status, with ``Retry-After`` if asked, stall,
drop the connection unanswered, or are cut: the answer's full length announced, half
its body sent, the connection closed) and ``stalled`` (wait until that many requests
stalled), ``scan_order`` (``reversed``: plain queries answered in reverse storage order, as a
server that scans in parallel may). Killing the process and starting it again on the same port
(``StandIn.restart``) is the server going away mid-epoch.

Leniencies (where a real server may differ, and what they hide):

- One process, tables on local disk: no load balancer, so no request ever meets
  another replica at another version (the client pins the version in each body).
- Errors are ``{"message": ...}`` with a status; a real server's wording differs, so
  the client never reads a message for meaning except the status.
- No authentication beyond one static key, no TLS, no rate limit of its own: 429
  and 409 come only from ``fault``.
- Closed: positions past the end and deleted row ids are left out of an answer
  silently, as Lance's engine does (it used to raise), so a client that does not
  check what it got back is caught; bodies are bounded; the database header is
  checked; 429 (with Retry-After) and 409 are answered on demand.

It lives in the benchmarks harness, not in ``streaming``: tests, the benchmark and
the docs all start it with ``benchmarks.harness.lancedb_stand_in.running``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pyarrow as pa

KEY_VARIABLE = "LANCEDB_STAND_IN_API_KEY"
"""The environment variable holding the API key the stand-in accepts (never an argument:
a command line is visible to every user of the machine)."""
_TAKE = re.compile(r"^\s*_row(?:offset|id)\s+IN\s*\(([^)]*)\)\s*$", re.IGNORECASE)
_TABLE_ROUTE = re.compile(r"^/v1/table/([^/]+)/(.+?)/?$")
_MAX_K = 1 << 62
MAX_BODY_BYTES = 1 << 20
"""The largest request body answered (nginx's default ``client_max_body_size``); larger is 413."""


class Tables:
    """The Lance datasets under ``root``, opened once per (name, version)."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._lock = threading.Lock()
        self._open: dict[tuple[str, int | None], Any] = {}
        self._addresses: dict[tuple[str, int], np.ndarray] = {}
        self._seen: dict[str, int] = {}
        self.reversed_scans = False

    def dataset(self, name: str, version: int | None) -> Any:
        """The dataset of table ``name`` at ``version`` (latest when None); KeyError when missing."""
        import lance

        path = os.path.join(self.root, f"{name}.lance")
        if not os.path.isdir(path):
            raise KeyError(f"table {name} not found")
        if version is None:
            return lance.dataset(path)  # the latest, checked anew each time
        versions = os.stat(
            os.path.join(path, "_versions")
        ).st_mtime_ns  # changes when one is added or cleaned up
        with self._lock:
            if self._seen.get(name) != versions:  # forget handles of versions that may be gone
                self._open = {key: handle for key, handle in self._open.items() if key[0] != name}
                self._seen[name] = versions
            if (name, version) not in self._open:
                try:
                    self._open[(name, version)] = lance.dataset(path, version=version)
                except ValueError:
                    raise KeyError(f"version {version} of table {name} not found") from None
            return self._open[(name, version)]

    def row_offsets(self, name: str, dataset: Any, addresses: np.ndarray) -> np.ndarray:
        """Live-row offsets (positions in storage order) of rows at ``addresses``."""
        key = (name, int(dataset.version))
        with self._lock:
            if key not in self._addresses:
                every = dataset.to_table(columns=[], with_row_address=True).column("_rowaddr").to_numpy()
                order = np.argsort(every, kind="stable")
                self._addresses[key] = np.stack([every[order], order.astype(np.uint64)])
            ordered, order = self._addresses[key]
        return np.asarray(order[np.searchsorted(ordered, addresses)], dtype=np.uint64)


def _arrow_file(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def answer_query(tables: Tables, name: str, body: dict[str, Any]) -> pa.Table:
    """The rows a ``query`` body asks for, from the real table, through Lance's own engine.

    A take (``_rowoffset IN (...)``, ``_rowid IN (...)``) is Lance's scanner with that
    filter, as lancedb's engine runs it: Lance turns it into a take by offset or by
    row id (its cost is Lance's), answers in row-id order and leaves out what does not
    exist (an offset past the end, a deleted id) without an error.
    """
    dataset = tables.dataset(name, body.get("version"))
    wanted = body.get("columns")
    names = list(wanted) if isinstance(wanted, list) else list(dataset.schema.names)
    plain = [column for column in names if column not in ("_rowoffset", "_rowid")]
    predicate = body.get("filter")
    with_ids = bool(body.get("with_row_id")) or "_rowid" in names
    with_offsets = "_rowoffset" in names
    take = _TAKE.match(predicate or "")
    if take is not None:
        table = dataset.to_table(columns=plain, filter=predicate, with_row_id=with_ids)
        if with_offsets:  # only a take by offsets names them; answered ascending, those that exist
            asked = sorted({int(value) for value in re.findall(r"\d+", take.group(1))})
            live = dataset.count_rows()
            table = table.append_column("_rowoffset", pa.array([o for o in asked if o < live], pa.uint64()))
        return _order(table, names, with_ids)
    limit = min(int(body.get("k") or _MAX_K), _MAX_K)
    reverse = tables.reversed_scans  # a server whose scans come in another order than storage
    table = dataset.to_table(
        columns=plain,
        filter=predicate,
        offset=None if reverse else body.get("offset"),
        limit=None if reverse else limit,
        with_row_id=with_ids,
        with_row_address=with_offsets,
    )
    if reverse:
        start = int(body.get("offset") or 0)
        table = table.take(pa.array(np.arange(table.num_rows)[::-1])).slice(start, limit)
    if with_offsets:
        addresses = table.column("_rowaddr").to_numpy()
        table = table.drop_columns(["_rowaddr"])
        table = table.append_column("_rowoffset", pa.array(tables.row_offsets(name, dataset, addresses)))
    return _order(table, names, with_ids)


def _order(table: pa.Table, names: list[str], with_ids: bool) -> pa.Table:
    """``table`` with ``_rowid`` where the client asked for it (last when it did not name it)."""
    if with_ids and "_rowid" not in names:
        names = [*names, "_rowid"]
    return table.select([name for name in names if name in table.column_names])


class Counts:
    """Requests by route and rows answered, since the last reset; faults and latency to apply."""

    def __init__(self, latency_s: float) -> None:
        self.lock = threading.Condition()
        self.latency_s = latency_s
        self.stalled = 0
        self.faults: list[dict[str, Any]] = []
        self.reset()

    def reset(self) -> None:
        """Zero the counts (faults and latency stay)."""
        with self.lock:
            self.requests: dict[str, int] = {}
            self.rows = 0
            self.taken = 0
            self.takes = 0
            self.bodies: list[dict[str, Any]] = []

    def count(self, route: str, body: Any) -> dict[str, Any] | None:
        """Count one request; the fault it must suffer, if one is pending for its route."""
        with self.lock:
            self.requests[route] = self.requests.get(route, 0) + 1
            if isinstance(body, dict) and route == "query":
                kept = {key: value for key, value in body.items() if key != "filter"}
                take = _TAKE.match(body.get("filter") or "")
                self.bodies.append(kept | {"take": take.group(0).split()[0] if take else None})
            for fault in self.faults:
                if fault["route"] in (route, "*") and fault["count"] > 0:
                    fault["count"] -= 1
                    return dict(fault)
        return None

    def report(self) -> dict[str, Any]:
        """What was served since the last reset."""
        with self.lock:
            return {
                "requests": dict(self.requests),
                "total": sum(self.requests.values()),
                "rows": self.rows,
                "takes": self.takes,
                "taken": self.taken,
                "faults_left": sum(int(fault["count"]) for fault in self.faults),
            }


class Handler(BaseHTTPRequestHandler):
    """One connection of the stand-in (HTTP/1.1 keep-alive, as the client expects)."""

    protocol_version = "HTTP/1.1"
    server: Server
    cut = False

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def _send(
        self, status: int, payload: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.cut and payload:  # the whole length announced, half the body sent, then the socket closed
            self.wfile.write(payload[: len(payload) // 2])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        self.wfile.write(payload)

    def _json(self, status: int, value: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(value).encode(), "application/json", headers)

    def _serve(self) -> None:
        self.cut = False
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:  # read and dropped, so the client hears the answer
            while length > 0:
                length -= len(self.rfile.read(min(length, 1 << 16)) or b"x" * length)
            matched = _TABLE_ROUTE.match(self.path.split("?", 1)[0])
            with self.server.counts.lock:  # counted, never a fault's
                route = matched.group(2) if matched else self.path
                self.server.counts.requests[route] = self.server.counts.requests.get(route, 0) + 1
            self._json(413, {"message": f"request body exceeds {MAX_BODY_BYTES} bytes"})
            return
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else {}
        if self.path.startswith("/_stand_in/"):
            self._control(self.path[len("/_stand_in/") :].strip("/"), body)
            return
        counts = self.server.counts
        matched = _TABLE_ROUTE.match(self.path.split("?", 1)[0])
        route = matched.group(2) if matched else self.path
        fault = counts.count(route, body)
        if counts.latency_s:
            time.sleep(counts.latency_s)
        if fault is not None and self._suffer(fault):
            return
        if self.headers.get("x-api-key") != self.server.api_key:
            self._json(401, {"message": "invalid API key"})
            return
        database = self.headers.get("x-lancedb-database")
        if database != self.server.database:
            self._json(404, {"message": f"database {database!r} not found"})
            return
        if matched is None:
            self._json(404, {"message": f"no route {self.path}"})
            return
        try:
            self._table_route(matched.group(1), route, body)
        except KeyError as error:
            self._json(404, {"message": str(error.args[0])})
        except Exception as error:  # a bad filter or column: the client's mistake, as a server says
            self._json(400, {"message": f"{type(error).__name__}: {error}"})

    def _suffer(self, fault: dict[str, Any]) -> bool:
        """Apply ``fault``; True when the request got no real answer."""
        if fault.get("stall_s"):
            with self.server.counts.lock:
                self.server.counts.stalled += 1
                self.server.counts.lock.notify_all()
            time.sleep(float(fault["stall_s"]))
            return False
        if fault.get("drop"):
            self.close_connection = True
            self.connection.shutdown(2)
            return True
        if fault.get("cut"):
            self.cut = True
            return False
        after = fault.get("retry_after_s")
        headers = {"Retry-After": f"{after:g}"} if after is not None else None
        self._json(int(fault["status"]), {"message": "injected fault"}, headers)
        return True

    def _table_route(self, name: str, route: str, body: dict[str, Any]) -> None:
        tables = self.server.tables
        if route == "describe":
            dataset = tables.dataset(name, body.get("version"))
            from lance.schema import schema_to_json

            self._json(200, {"version": int(dataset.version), "schema": schema_to_json(dataset.schema)})
        elif route == "count_rows":
            dataset = tables.dataset(name, body.get("version"))
            self._json(200, int(dataset.count_rows(filter=body.get("predicate"))))
        elif route == "version/list":
            dataset = tables.dataset(name, None)
            versions = [
                {
                    "version": int(entry["version"]),
                    "timestamp": entry["timestamp"].isoformat() + "Z",
                    "metadata": {},
                }
                for entry in dataset.versions()
            ]
            self._json(200, {"versions": versions})
        elif route.startswith("tags/"):
            self._tags(tables.dataset(name, None), route, body)
        elif route == "query":
            table = answer_query(tables, name, body)
            with self.server.counts.lock:
                self.server.counts.rows += table.num_rows
                if _TAKE.match(body.get("filter") or ""):
                    self.server.counts.takes += 1
                    self.server.counts.taken += table.num_rows
            self._send(200, _arrow_file(table), "application/vnd.apache.arrow.file")
        else:
            self._json(404, {"message": f"the stand-in does not answer {route}"})

    def _tags(self, dataset: Any, route: str, body: dict[str, Any]) -> None:
        if route == "tags/list":
            found = dataset.tags.list()
            self._json(
                200,
                {k: {"version": v["version"], "manifestSize": v["manifest_size"]} for k, v in found.items()},
            )
            return
        if route == "tags/create":
            dataset.tags.create(body["tag"], int(body["version"]))
        elif route == "tags/delete":
            dataset.tags.delete(body["tag"])
        else:
            self._json(404, {"message": f"the stand-in does not answer {route}"})
            return
        self._json(200, {})

    def _control(self, command: str, body: dict[str, Any]) -> None:
        counts = self.server.counts
        if command == "stats":
            self._json(200, counts.report())
        elif command == "bodies":
            with counts.lock:
                self._json(200, list(counts.bodies))
        elif command == "reset":
            counts.reset()
            self._json(200, {})
        elif command == "latency":
            counts.latency_s = float(body["seconds"])
            self._json(200, {})
        elif command == "stalled":  # wait until that many requests have stalled (a fault's stall_s)
            with counts.lock:
                wanted = int(body["count"])
                counts.lock.wait_for(lambda: counts.stalled >= wanted, timeout=float(body["timeout_s"]))
                self._json(200, {"stalled": counts.stalled})
        elif command == "scan_order":  # "storage" (Lance's) or "reversed": plain queries' order
            self.server.tables.reversed_scans = body["order"] == "reversed"
            self._json(200, {})
        elif command == "clear":  # forget every pending fault
            with counts.lock:
                counts.faults = []
            self._json(200, {})
        elif command == "fault":
            with counts.lock:
                counts.faults = [fault for fault in counts.faults if fault["count"] > 0] + [body]
            self._json(200, {})
        else:
            self._json(404, {"message": f"no control {command}"})


class Server(ThreadingHTTPServer):
    """The stand-in's HTTP server: its tables, counts and the key it accepts."""

    daemon_threads = True

    def __init__(self, root: str, *, latency_s: float, api_key: str, database: str, port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), Handler)
        self.tables = Tables(root)
        self.counts = Counts(latency_s)
        self.api_key = api_key
        self.database = database


def main() -> None:
    """Serve ``--root`` until killed; print the port first."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, help="the folder of NAME.lance tables")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="delay before every answer")
    parser.add_argument("--database", default="bench", help="the database it serves (x-lancedb-database)")
    parser.add_argument("--port", type=int, default=0, help="the port (0: any free one)")
    args = parser.parse_args()
    server = Server(
        args.root,
        latency_s=args.latency_ms / 1000,
        api_key=os.environ[KEY_VARIABLE],
        database=args.database,
        port=args.port,
    )
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
