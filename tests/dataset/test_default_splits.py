"""A dataset built without ``num_splits`` moves between the world sizes jobs use.

The default S is chosen for the table (``core/splits.py``), recorded in every state,
and adopted from a checkpoint by a dataset whose S was defaulted: a checkpoint of
another table size, another world size's default, or an earlier release (one split
per rank, plan format 1) resumes with nothing lost or repeated.
"""

from __future__ import annotations

from collections import Counter

import lance
import numpy as np
import pyarrow as pa
import pytest

from streaming import StreamingDataLoader, StreamingDataset
from streaming.core.plan import EpochPlan, PlanSettings
from streaming.core.splits import COMMON_WORLD_SIZES

from helpers import live_ids
from reference import locate


def write(uri: str, start: int, count: int, *, mode: str = "create") -> str:
    """``count`` rows with ids start.., in fragments of 25,000 rows."""
    ids = np.arange(start, start + count, dtype=np.int64)
    table = pa.table({"id": ids, "label": (ids % 7).astype(np.int32)})
    lance.write_dataset(table, uri, mode=mode, max_rows_per_file=25_000)
    return uri


def read_steps(
    datasets: list[StreamingDataset], *, batch_size: int, steps: int | None, workers: int = 0
) -> list[int]:
    """Every rank's ids over ``steps`` batches (all of them: None); ``workers`` on rank 0
    (without a head start, so that the workers deliver every batch)."""
    ids: list[int] = []
    for rank, data in enumerate(datasets):
        k = workers if rank == 0 else 0
        loader = StreamingDataLoader(data, batch_size=batch_size, num_workers=k, head_start=k == 0)
        iterator = iter(loader)
        for step, batch in enumerate(iterator):
            ids += batch["id"].tolist()
            if steps is not None and step + 1 == steps:
                break
        del iterator
    return ids


def ranks(uri: str, world_size: int, state: dict | None = None) -> list[StreamingDataset]:
    """A defaulted dataset per rank of ``world_size``, each resuming ``state`` if given."""
    datasets = [
        StreamingDataset(uri, columns=["id"], rank=rank, world_size=world_size) for rank in range(world_size)
    ]
    for data in datasets:
        if state is not None:
            data.load_state_dict(state)
    return datasets


def test_a_run_with_the_defaults_moves_between_world_sizes_with_workers(tmp_path):
    """200,000 rows with some deleted: S = 192 on every common world size; 4 ranks ->
    3 ranks (k=2 workers on rank 0) -> 8 ranks deliver every planned row once."""
    uri = write(str(tmp_path / "t.lance"), 0, 200_000)
    lance.dataset(uri).delete("id % 997 = 5")
    plans = {size: ranks(uri, size)[0] for size in COMMON_WORLD_SIZES}
    assert {data.num_splits for data in plans.values()} == {192}
    assert len({str(data.state_dict()["plan"]) for data in plans.values()}) == 1  # one plan for all
    first = ranks(uri, 4)
    seen = read_steps(first, batch_size=96, steps=5)
    merged = StreamingDataset.merge_state_dicts([data.state_dict() for data in first])
    second = ranks(uri, 3, merged)
    seen += read_steps(second, batch_size=128, steps=4, workers=2)
    merged = StreamingDataset.merge_state_dicts([data.state_dict() for data in second])
    assert merged["num_splits"] == 192
    seen += read_steps(ranks(uri, 8, merged), batch_size=48, steps=None)
    counts = Counter(seen)
    assert max(counts.values()) == 1
    assert len(counts) == 192 * plans[1].split_length
    assert set(counts) <= live_ids(uri)


def test_a_checkpoint_of_an_earlier_release_resumes_on_its_own_plan(tmp_path):
    """A state as an earlier release wrote it (one split per rank at 2 ranks, plan
    format 1): a defaulted dataset (S = 4 here) adopts S = 2 and format 1 and delivers
    exactly the rest of that plan."""
    uri = write(str(tmp_path / "t.lance"), 0, 5_000)
    old = StreamingDataset(uri, num_splits=2, shuffle_seed=5, columns=["id"]).state_dict()
    old["plan"]["plan_format"] = 1  # everything else of that release's state is the same
    old["samples_consumed_per_split"] = old["positions_consumed_per_split"] = [3, 3]
    data = StreamingDataset(uri, shuffle_seed=5, columns=["id"])
    assert data.num_splits == 4
    data.load_state_dict(old)
    assert (data.num_splits, data.state_dict()["plan"]["plan_format"]) == (2, 1)
    plan = old["plan"]
    settings = PlanSettings(2, True, 5, 0, plan["block_rows"], plan["window_rows"], 1, plan_format=1)
    fragments = lance.dataset(uri).get_fragments()
    reference = EpochPlan([f.fragment_id for f in fragments], [f.count_rows() for f in fragments], settings)
    starts = dict(
        zip([f.fragment_id for f in fragments], np.cumsum([0] + [f.count_rows() for f in fragments]))
    )
    expected = []
    for position in range(3, reference.split_length):
        for split in (0, 1):
            fragment, offset = locate(reference, split, position)
            expected.append(int(starts[fragment] + offset))
    assert [int(sample["id"]) for sample in data] == expected


def test_a_grown_table_resumes_its_checkpoints_own_splits(tmp_path):
    """Saved at 110,000 rows (S = 96), resumed after the table grew to 210,000 (its
    default now 192): the pinned version and S = 96 are adopted, every row once; a
    world size that does not divide 96 is refused, naming num_splits and what works."""
    uri = write(str(tmp_path / "t.lance"), 0, 110_000)
    first = ranks(uri, 2)
    assert first[0].num_splits == 96
    seen = read_steps(first, batch_size=64, steps=3)
    state = StreamingDataset.merge_state_dicts([data.state_dict() for data in first])
    write(uri, 110_000, 100_000, mode="append")
    assert ranks(uri, 1)[0].num_splits == 192
    with pytest.raises(
        ValueError, match=r"num_splits=96, which world_size=5 does not divide.*1, 2, 3, 4, 6, 8"
    ):
        StreamingDataset(uri, rank=0, world_size=5).load_state_dict(state)
    seen += read_steps(ranks(uri, 3, state), batch_size=64, steps=None)
    counts = Counter(seen)
    assert max(counts.values()) == 1 and set(counts) <= set(range(110_000))
    assert len(counts) == 96 * (110_000 // 96)


def test_a_given_num_splits_keeps_its_meaning(tmp_path):
    """An explicit S is never replaced: by the default, or by a checkpoint's (refused)."""
    uri = write(str(tmp_path / "t.lance"), 0, 5_000)
    assert StreamingDataset(uri, num_splits=3).num_splits == 3
    state = StreamingDataset(uri).state_dict()
    with pytest.raises(ValueError, match=r"num_splits"):
        StreamingDataset(uri, num_splits=2).load_state_dict(state)


def test_batches_smaller_than_the_default_splits_mix_the_table(tmp_path):
    """G12 with the default S (192 on 200,000 label-sorted rows): batches of 32 hold at
    least 0.8x the distinct labels of a uniform permutation's."""
    rows, labels = 200_000, 100
    table = pa.table({"label": np.repeat(np.arange(labels, dtype=np.int32), rows // labels)})
    uri = str(tmp_path / "sorted.lance")
    lance.write_dataset(table, uri, max_rows_per_file=rows // 16)
    data = StreamingDataset(uri)
    assert data.num_splits == 192
    batches = [
        batch["label"].numpy() for _, batch in zip(range(400), StreamingDataLoader(data, batch_size=32))
    ]
    uniform = (
        np.random.default_rng(0).permutation(table.column("label").to_numpy())[: 400 * 32].reshape(400, 32)
    )
    ours = np.mean([len(set(batch.tolist())) for batch in batches])
    ratio = ours / np.mean([len(set(batch.tolist())) for batch in uniform])
    assert ratio >= 0.8, f"mixing ratio {ratio:.3f}"
