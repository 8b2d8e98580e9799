"""The README's main job: train, checkpoint, resume on another topology, prove exactness.

Three steps, each in its own fresh process:

1. ``build``: write an embedded LanceDB table.
2. ``train``: ranks 0..W-1 train a small model in lockstep; after some steps every
   rank's state is merged and saved with the model, and the process stops.
   Then the table is changed (rows appended and deleted).
3. ``resume``: a new process with another world size loads the saved (merged)
   state on every new rank, which pins the checkpoint's table version, finishes
   the epoch, and the report checks that every planned sample was delivered
   exactly once.

Ranks run in one process here (each with its own ``StreamingDataset``), which is
exactly what each process of a ``torch.distributed`` job would do.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

NUM_SPLITS = 12
ROWS = 20_000
FEATURES = 16
PER_SPLIT_BATCH = 4  # m: each global step takes 4 samples of every split


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


def _ranks(workdir: Path, world_size: int, state: dict[str, Any] | None) -> list[Any]:
    import lancedb

    from streaming import StreamingDataset

    table = lancedb.connect(str(workdir / "db")).open_table("demo")
    ranks = []
    for rank in range(world_size):
        dataset = StreamingDataset(
            table, num_splits=NUM_SPLITS, shuffle_seed=42, rank=rank, world_size=world_size
        )
        if state is not None:
            dataset.load_state_dict(state)
        ranks.append(dataset)
    return ranks


def _train(
    workdir: Path, world_size: int, *, stop_after: int | None, state: dict[str, Any] | None
) -> dict[str, Any]:
    import torch
    from torch.utils.data import DataLoader

    from streaming import StreamingDataset

    torch.manual_seed(0)
    model = torch.nn.Linear(FEATURES, 2)
    if state is not None:
        model.load_state_dict(torch.load(workdir / "model.pt", weights_only=True))
    optimiser = torch.optim.SGD(model.parameters(), lr=0.1)
    ranks = _ranks(workdir, world_size, state["dataset"] if state else None)
    batch_size = PER_SPLIT_BATCH * NUM_SPLITS // world_size
    loaders = [iter(DataLoader(rank, batch_size=batch_size)) for rank in ranks]
    delivered: list[int] = []
    steps = 0
    losses = []
    for batches in zip(*loaders):  # every rank has the same number of batches
        x = torch.cat([b["x"] for b in batches])
        y = torch.cat([b["y"] for b in batches])
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimiser.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        optimiser.step()
        losses.append(loss.item())
        delivered += [int(i) for b in batches for i in b["id"]]
        steps += 1
        if stop_after is not None and steps == stop_after:
            break
    merged = StreamingDataset.merge_state_dicts([rank.state_dict() for rank in ranks])
    torch.save(model.state_dict(), workdir / "model.pt")
    accuracy = _accuracy(model, workdir)
    return {
        "dataset": merged,
        "delivered": delivered,
        "steps": steps,
        "loss": losses[-1],
        "accuracy": accuracy,
    }


def _accuracy(model: Any, workdir: Path) -> float:
    import lancedb
    import torch

    table = lancedb.connect(str(workdir / "db")).open_table("demo").to_arrow()
    x = torch.from_numpy(np.stack(table.column("x").to_numpy(zero_copy_only=False)).astype(np.float32))
    y = torch.from_numpy(table.column("y").to_numpy())
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def _append_rows(workdir: Path) -> None:
    """Change the table after the checkpoint: the resume must still read the old version."""
    import lancedb
    import pyarrow as pa

    table = lancedb.connect(str(workdir / "db")).open_table("demo")
    extra = table.to_arrow().slice(0, 1000)
    ids = pa.array(np.arange(ROWS, ROWS + 1000))
    table.add(extra.set_column(0, "id", ids))
    table.delete("id < 500")


def step(name: str, workdir: Path, world_size: int) -> None:
    """Run one step of the demo in this process (called in a fresh process)."""
    if name == "build":
        build(workdir)
        return
    if name == "train":
        result = _train(workdir, world_size, stop_after=60, state=None)
        _append_rows(workdir)
    else:
        saved = json.loads((workdir / "checkpoint.json").read_text())
        result = _train(workdir, world_size, stop_after=None, state=saved)
    out = workdir / ("checkpoint.json" if name == "train" else "resumed.json")
    out.write_text(json.dumps(result))


def _fresh_process(name: str, workdir: Path, world_size: int) -> dict[str, Any]:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "streaming",
            "demo",
            "--step",
            name,
            "--workdir",
            str(workdir),
            "--world-size",
            str(world_size),
        ],
        check=True,
    )
    path = workdir / ("checkpoint.json" if name == "train" else "resumed.json")
    return json.loads(path.read_text()) if name != "build" else {}


def run(*, workdir: Path | None = None, world_size: int = 2, resume_world_size: int = 3) -> bool:
    """Run the whole demo; print the report; return True when exactly once held."""
    workdir = Path(workdir or tempfile.mkdtemp(prefix="lance-streaming-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"demo folder: {workdir}")
    _fresh_process("build", workdir, world_size)
    first = _fresh_process("train", workdir, world_size)
    print(
        f"trained {first['steps']} steps on {world_size} ranks, loss {first['loss']:.3f}, "
        f"accuracy {first['accuracy']:.1%}; checkpoint saved"
    )
    print("then 1000 rows were appended to the table and 500 deleted; the resume reads the pinned version")
    second = _fresh_process("resume", workdir, resume_world_size)
    print(
        f"resumed on {resume_world_size} ranks in a fresh process: {second['steps']} more steps, "
        f"accuracy {second['accuracy']:.1%}"
    )
    return report(first["delivered"], second["delivered"], first["dataset"])


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
