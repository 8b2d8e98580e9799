"""A randomized kill/resume campaign: ``python tests/support/chaos.py --trials N --seed S``.

Each trial draws, from ``numpy.random.default_rng([seed, trial])``, a random Lance
table (fragments of random sizes, deleted rows, sometimes a filter), a split count,
and for every run a topology (1-3 real gloo ranks, 0-3 DataLoader workers, a batch
size); it trains with ``chaos_rank.py``, kills the job at a random point (SIGKILL
of every rank, of one rank, of the whole process group, or during a checkpoint
write), sometimes changes the table, and resumes on the drawn topology from the
last complete checkpoint, until a run finishes the epoch. Then it checks that every
planned row was delivered exactly once apart from the documented replay, that the
final run's ranks took equal steps, and that no process, shared-memory file or
semaphore was left behind. A failure prints the command that reproduces it.

With ``--remote`` (``chaos_remote.py``) the ranks read the table through the LanceDB
server stand-in, faulted anew for every run, with one rank (real DataLoader workers,
their count drawn anew for every run); the kills are the trainer (sometimes with the
server going away for a while) and one worker; the table is not changed between runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import lance
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import chaos_remote

from chaos_checks import (
    Checkpoint,
    Topology,
    Totals,
    account,
    check_final_steps,
    latest_checkpoint,
    replay_bound,
)
from chaos_procs import Job, launch, session_members, shm_entries, shm_leftovers, wait_gone
from chaos_table import FILTERS, live_count, mutate, planned, random_table
from launching import free_port

RANK = Path(__file__).parents[1] / "procs" / "chaos_rank.py"
KILL_KINDS = ("all", "one", "group", "checkpoint")
RUN_TIMEOUT = 120.0  # seconds a run may take before it counts as a hang


class Trial:
    """One trial: a table, a plan, and runs until one finishes the epoch."""

    def __init__(
        self, seed: int, index: int, root: Path, kills: tuple[str, ...] | None = None, *, remote: bool = False
    ) -> None:
        self.seed, self.index, self.out, self.remote = seed, index, root, remote
        self.server: chaos_remote.LanceDBStandIn | None = None
        self.away: chaos_remote.Outage | None = None  # the server away after a kill, until the next run
        self.rng = np.random.default_rng([seed, index])
        self.totals = Totals(trials=1)
        self.uri = random_table(root / "table.lance", self.rng)
        self.version = lance.dataset(self.uri).version
        self.where = FILTERS[int(self.rng.integers(len(FILTERS)))] if self.rng.random() < 0.3 else None
        rows, self.live = live_count(self.uri, self.version, self.where)
        self.splits = int(self.rng.choice([s for s in (1, 2, 3, 4, 6, 12) if rows // s >= 3] or [1]))
        self.shuffle_seed = int(self.rng.integers(1000))
        self.ckpt_mode = "gather" if self.rng.random() < 0.5 else "ranks"
        self.every = int(self.rng.integers(2, 5))
        kinds = chaos_remote.KILLS if remote else KILL_KINDS
        drawn = [kinds[int(i)] for i in self.rng.integers(len(kinds), size=int(self.rng.integers(1, 4)))]
        self.kills = list(kills if kills is not None else drawn)
        self.topologies: list[Topology] = []
        self.resumed_at: list[int] = []
        self.allowance = 0

    def draw_topology(self, kill: str | None = None) -> Topology:
        sizes = (1,) if self.remote else (1, 2, 3)
        world_size = int(self.rng.choice([w for w in sizes if self.splits % w == 0]))
        per_rank = self.splits // world_size
        least = 1 if kill == "worker" else 0
        workers = int(self.rng.choice([k for k in (0, 1, 2, 3)[least:] if k == 0 or per_rank % k == 0]))
        return Topology(world_size, workers, int(self.rng.integers(1, 2 * per_rank + 3)))

    def run(self) -> Totals:
        if self.remote:
            self.server = chaos_remote.serve(self.out)
        try:
            return self.runs()
        finally:
            if self.server is not None:
                self.server.stop()

    def runs(self) -> Totals:
        for run, kill in enumerate([*self.kills, None]):
            resume = latest_checkpoint(self.out)
            if run and resume is not None and not self.remote and self.rng.random() < 0.5:
                self.totals.mutations[mutate(self.uri, self.rng)] += 1
            if self.run_once(run, self.draw_topology(kill), resume, kill) != "killed":
                break
        table = chaos_remote.table(self.server) if self.server is not None else self.uri
        expected = planned(
            table, version=self.version, splits=self.splits, seed=self.shuffle_seed, where=self.where
        )
        self.check_plan(expected)
        account(self.out, self.resumed_at, expected, self.allowance, self.totals)
        return self.totals

    def check_plan(self, expected: dict[int, int]) -> None:
        """The plan itself: S * L distinct live rows of the pinned version (a plain Lance scan)."""
        length = len(self.live) // self.splits
        if sum(expected.values()) != self.splits * length or not set(expected) <= self.live:
            self.totals.failures.append(
                f"plan: {sum(expected.values())} rows, expected {self.splits * length}"
            )

    def run_once(self, run: int, topology: Topology, resume: Checkpoint | None, kill: str | None) -> str:
        self.note_resume(run, topology, resume)
        pids = self.out / "pids" / f"run{run}"
        pids.mkdir(parents=True)
        before = shm_entries()
        environment = {"CHAOS_PIDS": str(pids)} | (chaos_remote.environment() if self.server else {})
        job = launch(self.commands(run, topology, resume), self.out, run, env=environment)
        if self.server is not None:
            if self.away is not None:  # the run started while the server was away: it comes back
                self.away.join()
                self.away = None
            self.totals.faults += chaos_remote.inject(self.server, self.rng)  # met as the rank reads
        outcome = self.drive(job, run, topology, resume, kill, pids)
        self.check_leftovers(job, run, {int(name) for name in os.listdir(pids)}, before)
        if outcome == "finished":
            check_final_steps(self.out, run, topology.world_size, self.totals)
        return outcome

    def note_resume(self, run: int, topology: Topology, resume: Checkpoint | None) -> None:
        self.resumed_at.append(resume.step if resume else 0)
        if resume is not None:
            writer = self.topologies[resume.run]
            self.totals.resumes += 1
            self.totals.topology_changes += (writer.world_size, writer.workers) != (
                topology.world_size,
                topology.workers,
            )
            self.allowance += replay_bound(writer, topology)
        self.topologies.append(topology)

    def commands(self, run: int, topology: Topology, resume: Checkpoint | None) -> list[list[str]]:
        port = free_port()
        common = [sys.executable, str(RANK), f"--uri={self.uri}", f"--out={self.out}", f"--run={run}"]
        common += [f"--world-size={topology.world_size}", f"--port={port}", f"--workers={topology.workers}"]
        common += [f"--batch={topology.batch}", f"--splits={self.splits}", f"--seed={self.shuffle_seed}"]
        common += [f"--filter={self.where or ''}", f"--ckpt-mode={self.ckpt_mode}"]
        common += [f"--checkpoint-every={self.every}"] + ([f"--resume={resume.folder}"] if resume else [])
        common += [f"--stand-in={self.server.host}"] if self.server is not None else []
        return [[*common, f"--rank={rank}"] for rank in range(topology.world_size)]

    def kill_step(self, topology: Topology, resume: Checkpoint | None, kill: str | None = None) -> int:
        """A random step of this run, drawn over the steps the run has left, before its last (a
        worker's kill over the first half: near the end the workers have delivered all they had).
        Never past the run's end, however far the killed run before it got: a kill drawn there
        would never happen."""
        total = len(self.live) // self.splits * self.splits - (resume.committed if resume else 0)
        left = total // topology.world_size // topology.batch
        left = left // 2 if kill == "worker" else left
        start = resume.step if resume else 0
        return start + int(self.rng.integers(1, max(2, left)))

    def drive(
        self, job: Job, run: int, topology: Topology, resume: Checkpoint | None, kill: str | None, pids: Path
    ) -> str:
        """Read rank 0's progress; kill at the drawn point; 'killed', 'finished', 'failed' or 'hang'."""
        at = self.kill_step(topology, resume, kill) if kill else 0
        victim = int(self.rng.integers(topology.world_size))
        deadline = time.monotonic() + RUN_TIMEOUT
        while (line := job.readline(deadline)) is not None:
            word, _, number = line.partition(" ")
            due = (
                number.isdigit()
                and int(number) >= at
                and word == ("ckpt" if kill == "checkpoint" else "step")
            )
            if not line or (kill and due):
                break
        if line is None:
            return self.hang(job, run, "no progress")
        if line and kill == "worker":
            return self.kill_worker(job, run, pids, deadline)
        if line:
            self.totals.kills[kill or ""] += 1
            if self.server is not None and self.rng.random() < 0.5:
                self.away = self.server.outage(chaos_remote.OUTAGE_S)  # it goes away with the trainer
            if kill == "group":
                job.kill_group()
            else:
                job.kill_ranks([victim] if kill == "one" else list(range(topology.world_size)))
        try:
            job.launcher.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            return self.hang(job, run, f"ranks did not exit after a {kill} kill")
        if line:
            return "killed"
        codes = job.exit_codes()
        if codes != [0] * topology.world_size or "done" not in job.lines:
            self.totals.failures.append(f"run-failed: run {run} exit codes {codes}; see {self.out}")
            return "failed"
        return "finished"

    def kill_worker(self, job: Job, run: int, pids: Path, deadline: float) -> str:
        """SIGKILL one worker: the trainer stops with the error that names it (a run that ends
        anyway, its workers done, is a kill that came too late)."""
        killed = chaos_remote.kill_worker(pids, self.rng)
        try:
            job.launcher.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            return self.hang(job, run, "the trainer did not stop after a worker was killed")
        if job.exit_codes() == [0]:  # the worker had delivered all it had: the loop never waited on it
            return "finished"
        self.totals.kills["worker"] += 1
        stderr = self.out / f"pids-run{run}-rank0.err"
        if not killed or not chaos_remote.named_the_worker(stderr):
            self.totals.failures.append(f"worker-error: run {run}: no error named the worker: {stderr}")
        return "killed"

    def hang(self, job: Job, run: int, why: str) -> str:
        self.totals.hangs += 1
        self.totals.failures.append(f"hang: run {run}: {why} within {RUN_TIMEOUT:.0f} s")
        job.kill_group()
        job.launcher.wait()
        return "hang"

    def check_leftovers(self, job: Job, run: int, workers: set[int], before: set[str]) -> None:
        ranks = set(job.rank_pids())
        alive = wait_gone(sorted(set(session_members(job.launcher.pid)) | workers | ranks), timeout=20)
        if alive:
            self.totals.leftovers["process"] += len(alive)
            self.totals.failures.append(f"leftover-process: run {run}: pids {alive} still alive")
            job.kill_group()
        owned, semaphores = shm_leftovers(before, workers | ranks | {job.launcher.pid})
        if owned:
            self.totals.leftovers["shm"] += len(owned)
            self.totals.failures.append(f"leftover-shm: run {run}: {owned}")
        if semaphores:
            self.totals.leftovers["semaphore"] += len(semaphores)
            self.totals.failures.append(
                f"leftover-semaphore: run {run} ({self.kills[run : run + 1]}): {semaphores}"
            )


def reproduce(seed: int, index: int, kills: tuple[str, ...] | None, remote: bool = False) -> str:
    command = f"python tests/support/chaos.py --seed {seed} --trial {index}" + (" --remote" if remote else "")
    return command + (f" --kills {','.join(kills)}" if kills is not None else "")


def run_trial(
    seed: int, index: int, *, kills: tuple[str, ...] | None = None, keep: bool = False, remote: bool = False
) -> Totals:
    """Run one trial in a fresh folder; each failure line ends with the reproducing command."""
    root = Path(tempfile.mkdtemp(prefix=f"chaos-{seed}-{index}-"))
    totals = Trial(seed, index, root, kills, remote=remote).run()
    totals.failures = [
        f"{failure} | reproduce: {reproduce(seed, index, kills, remote)}" for failure in totals.failures
    ]
    if not keep and not totals.failures:
        shutil.rmtree(root)
    return totals


def summary(totals: Totals) -> str:
    kills = ", ".join(f"{kind} {count}" for kind, count in sorted(totals.kills.items())) or "none"
    mutations = ", ".join(f"{kind} {count}" for kind, count in sorted(totals.mutations.items())) or "none"
    leftovers = ", ".join(f"{kind} {count}" for kind, count in sorted(totals.leftovers.items())) or "0"
    return (
        f"trials {totals.trials}; kills {sum(totals.kills.values())} ({kills}); resumes {totals.resumes}; "
        f"topology changes {totals.topology_changes}; "
        f"mutations {sum(totals.mutations.values())} ({mutations}); server faults {totals.faults}; "
        f"samples checked {totals.samples}; lost {totals.lost}; replayed (within bound) {totals.replayed}; "
        f"duplicated beyond replay {totals.duplicated}; hangs {totals.hangs}; leftovers {leftovers}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--trial", type=int, default=None, help="run only this trial (to reproduce it)")
    parser.add_argument("--kills", default=None, help="comma-separated kill kinds instead of drawn ones")
    parser.add_argument("--keep", action="store_true", help="keep every trial's folder")
    parser.add_argument("--minutes", type=float, default=None, help="start no trial after this long")
    parser.add_argument("--remote", action="store_true", help="read through a faulted LanceDB stand-in")
    args = parser.parse_args(argv)
    kills = tuple(args.kills.split(",")) if args.kills else None
    indices = [args.trial] if args.trial is not None else range(args.trials)
    totals, started = Totals(), time.monotonic()
    for index in indices:
        if args.minutes is not None and time.monotonic() - started > 60 * args.minutes:
            break
        trial = run_trial(args.seed, index, kills=kills, keep=args.keep, remote=args.remote)
        totals.add(trial)
        print(f"trial {index}: {summary(trial)}", flush=True)
        for failure in trial.failures:
            print(f"  FAIL {failure}", flush=True)
        print(f"  so far ({time.monotonic() - started:.0f} s): {summary(totals)}", flush=True)
    print(f"TOTAL ({time.monotonic() - started:.0f} s): {summary(totals)}")
    return 1 if totals.failures else 0


if __name__ == "__main__":
    sys.exit(main())
