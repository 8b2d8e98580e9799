"""Sequence packing: blocks of N tokens, the same on every topology, resumed exactly."""

from __future__ import annotations

import lance
import numpy as np
import pyarrow as pa
import pytest

from streaming import PackingEstimateWarning, StreamingDataLoader, StreamingDataset

from helpers import ids_of, json_roundtrip

EOS, PAD, N = 1, 0, 16


def document(doc_id: int, length: int) -> list[int]:
    """Tokens of document ``doc_id``: distinct across the table, never EOS or PAD."""
    return [1000 * (doc_id + 1) + j for j in range(length)]


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    """150 documents of 0..12 tokens in three fragments, 6 deleted."""
    path = str(tmp_path_factory.mktemp("packing") / "docs.lance")
    lengths = np.random.default_rng(7).integers(0, 13, size=150)
    lengths[[3, 80]] = 0  # empty documents still end with EOS
    for index, (start, stop) in enumerate([(0, 50), (50, 110), (110, 150)]):
        table = pa.table(
            {
                "id": pa.array(range(start, stop), pa.int64()),
                "tokens": pa.array(
                    [document(i, int(lengths[i])) for i in range(start, stop)], pa.list_(pa.int32())
                ),
            }
        )
        lance.write_dataset(table, path, mode="create" if index == 0 else "append")
    lance.dataset(path).delete("id IN (7, 8, 60, 61, 120, 149)")
    return path


def packed(uri: str, *, blocks: int | str = 80, num_splits: int = 4, **kwargs) -> StreamingDataset:
    return StreamingDataset(
        uri,
        num_splits=num_splits,
        shuffle_seed=3,
        block_rows=4,
        shuffle_buffer_size=32,
        columns=["tokens"],
        pack_sequences=N,
        eos_id=EOS,
        blocks_per_epoch=blocks,
        **{"pad_id": PAD, **kwargs},
    )


def blocks_of(data) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    return [(tuple(b["input_ids"].tolist()), tuple(b["doc_ids"].tolist())) for b in data]


def split_streams(uri: str, num_splits: int) -> list[list[int]]:
    """Each split's token stream: its documents in plan order, each followed by EOS."""
    plain = StreamingDataset(uri, num_splits=num_splits, shuffle_seed=3, block_rows=4, shuffle_buffer_size=32)
    docs = ids_of(plain)
    lengths = {
        int(i): len(t)
        for i, t in zip(*lance.dataset(uri).to_table(columns=["id", "tokens"]).to_pydict().values())
    }
    streams = []
    for split in range(num_splits):
        streams.append([t for doc in docs[split::num_splits] for t in [*document(doc, lengths[doc]), EOS]])
    return streams


def by_split(blocks: list, owned: list[int], start: dict[int, int] | None = None) -> dict[int, list]:
    """Blocks of one iterator (k = 0) by split: by level (from ``start``, the blocks each
    split had delivered), inside a level in split order."""
    result: dict[int, list] = {split: [] for split in owned}
    levels = {split: 0 for split in owned} | (start or {})
    for block in blocks:
        split = min(owned, key=lambda s: (levels[s], s))
        result[split].append(block)
        levels[split] += 1
    return result


def test_each_split_emits_its_token_stream_in_blocks(uri):
    blocks = blocks_of(packed(uri))
    assert len(blocks) == 80 and all(len(ids) == N for ids, _ in blocks)
    streams = split_streams(uri, 4)
    for split, split_blocks in by_split(blocks, [0, 1, 2, 3]).items():
        tokens = [t for ids, _ in split_blocks for t in ids]
        stream = streams[split]
        assert len(stream) <= len(tokens), "the budget of 20 blocks per split should hold every token"
        assert tokens[: len(stream)] == stream, f"split {split}: tokens lost, repeated or reordered"
        assert set(tokens[len(stream) :]) <= {PAD}, "only padding after the stream"


def test_every_token_appears_exactly_once(uri):
    tokens = [t for ids, _ in blocks_of(packed(uri)) for t in ids if t not in (EOS, PAD)]
    table = lance.dataset(uri).to_table(columns=["tokens"])
    expected = [t for doc in table.column("tokens").to_pylist() for t in doc]
    assert len(tokens) == len(set(tokens)), "a token appears twice"
    assert set(tokens) <= set(expected)
    planned = set(
        ids_of(StreamingDataset(uri, num_splits=4, shuffle_seed=3, block_rows=4, shuffle_buffer_size=32))
    )
    from_planned = {t for t in expected if t // 1000 - 1 in planned}
    assert set(tokens) == from_planned, "a token of a planned document is missing"


def test_doc_ids_count_documents_inside_each_block(uri):
    for ids, docs in blocks_of(packed(uri)):
        assert docs[0] == 0
        for position in range(1, N):
            ended = ids[position - 1] == EOS and ids[position] != PAD
            assert docs[position] == docs[position - 1] + (1 if ended else 0), (ids, docs)


def test_the_budget_pads_dry_splits_and_cuts_long_ones(uri):
    short = blocks_of(packed(uri, blocks=8))  # 2 blocks per split: tokens beyond are dropped
    assert len(short) == 8 and PAD not in {t for ids, _ in short for t in ids}
    streams = split_streams(uri, 4)
    for split, split_blocks in by_split(short, [0, 1, 2, 3]).items():
        assert [t for ids, _ in split_blocks for t in ids] == streams[split][: 2 * N]
    long = blocks_of(packed(uri, blocks=400))
    assert len(long) == 400 and long[-1][0] == (PAD,) * N


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_blocks_are_the_same_for_every_world_size(uri, world_size):
    reference = by_split(blocks_of(packed(uri, num_splits=12, blocks=36)), list(range(12)))
    for rank in range(world_size):
        data = packed(uri, num_splits=12, blocks=36, rank=rank, world_size=world_size)
        for split, split_blocks in by_split(blocks_of(data), data.owned_splits()).items():
            assert split_blocks == reference[split], f"split {split} differs with world_size={world_size}"


def loader_blocks(loader: StreamingDataLoader) -> list:
    """Blocks of a loader's batches, in order."""
    return [
        (tuple(ids.tolist()), tuple(docs.tolist()))
        for batch in loader
        for ids, docs in zip(batch["input_ids"], batch["doc_ids"], strict=True)
    ]


def test_worker_processes_give_the_same_blocks(uri):
    """G3: the batches of two workers are those of none, block for block."""
    reference = blocks_of(packed(uri, num_splits=12, blocks=36))
    loader = StreamingDataLoader(
        packed(uri, num_splits=12, blocks=36), batch_size=5, num_workers=2, timeout=120
    )
    assert loader_blocks(loader) == reference


@pytest.mark.parametrize("pad", [PAD, -100, np.int64(-1)])
def test_resume_from_every_block_position_is_exact(uri, pad):
    """Also with the negative pad ids training code uses (-100 is ignored by the loss)."""
    full = blocks_of(packed(uri, blocks=72, pad_id=pad))
    assert any(int(pad) in ids for ids, _ in full), "the budget must pad some split"
    for prefix in range(len(full) + 1):
        first = packed(uri, blocks=72, pad_id=pad)
        iterator = iter(first)
        got = [next(iterator) for _ in range(prefix)]
        state = json_roundtrip(first.state_dict())
        iterator.close()
        committed = sum(state["samples_consumed_per_split"])
        assert committed == prefix, "every block handed out is counted (G7)"
        assert blocks_of(got) == full[:prefix]
        resumed = packed(uri, blocks=72, pad_id=pad)
        resumed.load_state_dict(state)
        assert len(resumed) == len(full) - committed
        if committed == len(full):
            continue
        assert full[:committed] + blocks_of(resumed) == full, f"prefix {prefix}"


def test_merged_ranks_resume_on_another_world_size(uri):
    reference = by_split(blocks_of(packed(uri, num_splits=12, blocks=96)), list(range(12)))
    states, before = [], {}
    for rank in range(3):
        data = packed(uri, num_splits=12, blocks=96, rank=rank, world_size=3)
        iterator = iter(data)
        got = blocks_of(next(iterator) for _ in range(4 * 5))  # 5 cycles of 4 splits
        before.update(by_split(got, data.owned_splits()))
        states.append(json_roundtrip(data.state_dict()))
        iterator.close()
    merged = json_roundtrip(StreamingDataset.merge_state_dicts(states))
    for rank in range(2):
        data = packed(uri, num_splits=12, blocks=96, rank=rank, world_size=2)
        data.load_state_dict(merged)
        for split, rest in by_split(blocks_of(data), data.owned_splits()).items():
            assert before[split] + rest == reference[split], f"split {split}"


@pytest.mark.parametrize("new_world", [1, 4])
def test_a_partial_cycle_resumed_on_another_world_size_keeps_ranks_equal(uri, new_world):
    """4 splits, 2 ranks at 3 blocks each (a partial cycle), resumed on 4 ranks: each rank
    has as many blocks left; a rank that would be short gives back its last block, which
    it rebuilds from the start of its split's stream. Nothing is lost; at most one block
    per rank comes again."""
    reference = by_split(blocks_of(packed(uri, blocks=24)), [0, 1, 2, 3])
    states, before = [], {}
    for rank in range(2):
        data = packed(uri, blocks=24, rank=rank, world_size=2)
        iterator = iter(data)
        got = blocks_of(next(iterator) for _ in range(3))
        before.update(by_split(got, data.owned_splits()))
        states.append(json_roundtrip(data.state_dict()))
        iterator.close()
    merged = json_roundtrip(StreamingDataset.merge_state_dicts(states))
    assert merged["samples_consumed_per_split"] == [2, 2, 1, 1]
    lengths, again = [], 0
    for rank in range(new_world):
        data = packed(uri, blocks=24, rank=rank, world_size=new_world)
        data.load_state_dict(merged)
        lengths.append(len(data))
        counts = data.state_dict()["samples_consumed_per_split"]
        start = {split: counts[split] for split in data.owned_splits()}
        rest = by_split(blocks_of(data), data.owned_splits(), start)
        for split, blocks in rest.items():
            done = before.get(split, [])
            kept = len(reference[split]) - len(blocks)
            assert kept in (len(done), len(done) - 1), f"split {split}: at most one block again"
            again += len(done) - kept
            assert done[:kept] + blocks == reference[split], f"split {split}"
    assert len(set(lengths)) == 1, f"ranks of {new_world} get {lengths} blocks"
    assert again <= new_world - 1


def test_one_ranks_state_resumes_the_other_rank_in_lockstep(uri):
    """Rank 0's state holds rank 1's splits only as lockstep counts: rank 1 rebuilds them."""
    reference = by_split(blocks_of(packed(uri, num_splits=4, blocks=24)), [0, 1, 2, 3])
    data = packed(uri, blocks=24, rank=0, world_size=2)
    iterator = iter(data)
    for _ in range(2 * 3):
        next(iterator)
    state = json_roundtrip(data.state_dict())
    iterator.close()
    assert state["samples_consumed_per_split"] == [3, 3, 3, 3]
    assert state["packing"]["anchors"][1] == [0, 0, 0], "an unowned split keeps its start anchor"
    other = packed(uri, blocks=24, rank=1, world_size=2)
    other.load_state_dict(state)
    for split, rest in by_split(blocks_of(other), [1, 3]).items():
        assert rest == reference[split][3:]


def test_workers_resume_through_the_loader_state(uri):
    """G5, G7: a state after a batch that ends inside a cycle resumes with nothing repeated."""
    reference = blocks_of(packed(uri, num_splits=4, blocks=32))
    loader = StreamingDataLoader(packed(uri, blocks=32), batch_size=3, num_workers=2, timeout=120)
    iterator = iter(loader)
    for _ in range(5):  # 15 blocks: three cycles and three blocks of the fourth
        next(iterator)
    state = json_roundtrip(loader.state_dict())
    del iterator
    assert sum(state["samples_consumed_per_split"]) == 15
    resumed = packed(uri, blocks=32)
    resumed.load_state_dict(state)
    rest = loader_blocks(StreamingDataLoader(resumed, batch_size=3, num_workers=2, timeout=120))
    assert rest == reference[15:]


def test_auto_budget_warns_and_is_recorded(uri):
    with pytest.warns(PackingEstimateWarning, match=r"estimated \d+ blocks .*Pass blocks_per_epoch=\d+"):
        data = packed(uri, blocks="auto")
    blocks = data.state_dict()["packing"]["blocks_per_epoch"]
    assert blocks % 4 == 0 and len(data) == blocks
    assert len(blocks_of(data)) == blocks


def test_a_packing_state_is_refused_by_other_settings(uri):
    state = packed(uri).state_dict()
    with pytest.raises(
        ValueError, match=r"packing=\[16, 1, 0, 80\] but this dataset has packing=\[16, 1, 0, 40\]"
    ):
        packed(uri, blocks=40).load_state_dict(state)
    plain = StreamingDataset(
        uri, num_splits=4, shuffle_seed=3, block_rows=4, shuffle_buffer_size=32, columns=["tokens"]
    )
    with pytest.raises(ValueError, match=r"checkpoint has packing=.*pack_sequences, eos_id"):
        plain.load_state_dict(state)


def token_table(path, tokens_type: pa.DataType) -> str:
    """40 documents of 5 tokens each, stored as ``tokens_type``."""
    documents = [document(i, 5) for i in range(40)]
    tokens = pa.array(documents, pa.list_(pa.int32())).cast(tokens_type)
    lance.write_dataset(pa.table({"id": pa.array(range(40), pa.int64()), "tokens": tokens}), str(path))
    return str(path)


def test_a_fixed_size_list_token_column_packs_as_the_same_lists_do(tmp_path):
    fixed = token_table(tmp_path / "fixed.lance", pa.list_(pa.int32(), 5))
    plain = token_table(tmp_path / "plain.lance", pa.list_(pa.int32()))
    assert lance.dataset(fixed).schema.field("tokens").type == pa.list_(pa.int32(), 5)
    fixed_blocks = blocks_of(packed(fixed, blocks=12))
    assert fixed_blocks == blocks_of(packed(plain, blocks=12))
    assert len(fixed_blocks) == 12
    with pytest.warns(PackingEstimateWarning, match="estimated 12 blocks"):  # 40 * 6 tokens / 16
        packed(fixed, blocks="auto")


def test_a_token_column_of_another_type_is_refused_naming_the_type(tmp_path):
    path = str(tmp_path / "floats.lance")
    lance.write_dataset(pa.table({"tokens": pa.array([[1.0, 2.0]] * 8, pa.list_(pa.float32()))}), path)
    with pytest.raises(
        ValueError,
        match=r"column 'tokens' is list<item: float>; the accepted types are list, large_list and "
        r"fixed_size_list of any integer type",
    ):
        len(packed(path, blocks=4))  # what the table's version holds is checked at the first use
