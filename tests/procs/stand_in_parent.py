"""A process that starts a LanceDB stand-in over ``argv[1]``, prints where it listens, and
waits to be killed (``tests/testing/test_stand_in.py`` kills it and checks the server ends)."""

from __future__ import annotations

import sys
import threading

from streaming.testing import LanceDBStandIn

if __name__ == "__main__":
    server = LanceDBStandIn(sys.argv[1], api_key="sk-parent").start()
    print(server.host, flush=True)
    threading.Event().wait()  # until SIGKILL: no stop(), no with block to end the server
