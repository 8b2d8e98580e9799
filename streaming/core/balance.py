"""Equal ranks after a resume from a partial cycle on another world size. Pure.

A state taken inside a cycle has some splits one sample ahead of the others
(G7): on the topology that took it, every rank has as many of them, but on
another world size they may fall unevenly, and ranks with unequal lengths stop
at different steps (a synchronous job hangs in its last step). No order of the
samples left can fix that: the samples left do not divide evenly by the new
world size. So each rank that would be short gives back its last delivered
samples of that partial cycle (at most one sample per rank, the samples a resume
on such a topology delivers again). Every rank computes every rank's give-back
from the same state, so they agree, and each rank's later states place the
other ranks where they really stand (their give-backs included).

With sequence packing a sample is a block, and a given-back block's start in
the token stream is not in the state: its split restarts from the start of its
stream and rebuilds (and discards) the blocks before it, as a lockstep anchor
does. Exact, at the cost of re-reading that split's documents up to there.
"""

from __future__ import annotations

from collections.abc import Sequence

from .progress import SplitProgress

__all__ = ["balanced"]


def balanced(
    progress: Sequence[SplitProgress], *, world_size: int, total: int
) -> tuple[tuple[SplitProgress, ...], list[int]]:
    """``progress`` with every rank's share of a partial cycle given back where other
    ranks would have more samples left; and how many samples each rank gave back (on
    a topology that splits the partial cycle evenly, none; else at most one per rank
    when the state was taken with every rank at the same step).

    Only a partial cycle is evened out: counts that differ by at most one, with
    nothing skipped (positions equal counts, or packing anchors). Anything else
    (a lagged merge) is returned as it is.
    """
    counts = [split.samples for split in progress]
    nothing = [0] * world_size
    if not counts or max(counts) - min(counts) != 1:
        return tuple(progress), nothing
    packed = all(split.anchor is not None for split in progress)
    if not packed and any(split.positions != split.samples or split.anchor is not None for split in progress):
        return tuple(progress), nothing
    left = [
        sum(total - counts[split] for split in range(r, len(counts), world_size)) for r in range(world_size)
    ]
    high = max(counts)
    result, backs = list(progress), []
    for rank in range(world_size):
        mine = [split for split in range(rank, len(counts), world_size) if counts[split] == high]
        back = min(max(left) - left[rank], len(mine))
        for split in mine[len(mine) - back :]:
            result[split] = _one_back(progress[split])
        backs.append(back)
    return tuple(result), backs


def _one_back(split: SplitProgress) -> SplitProgress:
    """``split`` one sample earlier."""
    samples = split.samples - 1
    if split.anchor is None:
        return SplitProgress(samples, samples)
    if split.anchor[0] <= samples:  # a lagging anchor already lies before it
        return SplitProgress(samples, split.positions, split.anchor)
    return SplitProgress(samples, 0, (0, 0, 0))
