"""Small collated tensors travel from workers by value and come back identical."""

from __future__ import annotations

import collections
import pickle
from multiprocessing.reduction import ForkingPickler

import pytest
import torch
import torch.multiprocessing
from torch.utils.data import default_collate

from streaming import StreamingDataLoader, StreamingDataset
from streaming.workers import byvalue

from helpers import make_table

Pair = collections.namedtuple("Pair", "a b")


def through_pipe(batch):
    """What a worker's message becomes in the trainer (torch's own pickler)."""
    return pickle.loads(ForkingPickler.dumps(batch))


def assert_identical(got, want):
    assert type(got) is type(want)
    if isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype and got.shape == want.shape and got.stride() == want.stride()
        assert torch.equal(got, want)
    elif isinstance(want, dict):
        assert list(got) == list(want)
        for key in want:
            assert_identical(got[key], want[key])
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for left, right in zip(got, want):
            assert_identical(left, right)
    else:
        assert got == want


DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
DTYPES += [torch.float16, torch.float32, torch.float64, torch.complex64, torch.complex128]


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_comes_back_identical(dtype):
    batch = {"x": (torch.arange(24) % 3).to(dtype).reshape(2, 3, 4), "n": [torch.zeros(0, dtype=dtype)]}
    packed, done = byvalue.pack(batch)
    assert done
    assert not any(isinstance(value, torch.Tensor) for value in [packed["x"], *packed["n"]])
    assert_identical(byvalue.unpack(through_pipe(packed)), batch)


def test_nested_plain_containers_and_other_values():
    batch = {
        "ids": torch.arange(4),
        "vec": [torch.ones(4), torch.zeros(4)],
        "t": (torch.tensor(1.5), "s"),
        "k": 3,
    }
    packed, done = byvalue.pack(batch)
    assert done
    assert_identical(byvalue.unpack(through_pipe(packed)), batch)


def test_other_containers_travel_as_they_are():
    batch = {"pair": Pair(torch.arange(3), torch.arange(3)), "ids": torch.arange(2)}
    packed, done = byvalue.pack(batch)
    assert done and isinstance(packed["pair"].a, torch.Tensor), "the namedtuple is not walked"
    assert_identical(byvalue.unpack(through_pipe(packed)), batch)


@pytest.mark.parametrize(
    "tensor",
    [
        torch.arange(10)[2:5],  # a view
        torch.arange(12).reshape(3, 4).t(),  # not contiguous
        torch.ones(3, requires_grad=True),
        torch.ones(3, dtype=torch.bfloat16),
        torch.nn.Parameter(torch.ones(3), requires_grad=False),
        torch.zeros(byvalue.MAX_BYTES // 8 + 1, dtype=torch.float64),  # large: shared memory wins
    ],
    ids=["view", "transposed", "grad", "bfloat16", "subclass", "large"],
)
def test_a_tensor_that_could_not_come_back_identical_leaves_the_batch_alone(tensor):
    batch = {"ids": torch.arange(3), "odd": tensor}
    packed, done = byvalue.pack(batch)
    assert not done and packed is batch


def test_a_tensor_twice_leaves_the_batch_alone():
    shared = torch.arange(3)
    packed, done = byvalue.pack({"a": shared, "b": shared})
    assert not done and packed["a"] is packed["b"]


def rows_with_lists(batch):
    return [{"id": row["id"], "vec": [float(row["id"])] * 3, "tag": "t"} for row in batch.to_pylist()]


@pytest.mark.parametrize("context", [None, "spawn"])
def test_worker_batches_equal_default_collate_of_their_rows(tmp_path, context):
    uri = make_table(tmp_path / "t.lance", [50, 50])
    data = StreamingDataset(uri, num_splits=2, shuffle_seed=5, transform=rows_with_lists)
    batches = list(StreamingDataLoader(data, batch_size=10, num_workers=2, multiprocessing_context=context))
    assert sorted(i for batch in batches for i in batch["id"].tolist()) == list(range(100))
    for batch in batches:
        rows = [{"id": i, "vec": [float(i)] * 3, "tag": "t"} for i in batch["id"].tolist()]
        assert_identical(batch, default_collate(rows))
        tensors = [batch["id"], *batch["vec"]]
        assert not any(tensor.is_shared() for tensor in tensors), "sent one shared-memory file each"
