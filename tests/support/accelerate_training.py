"""A ``StreamingDataLoader`` trained through Accelerate, shared by
``tests/jobs/test_accelerate.py`` and the two-rank script ``tests/procs/accelerate_rank.py``."""

from __future__ import annotations

from streaming import StreamingDataLoader, StreamingDataset

BATCH = 8


def make_loader(uri: str, workers: int) -> StreamingDataLoader:
    data = StreamingDataset(uri, num_splits=4, shuffle_seed=5, block_rows=4, shuffle_buffer_size=32)
    return StreamingDataLoader(data, batch_size=BATCH, num_workers=workers, timeout=120 if workers else 0)


def train(accelerator, model, optimizer, batches, seen: list[list[int]], steps: int | None = None) -> None:
    for step, batch in enumerate(batches):
        seen.append(batch["id"].tolist())
        loss = model(batch["id"].float()[:, None]).pow(2).mean()
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        if steps is not None and step + 1 == steps:
            return
