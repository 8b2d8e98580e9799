"""``worker_info_override``: one dataset object standing for one DataLoader worker.

The hook comes from ``lancedb.streaming``, whose users drive every worker of a rank
from one process (each a dataset with its own override) to check sharding and
resume without starting processes. Such a dataset reads its worker's splits only, so
its state knows only their counts exactly: the other workers' splits carry where
lockstep training puts them, as other ranks' splits do. Inside a real DataLoader
worker the override still wins, and the dataset says so in a warning.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import NamedTuple

import pytest
from torch.utils.data import DataLoader

from streaming import StreamingDataset

from helpers import ids_of, json_roundtrip, make_table, take

SPLITS, WORKERS = 12, 2
PER_WORKER = 60  # 120 rows, 12 splits of 10; each worker reads 6 splits


class Info(NamedTuple):
    """What ``torch.utils.data.get_worker_info()`` would say (the fields the hook reads)."""

    id: int
    num_workers: int


@pytest.fixture
def uri(tmp_path: Path) -> str:
    return make_table(tmp_path / "rows.lance", [70, 50])


def simulated(uri: str, worker: int) -> StreamingDataset:
    """Worker ``worker`` of ``WORKERS`` of the only rank, iterated in this process."""
    override = Info(worker, WORKERS)
    return StreamingDataset(uri, num_splits=SPLITS, shuffle_seed=3, worker_info_override=override)


def test_a_simulated_workers_state_is_exact_for_its_splits_and_lockstep_for_the_others(uri):
    data = simulated(uri, 1)
    take(iter(data), 6 * 3 + 2)  # three cycles of its six splits, then two samples more
    state = data.state_dict()
    assert state["owned_splits"] == [1, 3, 5, 7, 9, 11], "only the splits this object reads are exact"
    # Its own splits 1 and 3 are one sample ahead; worker 0, in lockstep, has handed out
    # as many samples in the same order, so its splits 0 and 2 are too.
    assert state["samples_consumed_per_split"] == [4, 4, 4, 4] + [3] * 8
    assert state["positions_consumed_per_split"] == state["samples_consumed_per_split"]


@pytest.mark.parametrize("prefix", [0, 1, 6, 31, PER_WORKER - 1, PER_WORKER])
def test_one_workers_state_or_the_merge_of_all_resumes_every_worker_exactly(uri, prefix):
    """Every simulated worker hands out ``prefix`` samples (a synchronous step), then
    resumes from worker 0's state alone and from the merge of every worker's state."""
    full = [ids_of(simulated(uri, worker)) for worker in range(WORKERS)]
    assert sorted(full[0] + full[1]) == list(range(120))
    first = [simulated(uri, worker) for worker in range(WORKERS)]
    iterators = [iter(data) for data in first]
    for worker, iterator in enumerate(iterators):
        assert take(iterator, prefix) == full[worker][:prefix]
    states = [json_roundtrip(data.state_dict()) for data in first]
    merged = StreamingDataset.merge_state_dicts(states)
    assert merged["owned_splits"] == list(range(SPLITS))
    for iterator in iterators:
        iterator.close()
    for name, state in (("worker 0's state", states[0]), ("the merged state", merged)):
        assert state["samples_consumed_per_split"] == merged["samples_consumed_per_split"], name
        for worker in range(WORKERS):
            resumed = simulated(uri, worker)
            resumed.load_state_dict(state)
            rest = ids_of(resumed) if prefix < PER_WORKER else []
            assert rest == full[worker][prefix:], f"{name}, worker {worker}, after {prefix} samples"


def log_to(path: Path, worker_id: int) -> None:
    """A ``worker_init_fn``: send the worker's ``streaming`` log records to ``path``."""
    handler = logging.FileHandler(path / f"worker{worker_id}.log")
    logging.getLogger("streaming").addHandler(handler)


def test_the_override_takes_precedence_in_a_real_worker_and_warns(uri, tmp_path):
    loader = DataLoader(
        simulated(uri, 1),
        batch_size=10,
        num_workers=1,
        multiprocessing_context="spawn",
        worker_init_fn=functools.partial(log_to, tmp_path),
        timeout=120,
    )
    ids = [int(i) for batch in loader for i in batch["id"]]
    assert ids == ids_of(simulated(uri, 1)), "the real worker reads the override's splits"
    log = (tmp_path / "worker0.log").read_text()
    assert "worker_info_override (worker 1 of 2) takes precedence over DataLoader worker 0 of 1" in log


def test_the_override_in_the_main_process_does_not_warn(uri, caplog):
    with caplog.at_level(logging.WARNING, logger="streaming"):
        assert len(ids_of(simulated(uri, 0))) == PER_WORKER
    assert not caplog.records


@pytest.mark.parametrize(("worker", "workers"), [(2, 2), (-1, 2), (0, 0)])
def test_an_override_naming_no_worker_is_refused(uri, worker, workers):
    with pytest.raises(ValueError, match=f"worker_info_override has id={worker} and num_workers={workers}"):
        StreamingDataset(uri, num_splits=SPLITS, worker_info_override=Info(worker, workers))


def test_an_override_whose_workers_do_not_divide_the_splits_reads_its_strided_splits(uri):
    """Any worker count: worker 0 of 5 of 12 splits reads splits 0, 5 and 10."""
    dataset = StreamingDataset(uri, num_splits=SPLITS, worker_info_override=Info(0, 5))
    assert dataset.state_dict()["owned_splits"] == [0, 5, 10]
    assert len(ids_of(dataset)) == 3 * dataset.split_length
