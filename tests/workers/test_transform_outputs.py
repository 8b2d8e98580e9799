"""Samples a transform returns that cannot be batched: the error names the key and the sample.

``default_collate`` alone says ``must be real number, not str``, ``stack expects
each tensor to be equal size`` or a bare ``KeyError: 'x'``. The loader's error
names the key, the sample of the batch, the types or shapes seen and the fix, in
the trainer's process (``num_workers=0``) and from DataLoader workers.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from torch.utils.data import default_collate

from streaming import StreamingDataLoader, StreamingDataset, StreamingMixture
from streaming.workers.outputs import collate

from helpers import make_table

BAD_ID = 5


def str_among_floats(batch: pa.RecordBatch) -> list[dict]:
    return [{"x": "oops" if i == BAD_ID else float(i)} for i in batch.column("id").to_pylist()]


def ragged_arrays(batch: pa.RecordBatch) -> list[dict]:
    return [{"x": np.zeros(4 if i == BAD_ID else 3)} for i in batch.column("id").to_pylist()]


def missing_key(batch: pa.RecordBatch) -> list[dict]:
    return [{"y": 1} if i == BAD_ID else {"x": 1.0, "y": 1} for i in batch.column("id").to_pylist()]


EXPECTED = {
    str_among_floats: [
        "key 'x'",
        "holds a str ('oops') where sample 0 holds a float",
        "types seen: float, str",
        "return one type for it from every row of the transform",
    ],
    ragged_arrays: [
        "key 'x'",
        "its shapes differ",
        "has (4,) and sample 0 (3,)",
        "pad or cut it to one size in the transform",
    ],
    missing_key: [
        "key 'x'",
        "is missing from sample",
        "its keys: ['y']",
        "return the same keys for every row from the transform",
    ],
}


@pytest.fixture
def uri(tmp_path) -> str:
    return make_table(tmp_path / "t.lance", [40, 24])


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("transform", list(EXPECTED), ids=lambda function: function.__name__)
def test_a_transform_output_that_cannot_be_batched_names_the_key_the_sample_and_the_fix(
    uri, transform, workers
):
    dataset = StreamingDataset(uri, num_splits=2, shuffle_seed=3, transform=transform)
    loader = StreamingDataLoader(dataset, batch_size=16, num_workers=workers)
    with pytest.raises(TypeError) as caught:
        for _ in loader:
            pass
    message = str(caught.value)
    for part in EXPECTED[transform]:
        assert part in message, message
    assert "of the batch" in message
    assert "default_collate:" in message  # the original error is kept at the end


def test_the_sample_named_is_the_bad_one():
    samples = [{"x": float(i)} for i in range(6)]
    samples[4] = {"x": "oops"}
    with pytest.raises(TypeError, match="sample 4 of the batch holds a str"):
        collate(default_collate, samples)


def test_nested_keys_and_list_lengths_are_named():
    samples = [(i, {"tokens": [1, 2, 3]}) for i in range(4)]
    samples[2] = (2, {"tokens": [1, 2]})
    with pytest.raises(TypeError) as caught:
        collate(default_collate, samples)
    assert "key 1['tokens']" in str(caught.value)
    assert "its lengths differ, sample 2 of the batch has 2 and sample 0 3" in str(caught.value)


def test_a_user_collate_fn_keeps_its_own_errors():
    def mine(samples):
        raise KeyError("mine")

    with pytest.raises(KeyError, match="mine"):
        collate(mine, [{"x": 1}])


def test_samples_that_batch_are_collated_as_default_collate_does():
    samples = [{"x": float(i), "v": np.arange(3) + i, "s": str(i)} for i in range(5)]
    expected, got = default_collate(samples), collate(default_collate, samples)
    assert got.keys() == expected.keys()
    assert got["s"] == expected["s"]
    assert got["x"].equal(expected["x"]) and got["v"].equal(expected["v"])


@pytest.mark.parametrize("workers", [0, 2])
def test_a_mixture_source_transform_output_names_the_key(tmp_path, workers):
    uris = {name: make_table(tmp_path / f"{name}.lance", [24]) for name in ("a", "b")}
    sources = {
        name: StreamingDataset(uri, num_splits=2, transform=str_among_floats) for name, uri in uris.items()
    }
    mixture = StreamingMixture(sources, weights={"a": 0.5, "b": 0.5}, global_batch_size=8, seed=0)
    with pytest.raises(TypeError, match="key 'x' of the samples the transform returned"):
        for _ in StreamingDataLoader(mixture, batch_size=8, num_workers=workers):
            pass
