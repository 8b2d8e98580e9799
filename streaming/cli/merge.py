"""``lance-streaming merge``: every rank's state into one that any topology resumes from."""

from __future__ import annotations

import argparse

from ._states import read_state

__all__ = ["run"]


def run(args: argparse.Namespace, extra: list[str]) -> int:
    """Merge the states of every rank of a run into one JSON state."""
    from ..distributed import save_state_dict
    from ..state.merge import merge_states

    states = [read_state(path, key=args.key)[0] for path in args.states]
    if states[0].get("kind") == "mixture":
        from ..mixture.mixture import StreamingMixture

        merged = StreamingMixture.merge_state_dicts(states)
        save_state_dict(merged, args.output)
        print(f"merged {len(states)} mixture states (step {merged['step']}) into {args.output}")
        return 0
    merged = merge_states(states, allow_lag=args.allow_lag)  # StreamingDataset.merge_state_dicts
    save_state_dict(merged, args.output)
    owned = len(merged["owned_splits"])
    print(
        f"merged {len(states)} states (epoch {merged['epoch']}, {owned} of "
        f"{merged['num_splits']} splits owned, {sum(merged['samples_consumed_per_split'])} "
        f"samples consumed) into {args.output}"
    )
    return 0
