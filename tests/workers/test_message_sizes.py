"""How a worker groups its shares into DataLoader messages (``workers.cut.grouped``)."""

from __future__ import annotations

import numpy as np

from streaming.workers import cut


def pieces(count: int, *, rows: int, columnar: bool) -> list[cut.Share]:
    return [cut.Share([index], np.arange(rows), 2 * rows, columnar=columnar) for index in range(count)]


def sizes(sent: list[list[cut.Share]]) -> list[int]:
    return [len(message) for message in sent]


def bundled(given: list[cut.Share], *, row_bytes: float) -> list[list[cut.Share]]:
    reports = iter(range(10_000))
    return list(cut.grouped(iter(given), report=lambda: next(reports), row_bytes=lambda: row_bytes))


def test_messages_grow_to_their_bound_and_carry_every_slice_once_with_its_report():
    given = pieces(100, rows=128, columnar=True)
    sent = bundled(given, row_bytes=500.0)
    assert sizes(sent) == [1, 2, 4, 8, 16, 32, 32, 5]  # 32 slices of 128 rows: MESSAGE_ROWS
    flat = [piece for message in sent for piece in message]
    assert [piece.items for piece in flat] == [piece.items for piece in given]
    assert [piece.report for piece in flat] == list(range(100))  # the report as each slice ended


def test_slices_of_samples_travel_in_smaller_messages():
    """A transform's output may be far larger than the rows it read: fewer rows per message."""
    sent = bundled(pieces(40, rows=128, columnar=False), row_bytes=500.0)
    assert sizes(sent) == [1, 2, 4, 8, 8, 8, 8, 1]  # 8 slices of 128 rows: SAMPLE_MESSAGE_ROWS


def test_rows_as_wide_as_images_go_one_slice_a_message():
    sent = bundled(pieces(6, rows=128, columnar=True), row_bytes=150_000.0)  # 19 MB a slice as read
    assert sizes(sent) == [1] * 6
