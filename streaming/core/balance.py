"""Equal ranks after a resume from a partial cycle on another world size. Pure.

A state taken inside a cycle has some splits one sample ahead of the others
(G7): on the topology that took it, every rank has as many of them, but on
another world size they may fall unevenly, and ranks with unequal lengths stop
at different steps (a synchronous job hangs in its last step). No order of the
samples left can fix that: the samples left do not divide evenly by the new
world size. So each rank that would be short gives back its last delivered
sample of that partial cycle (at most one sample per rank, the samples a resume
on such a topology delivers again); ranks decide it alone, from the same
state, and agree.
"""

from __future__ import annotations

from collections.abc import Sequence

from .progress import SplitProgress

__all__ = ["balanced"]


def balanced(
    progress: Sequence[SplitProgress], *, rank: int, world_size: int, total: int
) -> tuple[tuple[SplitProgress, ...], int]:
    """``progress`` with this rank's share of a partial cycle given back where other
    ranks would have more samples left; and how many samples were given back (on a
    topology that splits the partial cycle evenly, 0; else at most one per rank
    when the state was taken with every rank at the same step).

    Only a partial cycle is evened out: counts that differ by at most one, with
    nothing skipped (positions equal counts) and no packing anchors. Anything else
    (a lagged merge) is returned as it is.
    """
    counts = [split.samples for split in progress]
    if not counts or max(counts) - min(counts) != 1:
        return tuple(progress), 0
    if any(split.positions != split.samples or split.anchor is not None for split in progress):
        return tuple(progress), 0
    left = [
        sum(total - counts[split] for split in range(r, len(counts), world_size)) for r in range(world_size)
    ]
    high = max(counts)
    mine = [split for split in range(rank, len(counts), world_size) if counts[split] == high]
    back = min(max(left) - left[rank], len(mine))
    result = list(progress)
    for split in mine[len(mine) - back :]:
        result[split] = SplitProgress(high - 1, high - 1)
    return tuple(result), back
