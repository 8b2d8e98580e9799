"""The ledger's cheap commit decides boundaries exactly as the full check does (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.core.ledger import Ledger
from streaming.core.progress import SplitProgress

SPLITS = 6
TOTAL = 12

# One step: ("commit", group, advance per split, extra positions) or ("own", splits, cycles):
# this process's own iterator moving the cursor between two commits.
commit_step = st.tuples(
    st.just("commit"), st.integers(0, 2), st.integers(0, 5), st.integers(0, 2), st.booleans()
)
own_step = st.tuples(st.just("own"), st.integers(0, 2), st.integers(1, 3), st.integers(0, 0), st.booleans())


@settings(max_examples=300, deadline=None)
@given(
    owned=st.lists(st.integers(0, SPLITS - 1), min_size=1, max_size=SPLITS, unique=True),
    start=st.lists(st.integers(0, TOTAL), min_size=SPLITS, max_size=SPLITS),
    by_samples=st.booleans(),
    steps=st.lists(st.one_of(commit_step, own_step), max_size=40),
)
def test_commit_keeps_the_boundary_the_full_check_finds(owned, start, by_samples, steps):
    """After every commit, ``boundary`` is the cursor's progress when ``at_boundary()``
    holds, else the boundary before it: what recomputing over every split gives."""
    ledger = Ledger(owned)
    progress = [SplitProgress(count, count) for count in start]
    ledger.restart(progress, total=TOTAL, by_samples=by_samples)
    expected = tuple(progress)
    assert ledger.boundary == expected
    for kind, group, step, extra, foreign in steps:
        splits = [split for split in range(SPLITS) if split % 3 == group]
        if kind == "own":
            ledger.cursor.advance(splits, step)
            continue
        now = ledger.cursor.progress()
        updates = {
            split: SplitProgress(now[split].samples + step, now[split].positions + step + extra)
            for split in splits
            if split in owned or foreign  # a report may name a split the ledger does not own
        }
        ledger.commit(updates, group=(group, 3))
        if ledger.at_boundary():
            expected = ledger.cursor.progress()
        assert ledger.boundary == expected
