"""A LanceDB server stand-in: the HTTP API of lancedb's remote client, over local Lance tables.

``python -m streaming.testing.server --root DIR`` serves every ``DIR/NAME.lance`` (the
layout of ``lancedb.connect(DIR)``) as table ``NAME`` of database ``--database``
(``bench``) on ``127.0.0.1``, to a client made with ``lancedb.connect("db://bench",
api_key=..., host_override=URL)``; the key it accepts is read from the environment
variable ``LANCEDB_STAND_IN_API_KEY``, never from its command line. It prints its port on
stdout. ``streaming.testing.LanceDBStandIn`` starts it and steers it; what it answers
comes from ``answers``, its counts and faults from ``counts``.

What it answers (the routes lancedb 0.40's Rust client sends, all ``POST``):
``describe`` (version and schema, at a version or the latest; 404 for a missing
table or version), ``count_rows``, ``query`` (``columns``, ``filter``, ``k``,
``offset``, ``with_row_id``; ``_rowoffset IN (...)`` and ``_rowid IN (...)`` are
takes, ``_rowoffset`` and ``_rowid`` can be selected), ``version/list`` and
``tags/list|create|delete``; any other route is 404. It checks the ``x-api-key``
header (401 otherwise) and the ``x-lancedb-database`` header against ``--database``
(404 otherwise), and refuses a request body over ``MAX_BODY_BYTES`` (413, the
connection closed).

Control routes (``/_stand_in/...``, never counted): ``stats`` (requests by route,
rows answered), ``bodies``, ``reset``, ``latency`` (per-request delay), ``fault`` (the
next ``count`` requests of a route answer a status, with ``Retry-After`` if asked,
stall, drop the connection unanswered, or are cut: the answer's full length announced,
half its body sent, the connection closed), ``clear``, ``stalled`` (wait until that
many requests stalled), ``scan_order`` (``reversed``: plain queries answered in reverse
storage order, as a server that scans in parallel may). Killing the process and
starting it again on the same port (``LanceDBStandIn.restart``) is the server going
away mid-epoch.

Leniencies (where a real server may differ, and what they hide):

- One process, tables on local disk: no load balancer, so no request ever meets
  another replica at another version (the client pins the version in each body).
- Errors are ``{"message": ...}`` with a status; a real server's wording differs, so
  the client never reads a message for meaning except the status.
- No authentication beyond one static key, no TLS, no rate limit of its own: 429
  and 409 come only from ``fault``.
- Closed: positions past the end and deleted row ids are left out of an answer
  silently, as Lance's engine does, so a client that does not check what it got back
  is caught; bodies are bounded; the database header is checked; 429 (with
  Retry-After) and 409 are answered on demand.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .answers import TAKE, Tables, answer_query, arrow_file, describe, tag_list, version_list
from .counts import Counts
from .standin import KEY_VARIABLE

__all__ = ["MAX_BODY_BYTES", "Handler", "Server", "main"]

_TABLE_ROUTE = re.compile(r"^/v1/table/([^/]+)/(.+?)/?$")
MAX_BODY_BYTES = 1 << 20
"""The largest request body answered (nginx's default ``client_max_body_size``); larger is 413."""


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
            self._json(200, describe(tables.dataset(name, body.get("version"))))
        elif route == "count_rows":
            dataset = tables.dataset(name, body.get("version"))
            self._json(200, int(dataset.count_rows(filter=body.get("predicate"))))
        elif route == "version/list":
            self._json(200, version_list(tables.dataset(name, None)))
        elif route.startswith("tags/"):
            self._tags(tables.dataset(name, None), route, body)
        elif route == "query":
            table = answer_query(tables, name, body)
            with self.server.counts.lock:
                self.server.counts.rows += table.num_rows
                if TAKE.match(body.get("filter") or ""):
                    self.server.counts.takes += 1
                    self.server.counts.taken += table.num_rows
            self._send(200, arrow_file(table), "application/vnd.apache.arrow.file")
        else:
            self._json(404, {"message": f"the stand-in does not answer {route}"})

    def _tags(self, dataset: Any, route: str, body: dict[str, Any]) -> None:
        if route == "tags/list":
            self._json(200, tag_list(dataset))
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


def _exit_when_stdin_closes() -> None:
    """Exit the process once stdin ends: the pipe of the process that started it closed
    (it stopped or died), so no server outlives the tests that use it."""
    sys.stdin.read()
    os._exit(0)


def main() -> None:
    """Serve ``--root`` until killed; print the port first."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, help="the folder of NAME.lance tables")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="delay before every answer")
    parser.add_argument("--database", default="bench", help="the database it serves (x-lancedb-database)")
    parser.add_argument("--port", type=int, default=0, help="the port (0: any free one)")
    parser.add_argument("--exit-with-stdin", action="store_true", help="exit when stdin ends")
    args = parser.parse_args()
    if not os.environ.get(KEY_VARIABLE):
        parser.error(f"set the API key it accepts in the environment variable {KEY_VARIABLE}")
    server = Server(
        args.root,
        latency_s=args.latency_ms / 1000,
        api_key=os.environ[KEY_VARIABLE],
        database=args.database,
        port=args.port,
    )
    if args.exit_with_stdin:
        threading.Thread(target=_exit_when_stdin_closes, daemon=True).start()
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
