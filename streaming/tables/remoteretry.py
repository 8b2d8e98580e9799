"""What happens when a LanceDB server fails a request: the retry policy, in one place.

Every request this package sends to a LanceDB server (``tables/remote.py``) goes
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
the client's retries: its ``RetryError``, and the same text ("Hit retry limit ...")
raised as a plain ``RuntimeError``, which lancedb 0.40 does for a table opened at a
version (its schema and queries). A failure with no status is told by its text, as
``TRANSPORT_TEXTS`` lists; that table is the whole of it.

Retrying stops once the server has failed for ``RetryPolicy.budget_s`` seconds (32 s
by default, ``LANCE_STREAMING_REMOTE_RETRY_S`` sets another): then one ``RuntimeError``
names the server, the table, what was retried and for how long.

A 404 is answered the same way for a missing table and for a version that is gone
(lancedb says "Table 'NAME' was not found" for both when a query meets it), so it is
told apart by asking the server what it has (``Connection.diagnose``): the table's
newest version and its list of versions.
"""

from __future__ import annotations

import logging
import math
import os
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from ..errors import SnapshotGoneError

__all__ = [
    "BUDGET_VARIABLE",
    "FINAL",
    "POLICY",
    "RETRIED",
    "TRANSPORT_TEXTS",
    "RetryPolicy",
    "call",
    "classify",
    "current_policy",
    "transport_text",
]

_LOG = logging.getLogger("streaming")

RETRIED = (
    ("HTTP 500-599", "the server or a proxy failed or is restarting"),
    ("HTTP 408, timeouts", "the answer did not come in time (the client's timeout_config)"),
    ("HTTP 409", "a conflicting commit on the server; the read is the same afterwards"),
    ("HTTP 429", "rate limited: waits at least RATE_LIMITED_WAIT_S, longer when the message names a wait"),
    ("dropped connection", "no status: 'error sending request', a refused or reset connection"),
    ("answer cut short", "no status: 'error decoding response body', a body shorter than announced"),
    (
        "client retries used up",
        "lancedb's RetryError, or its text in a plain RuntimeError ('Hit retry limit')",
    ),
    ("transport text", "a RuntimeError or OSError with no status whose text names one of TRANSPORT_TEXTS"),
)
"""Failures sent again, with why a later attempt may succeed."""

TRANSPORT_TEXTS = (
    (
        "hit retry limit",
        "lancedb's retries used up: its RetryError, or its text in a plain RuntimeError",
    ),
    ("error sending request", "no answer: the connection was refused, reset or closed before one came"),
    ("error decoding response body", "an answer cut short: fewer bytes than announced"),
    ("request or response body error", "the body could not be sent or read to its end"),
    ("connection closed before message completed", "the server closed the connection mid-answer"),
    ("connect", "a failed connect: 'tcp connect error', 'connection refused', 'connection aborted'"),
    ("timed out", "'operation timed out', 'request timed out': no answer in time"),
    ("timeout", "a timeout of the client's timeout_config"),
    ("reset", "'connection reset by peer', a stream reset by the server or a proxy"),
    ("broken pipe", "the connection broke while the request was being written"),
    ("unexpected eof", "the connection ended in the middle of an answer"),
    ("dns error", "the server's name did not resolve (a resolver that is restarting)"),
    ("network unreachable", "no route to the server for now"),
)
"""Words (lower case) that make a ``RuntimeError`` or ``OSError`` without an HTTP status a
transport failure, retried, with where the text comes from (lancedb 0.40's Rust client:
reqwest, hyper and the operating system). Checked after the statuses and the missing
table, so a 401, 403 or 404 is never retried whatever its text says."""

FINAL = (
    ("HTTP 401, 403", "PermissionError: the API key was refused; pass a valid api_key"),
    ("missing table", "ValueError: check the table's name and the database of lancedb.connect"),
    ("missing version", "SnapshotGoneError: the pinned version was cleaned up; tag_snapshot=True keeps it"),
    ("any other 4xx", "raised as lancedb gave it: the request itself is wrong, a retry sends it again"),
    ("any other error", "raised as it came: nothing in it says the server or the network failed"),
)
"""Failures raised at once, as the error that names the fix."""

BUDGET_VARIABLE = "LANCE_STREAMING_REMOTE_RETRY_S"
"""The environment variable that sets ``RetryPolicy.budget_s`` (seconds) for every process."""


@dataclass(frozen=True)
class RetryPolicy:
    """How long a retried failure is retried: until the server has failed for ``budget_s``
    seconds (from the start of the first failed attempt), with waits doubling from
    ``first_wait_s`` up to ``max_wait_s`` in between. The error comes at most one attempt
    (lancedb's own retries, about a second by default) after the budget."""

    budget_s: float = 32.0
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


def current_policy(environ: Mapping[str, str] = os.environ) -> RetryPolicy:
    """``POLICY``, with the budget ``LANCE_STREAMING_REMOTE_RETRY_S`` sets (read at each request,
    so worker processes, which get the trainer's environment, follow it too)."""
    text = environ.get(BUDGET_VARIABLE, "").strip()
    if not text:
        return POLICY
    try:
        budget = float(text)
    except ValueError:
        budget = math.nan
    if not (math.isfinite(budget) and budget > 0):
        raise ValueError(
            f"{BUDGET_VARIABLE}={text!r} is not a number of seconds above 0; set it to how long a LanceDB "
            f"server may fail before the run stops (default {POLICY.budget_s:g}), or unset it"
        )
    return replace(POLICY, budget_s=budget)


class Diagnosable(Protocol):
    """What ``call`` needs of a connection: its server, URI and name, and what the server has."""

    @property
    def server(self) -> str:
        """The server, as an error names it (its address or database; never a secret)."""

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


def transport_text(error: BaseException) -> str | None:
    """The entry of ``TRANSPORT_TEXTS`` that ``error``'s text (or its cause's) names, if any."""
    texts = [str(error).lower()]
    if error.__cause__ is not None:
        texts.append(str(error.__cause__).lower())
    return next((words for words, _ in TRANSPORT_TEXTS if any(words in text for text in texts)), None)


def classify(error: BaseException) -> str:
    """``"retry"``, ``"refused"`` (401/403), ``"missing"`` (a 404) or ``"final"``, as ``RETRIED``,
    ``TRANSPORT_TEXTS`` and ``FINAL`` say, in that order of the checks below."""
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
    if isinstance(error, RuntimeError | OSError) and transport_text(error) is not None:
        return "retry"
    return "final"


def call(
    what: str,
    action: Callable[[], Any],
    connection: Diagnosable,
    *,
    version: int | None = None,
    policy: RetryPolicy | None = None,
) -> Any:
    """``action()``, retried by ``policy`` (default: ``current_policy()``) as ``RETRIED`` says; a
    final failure raised as ``FINAL`` says; a server failing past the budget ends with one
    ``RuntimeError`` naming the server, the table, what was retried and for how long."""
    policy = policy or current_policy()
    failures: list[str] = []
    first_failed: float | None = None
    while True:
        began = time.monotonic()
        try:
            return action()
        except Exception as error:
            kind = classify(error)
            if kind != "retry":
                raise _final(error, kind, what, connection, version) from None
            first_failed = began if first_failed is None else first_failed
            failures.append(_label(error))
            spent = time.monotonic() - first_failed
            if spent >= policy.budget_s:
                raise _gone(error, what, connection, failures, spent, policy) from None
            wait = min(policy.wait(len(failures) - 1, error), policy.budget_s - spent)
            status = _status(error)
            said = f"HTTP {status}: {error}" if status is not None else str(error)
            _LOG.warning(
                "LanceDB server %s: could not %s (%s); retrying in %.2f s (failing for %.1f s, budget %g s)",
                connection.server,
                what,
                said,
                wait,
                spent,
                policy.budget_s,
            )
            time.sleep(wait)


def _label(error: BaseException) -> str:
    """A failure in a few words: its HTTP status, else the transport text it names."""
    status = _status(error)
    if status is not None:
        return f"HTTP {status}"
    return f"'{transport_text(error) or type(error).__name__}'"


def _gone(
    error: BaseException,
    what: str,
    connection: Diagnosable,
    failures: list[str],
    spent: float,
    policy: RetryPolicy,
) -> RuntimeError:
    """The one error of a server that kept failing past the budget."""
    table = "" if connection.uri in what else f" of table {connection.uri!r}"
    kinds = ", ".join(f"{label} x{failures.count(label)}" for label in dict.fromkeys(failures))
    return RuntimeError(
        f"the LanceDB server {connection.server} kept failing for {spent:.1f} s (the retry budget is "
        f"{policy.budget_s:g} s): could not {what}{table}; {len(failures)} attempts "
        f"failed ({kinds}); the last: {error}. Check that the server is up and reachable, then resume "
        f"from the last checkpoint (the loader's state counts only what the loop got, so nothing is "
        f"lost or repeated); set {BUDGET_VARIABLE} to wait longer"
    )


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
