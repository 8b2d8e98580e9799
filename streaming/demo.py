"""The README's main job: train, checkpoint, resume on another topology, prove exactness.

1. ``build``: write an embedded LanceDB table (a fresh process).
2. ``train``: W ranks (real processes, torch.distributed with gloo on 127.0.0.1,
   DistributedDataParallel), each with a ``StreamingDataLoader`` of 2 worker
   processes, train part of an epoch; rank 0 saves the merged state and the model.
   Then the table is changed: rows appended and deleted.
3. ``resume``: W' ranks, in new processes, load the merged state, which pins the
   checkpoint's table version, and finish the epoch.

The report checks that every planned sample was delivered exactly once.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["build", "change_table", "report", "run", "train"]

NUM_SPLITS = 12
ROWS = 20_000
FEATURES = 16
PER_SPLIT_BATCH = 8  # m: each global step takes 8 samples of every split
WORKERS = 2
STOP_AFTER = 40


def build(workdir: Path) -> None:
    """Write the demo table: features with a label that a linear model can learn."""
    import lancedb
    import pyarrow as pa

    rng = np.random.default_rng(0)
    features = rng.normal(size=(ROWS, FEATURES)).astype(np.float32)
    labels = (features @ rng.normal(size=FEATURES) > 0).astype(np.int64)
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(features.reshape(-1)), FEATURES)
    table = pa.table({"id": np.arange(ROWS), "x": vectors, "y": labels})
    db = lancedb.connect(str(workdir / "db"))
    db.create_table("demo", table.slice(0, ROWS // 2), mode="overwrite")
    db.open_table("demo").add(table.slice(ROWS // 2))  # two fragments


def change_table(workdir: Path) -> None:
    """Change the table after the checkpoint: the resume must still read the old version."""
    import lancedb
    import pyarrow as pa

    table = lancedb.connect(str(workdir / "db")).open_table("demo")
    extra = table.to_arrow().slice(0, 1000)
    table.add(extra.set_column(0, "id", pa.array(np.arange(ROWS, ROWS + 1000))))
    table.delete("id < 500")


def train(workdir: Path, *, rank: int, world_size: int, port: int, phase: str) -> None:
    """One rank of the training job (runs in its own process)."""
    import lancedb
    import torch
    import torch.distributed as dist

    from streaming import StreamingDataLoader, StreamingDataset, gather_state_dict, load_state_dict

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=120),
    )
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(FEATURES, 2))
    checkpoint = workdir / "checkpoint.json"
    saved = json.loads(checkpoint.read_text()) if phase == "resume" else None
    if saved is not None:
        model.module.load_state_dict(torch.load(workdir / "model.pt", weights_only=True))
    optimiser = torch.optim.SGD(model.parameters(), lr=0.1)
    table = lancedb.connect(str(workdir / "db")).open_table("demo")
    dataset = StreamingDataset(table, num_splits=NUM_SPLITS, shuffle_seed=42)  # rank, world size: the group's
    loader = StreamingDataLoader(
        dataset, batch_size=PER_SPLIT_BATCH * NUM_SPLITS // world_size, num_workers=_workers(world_size)
    )
    if saved is not None:
        load_state_dict(loader, saved["dataset"])
    delivered: list[int] = []
    steps, loss = 0, float("nan")
    for batch in loader:
        output = model(batch["x"])
        batch_loss = torch.nn.functional.cross_entropy(output, batch["y"])
        optimiser.zero_grad()
        batch_loss.backward()  # type: ignore[no-untyped-call]
        optimiser.step()
        loss = batch_loss.item()
        delivered += batch["id"].tolist()
        steps += 1
        if phase == "train" and steps == STOP_AFTER:
            break
    state = gather_state_dict(loader)
    (workdir / f"{phase}-rank{rank}.json").write_text(
        json.dumps({"delivered": delivered, "steps": steps, "loss": loss})
    )
    if rank == 0 and phase == "train":
        torch.save(model.module.state_dict(), workdir / "model.pt")
        checkpoint.write_text(json.dumps({"dataset": state}))
    dist.destroy_process_group()


def _workers(world_size: int) -> int:
    """Worker processes per rank: WORKERS when they divide the rank's splits, else 1."""
    return WORKERS if (NUM_SPLITS // world_size) % WORKERS == 0 else 1


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _launch(workdir: Path, phase: str, world_size: int) -> dict[str, Any]:
    """Start ``world_size`` rank processes, as torchrun would, and collect what they did."""
    port = _free_port()
    command = [
        sys.executable,
        "-m",
        "streaming",
        "demo",
        "--workdir",
        str(workdir),
        "--step",
        phase,
        "--world-size",
        str(world_size),
        "--port",
        str(port),
    ]
    ranks = [subprocess.Popen([*command, "--rank", str(rank)]) for rank in range(world_size)]
    codes = [rank.wait(timeout=900) for rank in ranks]
    if any(codes):
        raise RuntimeError(f"{phase} ranks exited with {codes}")
    results = [json.loads((workdir / f"{phase}-rank{rank}.json").read_text()) for rank in range(world_size)]
    return {
        "delivered": [i for result in results for i in result["delivered"]],
        "steps": [result["steps"] for result in results],
        "loss": results[0]["loss"],
    }


def _accuracy(workdir: Path) -> float:
    import lancedb
    import torch

    model = torch.nn.Linear(FEATURES, 2)
    model.load_state_dict(torch.load(workdir / "model.pt", weights_only=True))
    table = lancedb.connect(str(workdir / "db")).open_table("demo").to_arrow()
    x = torch.from_numpy(np.stack(table.column("x").to_numpy(zero_copy_only=False)).astype(np.float32))
    y = torch.from_numpy(table.column("y").to_numpy())
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def run(*, workdir: Path | None = None, world_size: int = 2, resume_world_size: int = 3) -> bool:
    """Run the whole demo; print the report; return True when exactly once held."""
    workdir = Path(workdir or tempfile.mkdtemp(prefix="lance-streaming-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"demo folder: {workdir}", flush=True)
    subprocess.run(
        [sys.executable, "-m", "streaming", "demo", "--workdir", str(workdir), "--step", "build"], check=True
    )
    first = _launch(workdir, "train", world_size)
    print(
        f"trained {first['steps'][0]} steps on {world_size} ranks x {_workers(world_size)} workers "
        f"(loss {first['loss']:.3f}, accuracy {_accuracy(workdir):.1%}); merged checkpoint saved",
        flush=True,
    )
    change_table(workdir)
    print("then 1000 rows were appended to the table and 500 deleted", flush=True)
    second = _launch(workdir, "resume", resume_world_size)
    print(
        f"resumed on {resume_world_size} ranks x {_workers(resume_world_size)} workers in new processes: "
        f"{second['steps'][0]} more steps per rank, steps per rank {second['steps']}",
        flush=True,
    )
    state = json.loads((workdir / "checkpoint.json").read_text())["dataset"]
    return report(first["delivered"], second["delivered"], state)


def report(before: list[int], after: list[int], state: dict[str, Any]) -> bool:
    """Print whether every planned sample was delivered exactly once."""
    planned = ROWS // NUM_SPLITS * NUM_SPLITS
    delivered = before + after
    duplicates = len(delivered) - len(set(delivered))
    missing = planned - len(set(delivered))
    foreign = sum(1 for i in delivered if not 0 <= i < ROWS)  # rows added after the checkpoint
    print(f"planned samples this epoch: {planned} ({ROWS - planned} surplus rows left out)")
    print(f"delivered before the checkpoint: {len(before)}, after the resume: {len(after)}")
    print(
        f"duplicates: {duplicates}, missing: {missing}, rows from after the checkpoint: {foreign}, "
        f"snapshot: version {state['table']['version']}"
    )
    ok = duplicates == 0 and missing == 0 and foreign == 0 and len(delivered) == planned
    print("OK: every planned sample was delivered exactly once" if ok else "FAILED: the epoch was not exact")
    return ok
