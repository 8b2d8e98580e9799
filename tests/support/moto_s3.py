"""moto's S3-compatible server on 127.0.0.1 for the tests: one bucket, and the storage
options Lance needs to reach it (a thread of the test process; ``start()`` waits)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import boto3
from moto.server import ThreadedMotoServer


@contextmanager
def s3_server(bucket: str, *, key_id: str, secret: str) -> Iterator[dict[str, str]]:
    """Serve S3 on a free port with ``bucket`` made; yield Lance's ``storage_options``."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        options = {
            "aws_access_key_id": key_id,
            "aws_secret_access_key": secret,
            "aws_endpoint": f"http://{host}:{port}",
            "aws_region": "us-east-1",
            "allow_http": "true",
        }
        boto3.client(
            "s3",
            endpoint_url=options["aws_endpoint"],
            aws_access_key_id=key_id,
            aws_secret_access_key=secret,
            region_name="us-east-1",
        ).create_bucket(Bucket=bucket)
        yield options
    finally:
        server.stop()
