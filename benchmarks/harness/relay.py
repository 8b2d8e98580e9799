"""A delaying HTTP relay in front of an S3-compatible server, in a process of its own.

    python -m benchmarks.harness.relay --upstream 127.0.0.1:PORT [--delay-ms 25]

It prints the port it listens on (127.0.0.1) and relays every request to the
upstream server after ``--delay-ms`` milliseconds, as an object store's round trip
would cost. It counts what went through: requests (by method), response bytes,
the most requests in flight at once and the mean in flight while any was.

Control paths, answered by the relay itself:

- ``GET /__relay__/stats``: the counts as JSON;
- ``POST /__relay__/reset``: zero the counts;
- ``POST /__relay__/delay/MS``: change the delay.

Each request goes upstream on a new connection (``Connection: close``) and its
response is read whole, then sent to the client with a ``Content-Length``, so the
client's connection stays open whatever the upstream does.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from dataclasses import asdict, dataclass, field

_CONTROL = "/__relay__/"
_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection"}


@dataclass
class Counts:
    """What went through the relay since the last reset."""

    requests: int = 0
    methods: dict[str, int] = field(default_factory=dict)
    response_bytes: int = 0
    max_in_flight: int = 0
    in_flight: int = 0
    busy_s: float = 0.0
    in_flight_s: float = 0.0
    _since: float = field(default_factory=time.perf_counter, repr=False)

    def _tick(self) -> None:
        now = time.perf_counter()
        if self.in_flight:
            self.busy_s += now - self._since
            self.in_flight_s += self.in_flight * (now - self._since)
        self._since = now

    def start(self, method: str) -> None:
        """A request went out."""
        self._tick()
        self.requests += 1
        self.methods[method] = self.methods.get(method, 0) + 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def finish(self, nbytes: int) -> None:
        """A response of ``nbytes`` body bytes came back."""
        self._tick()
        self.in_flight -= 1
        self.response_bytes += nbytes

    def report(self) -> dict[str, object]:
        """The counts, with the mean number in flight while any request was."""
        self._tick()
        values = {key: value for key, value in asdict(self).items() if not key.startswith("_")}
        values["mean_in_flight"] = self.in_flight_s / self.busy_s if self.busy_s else 0.0
        return values


class Relay:
    """The relay's state: upstream address, delay, counts."""

    def __init__(self, upstream: tuple[str, int], delay_s: float) -> None:
        self.upstream = upstream
        self.delay_s = delay_s
        self.counts = Counts()
        self.log = open(os.environ["RELAY_LOG"], "a") if os.environ.get("RELAY_LOG") else None  # noqa: SIM115

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Answer the requests of one client connection until it closes."""
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                method, path, headers = _parse_head(head)
                if self.log is not None and not path.startswith(_CONTROL):
                    agent = headers.get("user-agent", "").replace(" ", "_")
                    print(method, path, agent, headers.get("range", ""), file=self.log, flush=True)
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                if path.startswith(_CONTROL):
                    status, reply_headers, reply = self._control(method, path)
                else:
                    status, reply_headers, reply = await self._forward(head, body, method)
                writer.write(_response_head(status, reply_headers, len(reply)) + reply)
                await writer.drain()
        finally:
            writer.close()

    def _control(self, method: str, path: str) -> tuple[bytes, list[tuple[str, str]], bytes]:
        command = path[len(_CONTROL) :]
        if method == "POST" and command == "reset":
            self.counts = Counts()
        elif method == "POST" and command.startswith("delay/"):
            self.delay_s = float(command.split("/", 1)[1]) / 1000
        elif not (method == "GET" and command == "stats"):
            return b"404 Not Found", [], b""
        reply = json.dumps({**self.counts.report(), "delay_ms": self.delay_s * 1000}).encode()
        return b"200 OK", [("Content-Type", "application/json")], reply

    async def _forward(
        self, head: bytes, body: bytes, method: str
    ) -> tuple[bytes, list[tuple[str, str]], bytes]:
        counts = self.counts
        counts.start(method)
        nbytes = 0
        try:
            await asyncio.sleep(self.delay_s)
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.upstream)
            upstream_writer.write(_close_connection(head) + body)
            await upstream_writer.drain()
            raw = await upstream_reader.read()
            upstream_writer.close()
            status, headers, reply = _parse_response(raw, method)
            nbytes = len(reply)
            return status, headers, reply
        finally:
            counts.finish(nbytes)


def _parse_head(head: bytes) -> tuple[str, str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    return method, path, headers


def _close_connection(head: bytes) -> bytes:
    """The request head with ``Connection: close`` instead of any connection header."""
    lines = head.decode("latin-1").split("\r\n")
    kept = [
        line
        for line in lines[1:]
        if line and line.split(":", 1)[0].strip().lower() not in _HOP - {"content-length"}
    ]
    return "\r\n".join([lines[0], *kept, "Connection: close", "", ""]).encode("latin-1")


def _parse_response(raw: bytes, method: str) -> tuple[bytes, list[tuple[str, str]], bytes]:
    """(status, end-to-end headers, body) of a whole upstream response."""
    head, _, rest = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = lines[0].split(" ", 1)[1].encode("latin-1")
    headers = [
        (name.strip(), value.strip())
        for name, value in (line.split(":", 1) for line in lines[1:] if ":" in line)
    ]
    fields = {name.lower(): value for name, value in headers}
    if fields.get("transfer-encoding", "").lower() == "chunked":
        rest = _unchunk(rest)
    elif "content-length" in fields:
        rest = rest[: int(fields["content-length"])]
    if method == "HEAD":
        length = fields.get("content-length", "0")
        kept = [(name, value) for name, value in headers if name.lower() not in _HOP]
        return status, [*kept, ("Content-Length", length)], b""
    return status, [(name, value) for name, value in headers if name.lower() not in _HOP], rest


def _unchunk(data: bytes) -> bytes:
    out, position = bytearray(), 0
    while True:
        end = data.index(b"\r\n", position)
        size = int(data[position:end].split(b";")[0], 16)
        if size == 0:
            return bytes(out)
        out += data[end + 2 : end + 2 + size]
        position = end + 4 + size


def _response_head(status: bytes, headers: list[tuple[str, str]], length: int) -> bytes:
    lines = [b"HTTP/1.1 " + status]
    lines += [f"{name}: {value}".encode("latin-1") for name, value in headers]
    if not any(name.lower() == "content-length" for name, _ in headers):
        lines.append(f"Content-Length: {length}".encode("latin-1"))
    return b"\r\n".join([*lines, b"", b""])


async def _main(upstream: tuple[str, int], delay_s: float, port: int) -> None:
    relay = Relay(upstream, delay_s)
    server = await asyncio.start_server(relay.serve, "127.0.0.1", port, limit=1 << 20)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    """Parse the command line and relay until killed."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.harness.relay", description=__doc__)
    parser.add_argument("--upstream", required=True, help="HOST:PORT of the S3-compatible server")
    parser.add_argument("--delay-ms", type=float, default=25.0, help="added to every request (25)")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (0: any free one)")
    args = parser.parse_args()
    host, port = args.upstream.rsplit(":", 1)
    asyncio.run(_main((host, int(port)), args.delay_ms / 1000, args.port))


if __name__ == "__main__":
    main()
