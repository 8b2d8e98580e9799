"""Shared test helpers: real Lance tables on disk and the one resume checker."""

from __future__ import annotations

import json
import logging
import os
import warnings
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import lance
import numpy as np
import pyarrow as pa

from streaming import EpochCompleteWarning, StreamingDataset


def table_data(start: int, count: int, *, labels: int = 10) -> pa.Table:
    """Rows with a unique ``id`` = start..start+count-1 and a few column kinds."""
    ids = np.arange(start, start + count, dtype=np.int64)
    vec = pa.FixedSizeListArray.from_arrays(
        pa.array(np.repeat(ids, 4).astype(np.float32) + np.tile(np.arange(4, dtype=np.float32), count)),
        4,
    )
    return pa.table(
        {
            "id": ids,
            "label": (ids % labels).astype(np.int32),
            "vec": vec,
            "text": pa.array([f"row-{i}" for i in ids]),
        }
    )


def make_table(path: Path | str, fragment_sizes: Sequence[int], *, deleted: Iterable[int] = ()) -> str:
    """Write one fragment per entry of ``fragment_sizes`` and delete the ``deleted`` ids.

    Returns the dataset URI. Ids are consecutive over fragments in storage order.
    """
    uri = str(path)
    start = 0
    for index, size in enumerate(fragment_sizes):
        lance.write_dataset(table_data(start, size), uri, mode="create" if index == 0 else "append")
        start += size
    deleted = sorted(set(deleted))
    if deleted:
        lance.dataset(uri).delete(f"id IN ({', '.join(map(str, deleted))})")
    return uri


def live_ids(uri: str, *, version: int | None = None, where: str | None = None) -> set[int]:
    """Every live id of the table (matching ``where``), read with a plain scan."""
    table = lance.dataset(uri, version=version).to_table(columns=["id"], filter=where)
    return set(table.column("id").to_pylist())


def ids_of(samples: Iterable[dict[str, Any]]) -> list[int]:
    """The ``id`` of every sample, as Python ints."""
    return [int(sample["id"]) for sample in samples]


def run_ranks(make: Callable[[int, int], StreamingDataset], world_size: int) -> list[list[int]]:
    """Ids yielded by every rank of ``world_size`` over a whole epoch."""
    return [ids_of(make(rank, world_size)) for rank in range(world_size)]


def json_roundtrip(state: dict[str, Any]) -> dict[str, Any]:
    """The state after ``json.dumps`` and ``json.loads``."""
    result: dict[str, Any] = json.loads(json.dumps(state))
    return result


def take(iterator: Any, count: int) -> list[int]:
    """Ids of the next ``count`` samples of ``iterator``."""
    return [int(next(iterator)["id"]) for _ in range(count)]


def check_resume_everywhere(
    make: Callable[[], StreamingDataset],
    *,
    prefixes: Iterable[int] | None = None,
    roundtrip: Callable[[dict[str, Any]], dict[str, Any]] = json_roundtrip,
    twice: bool = False,
) -> None:
    """Stop after every prefix length, resume in a fresh dataset, compare with one run.

    A state counts every sample handed out, a partial cycle too (G7), so the
    resumed run must give exactly the rest: nothing repeated, nothing lost. With
    ``twice``, the resumed run is stopped half way and resumed once more.
    """
    reference = make()
    owned = reference.owned_splits()
    full = ids_of(reference)
    for prefix in range(len(full) + 1) if prefixes is None else prefixes:
        first = make()
        iterator = iter(first)
        delivered = take(iterator, prefix)
        state = roundtrip(first.state_dict())
        iterator.close()
        committed = sum(state["samples_consumed_per_split"][split] for split in owned)
        assert committed == prefix, f"prefix {prefix}: state counts {committed} samples"
        assert delivered == full[:prefix], f"prefix {prefix}: uninterrupted order differs"
        resumed = make()
        resumed.load_state_dict(state)
        with warnings.catch_warnings():
            if committed == len(full):  # a finished epoch yields nothing, with a warning
                warnings.simplefilter("ignore", EpochCompleteWarning)
            rest = ids_of(resumed) if not twice else _resume_again(make, resumed)
        assert full[:committed] + rest == full, (
            f"stopped after {prefix} samples ({committed} committed): resumed run "
            f"yields {len(rest)} samples, expected {len(full) - committed}"
        )


def _resume_again(make: Callable[[], StreamingDataset], dataset: StreamingDataset) -> list[int]:
    owned = dataset.owned_splits()
    before = sum(dataset.state_dict()["samples_consumed_per_split"][split] for split in owned)
    iterator = iter(dataset)
    first = take(iterator, len(dataset) // 2)
    state = json_roundtrip(dataset.state_dict())
    iterator.close()
    again = make()
    again.load_state_dict(state)
    committed = sum(state["samples_consumed_per_split"][split] for split in owned) - before
    return first[:committed] + ids_of(again)


class FailOn:
    """A picklable transform that raises on the batch holding one id, as a bad row would."""

    def __init__(self, bad_id: int) -> None:
        self.bad_id = bad_id

    def __call__(self, batch: pa.RecordBatch) -> list[dict[str, Any]]:
        rows = batch.to_pylist()
        if any(row["id"] == self.bad_id for row in rows):
            raise KeyError(f"cannot handle row {self.bad_id}")
        return rows


def plain_transform(batch: pa.RecordBatch) -> list[dict[str, Any]]:
    """A picklable transform that changes nothing (it turns off the vectorised path)."""
    return batch.to_pylist()


class FailOnIds:
    """A picklable transform that raises on a batch holding any of ``bad_ids``."""

    def __init__(self, bad_ids: Iterable[int]) -> None:
        self.bad_ids = frozenset(bad_ids)

    def __call__(self, batch: pa.RecordBatch) -> list[dict[str, Any]]:
        rows = batch.to_pylist()
        failing = [row["id"] for row in rows if row["id"] in self.bad_ids]
        if failing:
            raise ValueError(f"cannot handle rows {failing}")
        return rows


class LogToFolder:
    """A picklable ``worker_init_fn``: each worker writes the ``streaming`` logger's records to
    ``folder/worker-PID.log``, so a test reads what every worker warned (and which pids ran)."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = str(folder)

    def __call__(self, worker_id: int) -> None:
        handler = logging.FileHandler(os.path.join(self.folder, f"worker-{os.getpid()}.log"))
        handler.setLevel(logging.WARNING)
        logging.getLogger("streaming").addHandler(handler)

    def records(self) -> dict[int, list[str]]:
        """Worker pid -> the lines it logged."""
        found = {}
        for path in Path(self.folder).glob("worker-*.log"):
            found[int(path.stem.split("-")[1])] = path.read_text().splitlines()
        return found
