"""Any ``num_workers`` with the defaults: the worker count decides who reads which rows, never
which batches come, and a state taken with any count resumes on any other.

The in-process checks drive every worker's half (``DatasetEngine.shares``, the code a
loader's worker runs) for many worker counts and assemble the batches from their shares
as the trainer does; the process checks run the same through real DataLoader workers.
"""

from __future__ import annotations

import lance
import lancedb
import numpy as np
import pytest

from streaming import StreamingDataLoader, StreamingDataset
from streaming.core.world import World
from streaming.dataset.host import dataset_engine
from streaming.samples.collated import finish

from helpers import make_table

ROWS = (150, 90, 60)
DELETED = range(5, 300, 11)  # a table with deleted rows: its fragments keep holes
BATCH = 7


@pytest.fixture(scope="module")
def uri(tmp_path_factory):
    return make_table(tmp_path_factory.mktemp("any") / "t.lance", ROWS, deleted=DELETED)


def reference(make, batch_size: int = BATCH) -> tuple[list[list[int]], list[list[int]]]:
    """The batches of ``num_workers=0`` and the counts of the state after each."""
    loader = StreamingDataLoader(make(), batch_size=batch_size)
    batches, counts = [], []
    for batch in loader:
        batches.append(batch["id"].tolist())
        counts.append(loader.state_dict()["samples_consumed_per_split"])
    return batches, counts


def assembled(make, *, workers: int, rank: int, world_size: int) -> tuple[list[list[int]], list[list[int]]]:
    """The batches assembled from the shares of ``workers`` workers (each on its own copy
    of the dataset, as a worker process has), and each worker's counts after each share."""
    per_worker = []
    for worker in range(workers):
        dataset = make()
        engine = dataset_engine(dataset)
        world = World(rank, world_size, worker, workers, in_worker=True, parted=True)
        shares = []
        for share in engine.shares(
            world, world.splits(engine.owned_splits()), batch_size=BATCH, columnar=True
        ):
            ids = [] if share.count == 0 else finish(share.items)["id"].tolist()
            shares.append(
                (share.slots.tolist(), share.size, ids, dataset.state_dict()["samples_consumed_per_split"])
            )
        per_worker.append(shares)
    lengths = {len(shares) for shares in per_worker}
    assert len(lengths) == 1, f"the workers cut different numbers of batches: {lengths}"
    batches, counts = [], []
    for number in range(lengths.pop()):
        size = per_worker[0][number][1]
        batch: list[int | None] = [None] * size
        for worker, shares in enumerate(per_worker):
            slots, _, ids, _ = shares[number]
            for slot, sample in zip(slots, ids, strict=True):
                assert batch[slot] is None, f"slot {slot} of batch {number} filled twice (worker {worker})"
                batch[slot] = sample
        assert None not in batch, f"batch {number} has a slot no worker filled"
        states = {tuple(shares[number][3]) for shares in per_worker}
        assert len(states) == 1, f"the workers disagree on the position after batch {number}: {states}"
        batches.append(batch)
        counts.append(list(states.pop()))
    return batches, counts


def sources(uri: str):
    """The three ways to name a table: a LanceDB table, a ``lance.LanceDataset``, a URI."""
    table = lancedb.connect(uri.rsplit("/", 1)[0]).open_table("t")
    return {"lancedb": table, "lance": lance.dataset(uri), "uri": uri}


@pytest.mark.parametrize("kind", ["lancedb", "lance", "uri"])
def test_every_worker_count_gives_the_batches_and_states_of_no_workers(uri, kind):
    table = sources(uri)[kind]
    for world_size in (1, 2, 3) if kind == "lancedb" else (1,):
        for rank in range(world_size):

            def make(rank=rank, world_size=world_size):
                return StreamingDataset(table, shuffle_seed=3, rank=rank, world_size=world_size)

            expected = reference(make)
            counts = (2, 3, 5, 64) if kind == "lancedb" else (3, 8)
            for workers in counts:
                got = assembled(make, workers=workers, rank=rank, world_size=world_size)
                assert got == expected, f"{kind}: k={workers} differs on rank {rank} of {world_size}"


def test_world_sizes_four_and_eight_with_many_worker_counts(uri):
    for world_size in (4, 8):

        def make(world_size=world_size):
            return StreamingDataset(uri, shuffle_seed=1, rank=world_size - 1, world_size=world_size)

        expected = reference(make)
        for workers in (2, 3, 7, 16):
            got = assembled(make, workers=workers, rank=world_size - 1, world_size=world_size)
            assert got == expected, f"k={workers} differs on the last rank of {world_size}"


@pytest.mark.parametrize(("before", "after"), [(3, 0), (0, 5), (2, 3)])
def test_a_state_taken_with_any_worker_count_resumes_on_any_other(uri, before, after):
    """Real worker processes (the loader's default start method), the default num_splits."""

    def make():
        return StreamingDataset(uri, shuffle_seed=8)

    whole, _ = reference(make)
    dataset = make()
    loader = StreamingDataLoader(dataset, batch_size=BATCH, num_workers=before)
    assert len(loader) == len(whole)
    seen = []
    for step, batch in enumerate(loader):
        seen.append(batch["id"].tolist())
        if step == 4 + before:
            break
    state = loader.state_dict()
    resumed = make()
    resumed.load_state_dict(state)
    rest_loader = StreamingDataLoader(resumed, batch_size=BATCH, num_workers=after)
    assert len(rest_loader) == len(whole) - len(seen)
    rest = [batch["id"].tolist() for batch in rest_loader]
    assert seen + rest == whole, f"k={before} then k={after}: not the uninterrupted batches"


def test_workers_read_equal_shares_of_the_rows(tmp_path):
    """Each row is read once over the workers, and the busiest reads at most 1.25x the average."""
    uri = make_table(tmp_path / "big.lance", (3000, 2000))
    for workers in (3, 5):
        dataset = StreamingDataset(uri, shuffle_seed=2)
        # head_start=False: every row is the workers' (a head start has the trainer read the first batches)
        loader = StreamingDataLoader(dataset, batch_size=64, num_workers=workers, head_start=False)
        delivered = sum(len(batch["id"]) for batch in loader)
        stats = dataset.stats()
        read = np.array([stats[f"rows_read_worker_{worker}"] for worker in range(workers)])
        assert read.sum() == delivered == stats["rows_read"] == 5000, read
        assert read.max() <= 1.25 * read.mean(), f"k={workers}: rows read per worker {read.tolist()}"
