"""Bad constructor input: clear errors naming the field, the value and the fix."""

from __future__ import annotations

import json

import numpy as np
import pytest

from streaming import StreamingDataset, load_state_dict

from helpers import json_roundtrip, make_table


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"num_splits": 500}, ValueError, r"121 rows to plan but num_splits=500.*num_splits <= 121"),
        ({"num_splits": 6, "world_size": 4}, ValueError, r"num_splits=6 is not divisible by world_size=4"),
        ({"shuffle_seed": None, "world_size": 2}, ValueError, r"shuffle_seed=None with world_size=2"),
        ({"num_splits": 0}, ValueError, r"num_splits must be a positive integer, got 0"),
        ({"rank": 2, "world_size": 2}, ValueError, r"rank must be in \[0, world_size=2\), got rank=2"),
        ({"epoch": -1}, ValueError, r"epoch must be a non-negative integer, got -1"),
        ({"shuffle_seed": -3}, ValueError, r"shuffle_seed must be a non-negative integer"),
        ({"block_rows": 0}, ValueError, r"block_rows must be a positive integer, got 0"),
        ({"columns": ["id", "nope"]}, ValueError, r"names \['nope'\].*choose from"),
        ({"columns": []}, ValueError, r"columns must be a non-empty list"),
        ({"filter": "no_such_column > 1"}, ValueError, r"filter='no_such_column > 1' could not be applied"),
        ({"filter": "label > 100"}, ValueError, r"no rows to plan: .* the filter matches no live row"),
        ({"columns": ["id", "id"]}, ValueError, r"columns must be a non-empty list of distinct column names"),
        (
            {"storage_options": "x"},
            ValueError,
            r"storage_options must be a dict of object-store options .*got a str",
        ),
        ({"tag_snapshot": "yes"}, ValueError, r"tag_snapshot must be True or False, got a str"),
        ({"connection_factory": 123}, ValueError, r"connection_factory must be a callable .*got a int"),
        (
            {"pad_id": 1 << 63, "pack_sequences": 8, "eos_id": 1, "blocks_per_epoch": 8},
            ValueError,
            r"pad_id must be a token id",
        ),
        ({"transform": 3}, ValueError, r"transform must be a callable or None, got 3"),
        ({"pack_sequences": 128}, ValueError, r"pack_sequences needs eos_id; pass eos_id="),
        ({"eos_id": 2}, ValueError, r"eos_id=2 is only used with pack_sequences"),
        (
            {"pack_sequences": 8, "eos_id": 1, "pad_id": 0, "blocks_per_epoch": 10, "num_splits": 4},
            ValueError,
            r"blocks_per_epoch=10 is not divisible by num_splits=4.*for example 8",
        ),
        (
            {"pack_sequences": 8, "eos_id": 1, "pad_id": 0, "blocks_per_epoch": 8},
            ValueError,
            r"pack_sequences packs one column of integer lists .*pass columns=\[<token column>\]",
        ),
        ({"on_transform_error": "ignore"}, ValueError, r"on_transform_error must be .raise., .skip., .warn."),
    ],
)
def test_bad_settings_are_refused(small_uri, kwargs, error, message):
    with pytest.raises(error, match=message):
        StreamingDataset(small_uri, **kwargs)


def test_bad_table_type(small_uri):
    with pytest.raises(TypeError, match=r"table must be a LanceDB table, a lance\.LanceDataset or a URI"):
        StreamingDataset(42)


def test_missing_table_is_an_error(tmp_path):
    with pytest.raises(ValueError):
        StreamingDataset(str(tmp_path / "missing.lance"))


def test_an_empty_table_says_so(tmp_path):
    uri = make_table(tmp_path / "t.lance", [5], deleted=range(5))
    with pytest.raises(ValueError, match=r"no rows to plan: it is empty, or every row is deleted"):
        StreamingDataset(uri)


def test_numpy_integers_are_taken_for_every_integer_keyword(small_uri):
    data = StreamingDataset(
        small_uri, num_splits=np.int64(4), shuffle_seed=np.int32(3), epoch=np.int64(1), block_rows=np.int16(8)
    )
    data.set_epoch(np.int64(2))
    state = data.state_dict()
    assert json_roundtrip(state) == state and type(state["num_splits"]) is int
    assert data.epoch == 2 and state["shuffle_seed"] == 3


def test_a_whole_checkpoint_passed_as_a_state_names_the_key(small_uri):
    data = StreamingDataset(small_uri, num_splits=2)
    checkpoint = {"model": {}, "dataset": data.state_dict(), "step": 3}
    with pytest.raises(ValueError, match=r"whole checkpoint, not a state: .* pass checkpoint\['dataset'\]"):
        data.load_state_dict(checkpoint)


def test_a_damaged_checkpoint_file_is_named(small_uri, tmp_path):
    path = tmp_path / "checkpoint.json"
    path.write_text(json.dumps(StreamingDataset(small_uri, num_splits=2).state_dict())[:40])
    with pytest.raises(ValueError, match=r"checkpoint.json is not a state written by save_state_dict"):
        load_state_dict(StreamingDataset(small_uri, num_splits=2), path)
