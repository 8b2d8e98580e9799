"""The retry policy of ``tables/remoteretry.py``, on lancedb's own error classes and texts.

Every transport failure lancedb 0.40's client raises is retried (its ``RetryError``, and the
same text as a plain ``RuntimeError``, which a table opened at a version raises; an ``OSError``
from the network); what no retry fixes stays final, whatever its text. The end-to-end runs
against the stand-in are in ``test_remote_faults.py``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from lancedb.remote.errors import HttpError, RetryError

from streaming.tables.remoteretry import (
    BUDGET_VARIABLE,
    FINAL,
    POLICY,
    RETRIED,
    TRANSPORT_TEXTS,
    RetryPolicy,
    call,
    classify,
    current_policy,
)

DOCS = Path(__file__).parents[2] / "docs" / "remote-tables.md"
HIT = (
    "Runtime error: Hit retry limit for request_id=5f0c (request_failures=0/3, connect_failures=3/3, "
    "read_failures=0/3)"
)  # what lancedb raised as a plain RuntimeError for a pinned table's schema, with the server down


def retry_error(status: int | None = None) -> RetryError:
    error = RetryError(HIT.removeprefix("Runtime error: "), "5f0c", 0, 3, 0, 3, 3, 3, status)
    cause = "error sending request for url (http://127.0.0.1:1/v1/table/t/query/)"
    error.__cause__ = HttpError(cause, "5f0c")
    return error


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError(HIT),
        retry_error(),
        retry_error(503),
        HttpError("error sending request for url (http://h/v1/table/t/query/)", "r"),
        HttpError("Service Unavailable", "r", 503),
        HttpError("Too Many Requests", "r", 429),
        RuntimeError("Http error: (request_id=r) error decoding response body"),
        RuntimeError("lance error: LanceError(IO): connection closed before message completed"),
        RuntimeError("External error: tcp connect error: Connection refused (os error 111)"),
        OSError("object_store error: Generic HTTP error: connection reset by peer"),
        OSError("Broken pipe (os error 32)"),
        ConnectionResetError(104, "Connection reset by peer"),
        TimeoutError("operation timed out"),
        *[RuntimeError(f"Runtime error: something {words} happened") for words, _ in TRANSPORT_TEXTS],
        *[OSError(f"io error: {words.upper()}") for words, _ in TRANSPORT_TEXTS],
    ],
    ids=repr,
)
def test_every_transport_failure_is_retried(error):
    assert classify(error) == "retry"


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (HttpError("connection refused by the proxy", "r", 401), "refused"),
        (HttpError("Forbidden: connect", "r", 403), "refused"),
        (HttpError("Not Found", "r", 404), "missing"),
        (ValueError("Table 'train' was not found (connection ok)"), "missing"),
        (HttpError("Bad Request: timeout must be positive", "r", 400), "final"),
        (HttpError("Payload Too Large", "r", 413), "final"),
        (ValueError("Invalid input, timeout must be positive"), "final"),
        (RuntimeError("the LanceDB server answered 3 rows: not the rows asked for"), "final"),
        (KeyError("connection"), "final"),
        (TypeError("cannot reset a frozen object"), "final"),
    ],
    ids=repr,
)
def test_what_no_retry_fixes_stays_final(error, kind):
    assert classify(error) == kind


class Away:
    """A connection to a server that is never there (only what ``call`` asks of one)."""

    server = "http://127.0.0.1:9 (database 'bench')"
    uri = "db://bench/train"
    name = "train"

    def diagnose(self, version: int | None) -> str:
        raise AssertionError("a transport failure is never diagnosed")


def test_a_server_away_past_the_budget_is_one_error_naming_server_table_and_what_was_retried():
    attempts = []

    def refused() -> None:
        attempts.append(time.monotonic())
        raise RuntimeError(HIT) if len(attempts) % 2 else retry_error()

    policy = RetryPolicy(budget_s=0.3, first_wait_s=0.01, max_wait_s=0.05)
    began = time.monotonic()
    with pytest.raises(RuntimeError) as raised:
        call("take 8 rows", refused, Away(), policy=policy)
    took = time.monotonic() - began
    message = str(raised.value)
    assert message.startswith("the LanceDB server http://127.0.0.1:9 (database 'bench') kept failing for 0.3")
    assert "could not take 8 rows of table 'db://bench/train'" in message
    assert f"{len(attempts)} attempts failed ('hit retry limit' x{len(attempts)})" in message
    assert BUDGET_VARIABLE in message and "resume from the last checkpoint" in message
    assert 0.3 <= took < 0.3 + 1.0 and len(attempts) > 3


def test_the_budget_comes_from_the_environment_and_a_bad_value_is_refused():
    assert current_policy({}) is POLICY and POLICY.budget_s == 32
    assert current_policy({BUDGET_VARIABLE: "90"}).budget_s == 90
    assert current_policy({BUDGET_VARIABLE: " 2.5 "}).budget_s == 2.5
    for bad in ("0", "-1", "soon", "inf", "nan"):
        refused = rf"{BUDGET_VARIABLE}='{bad}' is not a number of seconds above 0"
        with pytest.raises(ValueError, match=refused):
            current_policy({BUDGET_VARIABLE: bad})


def test_docs_print_the_whole_policy():
    """docs/remote-tables.md lists every row of RETRIED, TRANSPORT_TEXTS and FINAL."""
    text = DOCS.read_text()
    for failure, _ in RETRIED + FINAL:
        assert f"| {failure}" in text, failure
    for words, _ in TRANSPORT_TEXTS:
        assert f"| `{words}` |" in text, words
    assert BUDGET_VARIABLE in text
