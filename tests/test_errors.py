"""Bad constructor input: clear errors naming the field, the value and the fix."""

from __future__ import annotations

import pytest

from streaming import StreamingDataset


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
        ({"filter": "label > 100"}, ValueError, r"0 rows to plan but num_splits=1"),
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
