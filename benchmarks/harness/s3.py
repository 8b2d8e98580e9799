"""moto's S3 server and the delaying relay, each in a process of its own, for benchmarks.

The server and the relay must not share the GIL with the loader they serve (an
in-process ``ThreadedMotoServer`` slows the loader and distorts every figure).
Tables are written straight to the server; readers go through the relay, whose
counts say how many requests and bytes a reader needed and how many it kept in
flight.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

BUCKET = "bench"
_KEYS = {
    "aws_access_key_id": "BENCHKEYID",
    "aws_secret_access_key": "bench-secret",
    "aws_region": "us-east-1",
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_until_up(endpoint: str, process: subprocess.Popen[Any], what: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(endpoint, timeout=1).close()
            return
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start") from None
            time.sleep(0.1)


@dataclass(frozen=True)
class Store:
    """A running server and relay: storage options straight to the server and through the relay."""

    server_endpoint: str
    relay_endpoint: str

    def options(self, *, relayed: bool) -> dict[str, str]:
        """Lance ``storage_options`` for the server (``relayed=False``) or through the relay."""
        endpoint = self.relay_endpoint if relayed else self.server_endpoint
        return {**_KEYS, "aws_endpoint": endpoint, "allow_http": "true"}

    def _control(self, command: str, method: str) -> dict[str, Any]:
        request = urllib.request.Request(f"{self.relay_endpoint}/__relay__/{command}", method=method)
        with urllib.request.urlopen(request, timeout=10) as reply:
            result: dict[str, Any] = json.loads(reply.read())
        return result

    def set_delay(self, milliseconds: float) -> None:
        """Add ``milliseconds`` to every relayed request from now on."""
        self._control(f"delay/{milliseconds:g}", "POST")

    def reset(self) -> None:
        """Zero the relay's counts."""
        self._control("reset", "POST")

    def stats(self) -> dict[str, Any]:
        """The relay's counts since the last reset (control requests not counted)."""
        return self._control("stats", "GET")


@contextlib.contextmanager
def moto_server(log: IO[str]) -> Iterator[str]:
    """moto's S3 server on a free port of 127.0.0.1, in a process of its own; yields its URL."""
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=log
    )
    try:
        endpoint = f"http://127.0.0.1:{port}"
        _wait_until_up(endpoint, server, "moto's server")
        yield endpoint
    finally:
        server.kill()
        server.wait()


def make_bucket(endpoint: str, bucket: str, options: dict[str, str]) -> None:
    """Create ``bucket`` on the server at ``endpoint`` with the keys in ``options``."""
    import boto3

    boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=options["aws_access_key_id"],
        aws_secret_access_key=options["aws_secret_access_key"],
        region_name=options.get("aws_region", "us-east-1"),
    ).create_bucket(Bucket=bucket)


@contextlib.contextmanager
def started_relay(
    server_endpoint: str, *, log: IO[str] | None = None, env: dict[str, str] | None = None
) -> Iterator[str]:
    """A relay (no delay yet) in front of the server at ``server_endpoint``, in a process of
    its own; yields its URL and stops it at the end (``env``: the relay's environment)."""
    upstream = server_endpoint.rsplit("/", 1)[1]
    relay = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.harness.relay", "--upstream", upstream, "--delay-ms", "0"],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        env=env,
    )
    try:
        assert relay.stdout is not None
        yield f"http://127.0.0.1:{int(relay.stdout.readline())}"
    finally:
        relay.terminate()
        relay.wait(timeout=30)


@contextlib.contextmanager
def running_store(log_path: str) -> Iterator[Store]:
    """Start moto's server and a relay (no delay yet), make the bucket, stop both at the end."""
    with open(log_path, "w") as log, moto_server(log) as endpoint, started_relay(endpoint, log=log) as relay:
        store = Store(endpoint, relay)
        make_bucket(endpoint, BUCKET, _KEYS)
        yield store
