"""Testing helpers: run your pipeline offline, against stand-ins of the services it reads.

``LanceDBStandIn`` serves the Lance tables of a local folder through the HTTP API of a
LanceDB server (Cloud or Enterprise), in a process of its own, so that code written
for ``lancedb.connect("db://...")`` and a ``RemoteTable`` runs in a test or on a laptop
without a network, an account or a key of a real server::

    from streaming.testing import LanceDBStandIn

    with LanceDBStandIn(folder, api_key="sk-test") as server:
        table = server.connect().open_table("training")  # folder/training.lance

It is for tests only: not a LanceDB server to deploy (one process, no TLS, one static
key, reads only). Nothing of the package imports this wing, and importing it starts
nothing and loads neither Lance nor lancedb (``connect`` imports lancedb).
"""

from __future__ import annotations

from .standin import FAST_RETRIES, LanceDBStandIn

__all__ = ["FAST_RETRIES", "LanceDBStandIn"]
