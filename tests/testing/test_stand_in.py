"""``streaming.testing.LanceDBStandIn``: what the helper itself promises its users.

What the stand-in answers is tested where it is used: the remote reads in
``tests/tables/test_remote.py`` and ``test_remote_faults.py``, the command line in
``tests/cli/test_cli_remote.py``. Here: nothing starts at import or construction,
``import streaming`` never loads the wing, the server is a process of its own with
the key in its environment only, it ends with the process that started it, and the
class has exactly the members docs/api.md lists.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import lancedb
import pyarrow as pa
import pytest
from lancedb.remote.errors import HttpError

from streaming.testing import FAST_RETRIES, LanceDBStandIn

API_PAGE = Path(__file__).resolve().parents[2] / "docs" / "api.md"
PARENT = Path(__file__).resolve().parents[1] / "procs" / "stand_in_parent.py"
KEY = "sk-stand-in-secret"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    lancedb.connect(tmp_path).create_table("train", pa.table({"id": list(range(100))}))
    return tmp_path


def children(parent: int) -> dict[int, str]:
    """The processes whose parent is ``parent``: pid -> command line."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            if entry.name.isdigit() and int(stat.rsplit(")", 1)[1].split()[1]) == parent:
                found[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError):
            continue
    return found


def servers() -> dict[int, str]:
    return {pid: line for pid, line in children(os.getpid()).items() if "streaming.testing.server" in line}


def test_import_streaming_never_loads_the_testing_wing():
    code = (
        "import sys, streaming\n"
        "for name in streaming.__all__: getattr(streaming, name)\n"
        "print(sorted(m for m in sys.modules if m.startswith('streaming.testing')))"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == "[]"


def test_importing_the_helper_loads_no_lance_and_starts_nothing():
    code = (
        "import sys, threading, streaming.testing\n"
        "print(sorted(m for m in ('lance', 'lancedb', 'pyarrow', 'numpy', 'torch') if m in sys.modules),"
        " threading.active_count())"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == "[] 1"


def test_constructing_one_starts_nothing(root):
    stand_in = LanceDBStandIn(root, api_key=KEY)
    assert not stand_in.running and not servers()
    with pytest.raises(RuntimeError, match="has not been started"):
        stand_in.host
    assert stand_in.uri == "db://bench" and stand_in.root == str(root)


@pytest.mark.parametrize(
    ("settings", "message"), [({"api_key": ""}, "api_key"), ({"database": "a/b"}, "database")]
)
def test_bad_settings_are_refused(root, settings, message):
    with pytest.raises(ValueError, match=message):
        LanceDBStandIn(root, **{"api_key": KEY, **settings})


def test_the_server_is_its_own_process_with_the_key_in_its_environment_only(root):
    with LanceDBStandIn(root, api_key=KEY, database="mine") as server:
        ((pid, command),) = servers().items()
        assert pid != os.getpid() and "-m streaming.testing.server" in command
        assert KEY not in command and KEY not in repr(server) and KEY not in str(server)
        environment = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert f"LANCEDB_STAND_IN_API_KEY={KEY}".encode() in environment
        assert server.connect().open_table("train").count_rows() == 100
        database = lancedb.connect(server.uri, api_key=KEY, host_override=server.host)
        assert database.open_table("train").count_rows("id < 10") == 10
        with pytest.raises(HttpError, match="401 Unauthorized"):
            server.connect(api_key="sk-wrong", client_config=FAST_RETRIES).open_table("train")
        other = lancedb.connect("db://bench", api_key=KEY, host_override=server.host)
        with pytest.raises(ValueError, match="was not found"):
            other.open_table("train")
        assert server.stats()["requests"]["describe"] >= 3
    assert not server.running and not servers()


def test_restart_and_stop_by_hand(root):
    server = LanceDBStandIn(root, api_key=KEY).start()
    try:
        host, (first,) = server.host, servers()
        with pytest.raises(RuntimeError, match="already running"):
            server.start()
        server.restart()
        (second,) = servers()
        assert second != first and server.host == host
        assert server.connect().open_table("train").count_rows() == 100
    finally:
        server.stop()
    server.stop()  # twice: nothing
    assert not servers()


def answers(host: str) -> bool:
    port = int(host.rsplit(":", 1)[1])
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except OSError:
        return False
    return True


def test_the_server_ends_with_the_process_that_started_it_even_killed(root):
    parent = subprocess.Popen([sys.executable, str(PARENT), str(root)], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        host = parent.stdout.readline().strip()
        (server,) = children(parent.pid)
        assert answers(host)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=30)
        parent.stdout.close()
    deadline = time.monotonic() + 30
    while answers(host) and time.monotonic() < deadline:  # polls the condition, up to a deadline
        time.sleep(0.05)
    assert not answers(host), f"the stand-in {server} outlived the process that started it"


def test_the_class_has_exactly_the_members_the_api_page_documents():
    block = API_PAGE.read_text().split("::: streaming.testing.LanceDBStandIn", 1)[1].split(":::", 1)[0]
    documented = {name.strip() for name in re.search(r"members: \[(.*)\]", block).group(1).split(",")}
    public = {name for name in dir(LanceDBStandIn) if not name.startswith("_")}
    assert public == documented, (sorted(public - documented), sorted(documented - public))
    for name in documented:
        assert getattr(LanceDBStandIn, name).__doc__, name
