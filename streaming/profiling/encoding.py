"""Blob encoding, tried where it can be simulated: two local copies of the first rows of
a Lance table (local or on object storage), one stored as the table is and one with
its inline binary columns blob-encoded, each read with the user's settings; the copy
as stored runs three times (its noise), the blob-encoded one once.

A LanceDB server's table is not tried (its storage is the server's); nor is a table
whose rows are small (below ``LARGE_ROW``), where blob encoding has nothing to save.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

from . import trials
from .measure import Measured

__all__ = ["LARGE_ROW", "blob_candidate", "try_blob_encoding"]

LARGE_ROW = 64 * 1024
"""Bytes per row from which inline binary columns are worth a blob-encoded try."""
COPY_BYTES = 512 * 2**20
"""The most bytes a copy holds (fewer rows for larger ones)."""


def blob_candidate(columns: tuple[str, ...]) -> trials.Candidate:
    """The change: store ``columns`` with ``lance-encoding:blob``."""
    return trials.Candidate(
        {"blob_encoding": ", ".join(columns)},
        "blobs read in batched reads of their own, memory bounded by the windows",
        "measured on two local copies of the first rows, one as stored and one blob-encoded; write "
        "the table again with lance-encoding:blob on these columns (docs/multimodal.md)",
    )


def worth_trying(*, kind: str, columns: tuple[str, ...], bytes_per_row: float) -> bool:
    """A Lance table (not a server's) with inline binary columns and large rows."""
    return kind in ("local", "bucket") and bool(columns) and bytes_per_row >= LARGE_ROW


def try_blob_encoding(
    handle: Any,
    *,
    columns: tuple[str, ...],
    rows: int,
    bytes_per_row: float,
    run: Callable[[str], Measured],
) -> tuple[trials.Candidate, Measured | BaseException, trials.Noise | None]:
    """Write the two copies (``rows`` rows, at most ``COPY_BYTES``), ``run`` each (three
    times the copy as stored); the candidate, the blob copy's run and the plain copy's noise."""
    from ..tables.copies import write_copy

    candidate = blob_candidate(columns)
    folder = tempfile.mkdtemp(prefix="lance-streaming-blobs-")
    try:
        rows = max(1, min(rows, int(COPY_BYTES // max(1.0, bytes_per_row))))
        plain = write_copy(handle, os.path.join(folder, "plain.lance"), rows=rows)
        blob = write_copy(handle, os.path.join(folder, "blob.lance"), rows=rows, blob_columns=columns)
        stored = [run(plain)]
        tried = run(blob)
        stored += [run(plain), run(plain)]
        return candidate, tried, trials.noise(stored)
    except Exception as error:
        return candidate, error, None
    finally:
        shutil.rmtree(folder, ignore_errors=True)
