"""What happens when a LanceDB server fails a request: the retry policy, in one place.

Every request this package sends to a LanceDB server (``read/remote.py``) goes
through ``call``. A failure is either *retried* (the request is sent again after a
wait; a take is idempotent and its rows are used only once the whole answer
arrived and was checked, so nothing is lost or repeated) or *final* (raised at once,
as the error that names the fix). ``RETRIED`` and ``FINAL`` list both, with the
reason; docs/remote-tables.md prints the same table.

lancedb's own client retries first (its ``retry_config``: 409, 429 and 5xx answers,
and failed connects, 3 times by default with a short backoff; it does not read
``Retry-After``). It does not retry a connection dropped after the request was sent
(``HttpError`` "error sending request") nor an answer cut short ("error decoding
response body"); those reach this module and are retried here, like what outlasts
the client's retries (``RetryError``).

A 404 is answered the same way for a missing table and for a version that is gone
(lancedb says "Table 'NAME' was not found" for both when a query meets it), so it is
told apart by asking the server what it has (``Connection.diagnose``): the table's
newest version and its list of versions.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import SnapshotGoneError

__all__ = ["FINAL", "POLICY", "RETRIED", "RetryPolicy", "call", "classify"]

_LOG = logging.getLogger("streaming")

RETRIED = (
    ("HTTP 500-599", "the server or a proxy failed or is restarting"),
    ("HTTP 408, timeouts", "the answer did not come in time (the client's timeout_config)"),
    ("HTTP 409", "a conflicting commit on the server; the read is the same afterwards"),
    ("HTTP 429", "rate limited: waits at least RATE_LIMITED_WAIT_S, longer when the message names a wait"),
    ("dropped connection", "no status: 'error sending request', a refused or reset connection"),
    ("answer cut short", "no status: 'error decoding response body', a body shorter than announced"),
    ("client retries used up", "lancedb's RetryError after its own retries of the above"),
)
"""Failures sent again, with why a later attempt may succeed."""

FINAL = (
    ("HTTP 401, 403", "PermissionError: the API key was refused; pass a valid api_key"),
    ("missing table", "ValueError: check the table's name and the database of lancedb.connect"),
    ("missing version", "SnapshotGoneError: the pinned version was cleaned up; tag_snapshot=True keeps it"),
    ("any other 4xx", "raised as lancedb gave it: the request itself is wrong, a retry sends it again"),
)
"""Failures raised at once, as the error that names the fix."""


@dataclass(frozen=True)
class RetryPolicy:
    """How long a retried failure is retried: ``attempts`` more times, waits doubling from
    ``first_wait_s`` up to ``max_wait_s`` (about 32 s of waiting in all by default)."""

    attempts: int = 8
    first_wait_s: float = 0.25
    max_wait_s: float = 8.0
    rate_limited_wait_s: float = 1.0

    def wait(self, attempt: int, error: BaseException) -> float:
        """Seconds to wait before attempt ``attempt + 1`` after ``error``."""
        wait = min(self.max_wait_s, self.first_wait_s * 2**attempt)
        if _status(error) == 429:
            named = re.search(r"retry[- ]after\D{0,4}(\d+(?:\.\d+)?)", str(error), re.IGNORECASE)
            floor = float(named.group(1)) if named else self.rate_limited_wait_s
            wait = max(wait, min(floor, 4 * self.max_wait_s))
        return wait


POLICY = RetryPolicy()
RATE_LIMITED_WAIT_S = POLICY.rate_limited_wait_s


class Diagnosable(Protocol):
    """What ``call`` needs of a connection: its URI and name, and what the server has."""

    @property
    def uri(self) -> str:
        """The table's URI, without secrets."""

    @property
    def name(self) -> str:
        """The table's name on the server."""

    def diagnose(self, version: int | None) -> str:
        """``"table"`` when the table is missing, ``"version"`` when ``version`` is, else ``""``."""


def _status(error: BaseException) -> int | None:
    status = getattr(error, "status_code", None)
    if isinstance(status, int):
        return status
    cause = error.__cause__  # a RetryError's last HttpError
    status = getattr(cause, "status_code", None)
    return status if isinstance(status, int) else None


def classify(error: BaseException) -> str:
    """``"retry"``, ``"refused"`` (401/403), ``"missing"`` (a 404) or ``"final"``."""
    from lancedb.remote.errors import HttpError, RetryError

    status = _status(error)
    if status in (401, 403):
        return "refused"
    if status == 404 or (isinstance(error, ValueError) and "was not found" in str(error)):
        return "missing"
    if isinstance(error, RetryError | TimeoutError | ConnectionError):
        return "retry"
    if status is not None:
        return "retry" if status >= 500 or status in (408, 409, 429) else "final"
    if isinstance(error, HttpError):  # no status: no complete answer (dropped, cut short, timed out)
        return "retry"
    text = str(error).lower()
    transport = ("timed out", "timeout", "connection", "error sending request", "error decoding")
    return "retry" if isinstance(error, RuntimeError) and any(word in text for word in transport) else "final"


def call(
    what: str,
    action: Callable[[], Any],
    connection: Diagnosable,
    *,
    version: int | None = None,
    policy: RetryPolicy = POLICY,
) -> Any:
    """``action()``, retried by ``policy`` as ``RETRIED`` says; a final failure raised as ``FINAL`` says."""
    for attempt in range(policy.attempts + 1):
        try:
            return action()
        except Exception as error:
            kind = classify(error)
            if kind != "retry":
                raise _final(error, kind, what, connection, version) from None
            if attempt == policy.attempts:
                raise RuntimeError(
                    f"could not {what} on the LanceDB server after {attempt + 1} attempts: {error}; the "
                    "server keeps failing, check its health (the run can resume from its last checkpoint)"
                ) from None
            wait = policy.wait(attempt, error)
            status = _status(error)
            said = f"HTTP {status}: {error}" if status is not None else str(error)
            _LOG.warning("LanceDB server: could not %s (%s); retrying in %.2f s", what, said, wait)
            time.sleep(wait)
    raise AssertionError("unreachable")  # pragma: no cover


def _final(
    error: BaseException, kind: str, what: str, connection: Diagnosable, version: int | None
) -> BaseException:
    """The error to raise for a failure no retry can get past, naming the fix."""
    if kind == "refused":
        return PermissionError(
            f"the LanceDB server refused the API key (HTTP {_status(error)}) when asked to {what}; pass a "
            "valid api_key to lancedb.connect (or a connection_factory that opens the table with one)"
        )
    if kind != "missing":
        return error
    found = _diagnosed(connection, version)
    if found == "":  # the server has both: this 404 is about something else
        return error
    if found == "version":
        return SnapshotGoneError(
            f"could not {what}: the server no longer has version {version} of table {connection.uri!r} (it "
            "was cleaned up), so this run or checkpoint cannot go on exactly; build datasets with "
            "tag_snapshot=True (or tag the version: table.tags.create(name, version)) so the server keeps "
            "the versions you may resume from"
        )
    return ValueError(
        f"could not {what}: the LanceDB server has no table {connection.name!r} ({error}); check the "
        "table's name and the database of lancedb.connect"
    )


def _diagnosed(connection: Diagnosable, version: int | None) -> str:
    try:
        return connection.diagnose(version)
    except Exception:  # the server cannot say either: report what the first answer said
        return "table"
