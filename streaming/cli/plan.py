"""``lance-streaming plan``: the epoch plan of a table and what a topology gets of it."""

from __future__ import annotations

import argparse
from typing import Any

from ._common import count, ints, print_listing

__all__ = ["run"]


def run(args: argparse.Namespace, extra: list[str]) -> int:
    """Print the epoch plan of a table and what a topology would get of it."""
    from ._tables import engine, open_table

    if args.num_workers < 0:
        raise ValueError(f"--num-workers must be 0 or more, got {args.num_workers}")
    dataset = engine(
        open_table(args.uri, args),
        args,
        num_splits=args.num_splits,
        rank=0,
        world_size=args.world_size,
        filter=args.filter,
        version=args.version,
        shuffle=not args.no_shuffle,
        shuffle_seed=args.shuffle_seed,
        epoch=args.epoch,
    )
    _print_splits(dataset, filtered=args.filter is not None, show_all=args.all)
    _print_topology(dataset, num_workers=args.num_workers, show_all=args.all)
    return 0


def _print_splits(dataset: Any, *, filtered: bool, show_all: bool) -> None:
    plan = dataset.plan  # streaming.core.plan.EpochPlan: the pure numbers of this epoch
    total, length, num_splits = plan.total_rows, plan.split_length, dataset.num_splits
    surplus = total - num_splits * length
    kind = "live rows matching the filter" if filtered else "live rows"
    print(f"table: {dataset.table_uri} at version {dataset.version}")
    print(f"planned rows N = {total} ({kind}) in {count(len(plan.fragment_ids), 'fragment')}")
    print(
        f"num_splits S = {num_splits}: split length L = N // S = {length}; "
        f"{count(surplus, 'surplus row')} left out of epoch {dataset.epoch}"
    )
    touched = [_fragments_of_split(plan, split) for split in range(num_splits)]
    counts = [len(ids) for ids in touched]
    print(f"fragments per split: min {min(counts)}, mean {sum(counts) / len(counts):.1f}, max {max(counts)}")
    lines = [f"  split {split:>4}: fragments {ints(ids)}" for split, ids in enumerate(touched)]
    print_listing(lines, show_all=show_all)


def _fragments_of_split(plan: Any, split: int) -> list[int]:
    """Fragment ids holding split ``split``'s rows, in the order they are laid out."""
    import numpy as np

    length, total = plan.split_length, plan.total_rows
    start = plan.split_start(split)
    ranges = [(start, min(start + length, total))]
    if start + length > total:  # the split wraps around the end of the laid-out rows
        ranges.append((0, start + length - total))
    found: list[int] = []
    for low, high in ranges:
        first = int(np.searchsorted(plan.bounds, low, side="right")) - 1
        last = int(np.searchsorted(plan.bounds, high - 1, side="right")) - 1
        found += [int(plan.fragment_ids[index]) for index in range(first, last + 1)]
    return list(dict.fromkeys(found))


def _print_topology(dataset: Any, *, num_workers: int, show_all: bool) -> None:
    from ..core.ownership import rank_splits, worker_splits
    from ..core.plan import Part

    world_size, length = dataset.world_size, dataset.split_length
    per_rank = dataset.num_splits // world_size
    print(
        f"world_size W = {world_size}, num_workers k = {num_workers}: every rank gets "
        f"{per_rank} splits = {per_rank * length} samples per epoch"
    )
    lines = []
    for rank in range(world_size):
        splits = rank_splits(dataset.num_splits, rank=rank, world_size=world_size)
        lines.append(f"  rank {rank}: splits {ints(splits)}")
        for worker in range(num_workers if num_workers > 1 else 0):
            part = Part(worker, num_workers, world_size)
            rows = sum(dataset.plan.part_rows(split, part) for split in splits)
            mine = worker_splits(splits, worker=worker, num_workers=num_workers)
            lines.append(
                f"    worker {worker}: reads {rows} rows, its blocks of every split "
                f"(with a transform or packing: splits {ints(mine)}, {len(mine) * length} samples)"
            )
    print_listing(lines, show_all=show_all)
