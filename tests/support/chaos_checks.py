"""What a chaos trial checks: checkpoints found, delivered ids accounted for, replay bounded."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Topology:
    world_size: int
    workers: int
    batch: int


@dataclass(frozen=True)
class Checkpoint:
    folder: Path
    step: int
    run: int
    committed: int  # samples the checkpoint counts as delivered, over all splits


@dataclass
class Totals:
    """Figures of one trial or, summed, of a campaign."""

    trials: int = 0
    kills: Counter[str] = field(default_factory=Counter)
    resumes: int = 0
    topology_changes: int = 0
    mutations: Counter[str] = field(default_factory=Counter)
    faults: int = 0  # faults queued on the LanceDB stand-in (remote trials)
    samples: int = 0
    lost: int = 0
    replayed: int = 0
    duplicated: int = 0
    hangs: int = 0
    leftovers: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)

    def add(self, other: Totals) -> None:
        for name, value in vars(other).items():
            setattr(self, name, getattr(self, name) + value)


def latest_checkpoint(out: Path) -> Checkpoint | None:
    """The complete checkpoint with the highest step (merged, or every rank's file present)."""
    found = []
    for folder in (out / "ckpt").glob("step-*-run-*"):
        files = sorted(folder.glob("merged.json")) or sorted(folder.glob("rank*.json"))
        saved = [json.loads(path.read_text()) for path in files]
        if not saved or (files[0].name != "merged.json" and len(saved) != saved[0]["world_size"]):
            continue
        committed = sum(
            sum(
                entry["state"]["samples_consumed_per_split"][split]
                for split in entry["state"]["owned_splits"]
            )
            for entry in saved
        )
        found.append(Checkpoint(folder, saved[0]["step"], saved[0]["run"], committed))
    return max(found, key=lambda checkpoint: (checkpoint.step, checkpoint.run), default=None)


def replay_bound(writer: Topology, reader: Topology) -> int:
    """Samples a resume may deliver again, over all ranks (docs/workers.md): none, but
    on another world size, where a partial cycle split unevenly gives back at most one
    sample per new rank but one (any worker counts)."""
    return 0 if writer.world_size == reader.world_size else reader.world_size - 1


def read_logs(out: Path, run: int) -> dict[int, list[dict]]:
    """Every record a run's ranks logged, by rank."""
    logs: dict[int, list[dict]] = {}
    for path in sorted(out.glob(f"log-run{run}-rank*.jsonl")):
        rank = int(path.stem.rsplit("rank", 1)[1])
        logs[rank] = [json.loads(line) for line in path.read_text().splitlines() if line]
    return logs


def account(out: Path, resumed_at: list[int], planned: Counter[int], allowance: int, totals: Totals) -> None:
    """Delivered ids up to each next resume's checkpoint step must be the plan, once (plus replay)."""
    delivered: Counter[int] = Counter()
    for run, start in enumerate(resumed_at):
        last = resumed_at[run + 1] if run + 1 < len(resumed_at) else None
        for records in read_logs(out, run).values():
            for record in records:
                assert record["step"] > start, f"run {run} logged step {record['step']} before its resume"
                if last is None or record["step"] <= last:
                    delivered.update(record["ids"])
    lost = sum(1 for sample in planned if sample not in delivered)
    foreign = sum(count for sample, count in delivered.items() if sample not in planned)
    repeats = sum(count - 1 for count in delivered.values() if count > 1)
    totals.samples += sum(planned.values())
    totals.lost += lost + foreign
    totals.replayed += min(repeats, allowance)
    totals.duplicated += max(0, repeats - allowance)
    if lost or foreign:
        totals.failures.append(f"lost: {lost} planned samples never delivered, {foreign} unplanned ones")
    if repeats > allowance:
        totals.failures.append(f"duplicated: {repeats} repeats, replay allowance {allowance}")


def check_final_steps(out: Path, run: int, world_size: int, totals: Totals) -> None:
    """Every rank of the run that finished the epoch took the same steps."""
    steps = {rank: [record["step"] for record in records] for rank, records in read_logs(out, run).items()}
    if len(steps) != world_size or len({tuple(value) for value in steps.values()}) > 1:
        lengths = {rank: len(value) for rank, value in steps.items()}
        totals.failures.append(f"unequal steps: final run {run} ranks took {lengths} steps")
