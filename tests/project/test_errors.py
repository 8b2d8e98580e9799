"""Bad input and first-day mistakes: clear errors naming the field, the value and the fix."""

from __future__ import annotations

import ast
import builtins
import json
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import pyarrow as pa
import pytest

import streaming
from streaming import StreamingDataset, TransformContractError, load_state_dict

from helpers import json_roundtrip, make_table


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"num_splits": 500}, ValueError, r"121 rows to plan but num_splits=500.*num_splits <= 121"),
        ({"num_splits": 6, "world_size": 4}, ValueError, r"num_splits=6 is not divisible by world_size=4"),
        ({"shuffle_seed": None, "world_size": 2}, ValueError, r"shuffle_seed=None with world_size=2"),
        (
            {"num_splits": 0},
            ValueError,
            r"num_splits must be greater than 0 \(an integer\), got 0; pass .*num_splits=1, or None",
        ),
        (
            {"rank": 2, "world_size": 2},
            ValueError,
            r"rank must be in \[0, world_size=2\), got rank=2; pass rank=0 up to 1",
        ),
        ({"epoch": -1}, ValueError, r"epoch must be a non-negative integer, got -1; pass epoch=0 or more"),
        (
            {"shuffle_seed": -3},
            ValueError,
            r"shuffle_seed must be a non-negative integer.*got -3; pass .*shuffle_seed=0",
        ),
        (
            {"shuffle_seed": "42"},
            ValueError,
            r"shuffle_seed must be .*, got '42'; pass shuffle_seed=42 \(an integer, not the str '42'\)",
        ),
        (
            {"epoch": 2.0},
            ValueError,
            r"epoch must be .*, got 2.0; pass epoch=2 \(an integer, not the float 2.0\)",
        ),
        (
            {"block_rows": 0},
            ValueError,
            r"block_rows must be greater than 0 \(an integer\), got 0; pass block_rows=1",
        ),
        (
            {"transform_parallelism": 0},
            ValueError,
            r"transform_parallelism must be greater than 0 .*got 0; pass transform_parallelism=1 or more",
        ),
        (
            {"transform_parallelism": -1},
            ValueError,
            r"transform_parallelism must be greater than 0 .*got -1; pass",
        ),
        (
            {"columns": ["id", "nope"]},
            ValueError,
            r"cannot select column `nope` because it does not exist.*use names it has: \['id'",
        ),
        ({"columns": []}, ValueError, r"columns must be a non-empty list"),
        ({"filter": "no_such_column > 1"}, ValueError, r"filter='no_such_column > 1' could not be applied"),
        (
            {"filter": "label > 100"},
            ValueError,
            r"no rows to plan: .* the filter matches no live row.*at least 1 row per split",
        ),
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
        ({"transform": 3}, ValueError, r"transform must be a callable or None, got 3; pass a function"),
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
    """Settings are refused when the dataset is built; what the table's version cannot
    plan (rows, columns, filter, packing) when it is first used (len() here), so a
    load_state_dict can pin another version first (G10)."""
    with pytest.raises(error, match=message):
        len(StreamingDataset(small_uri, **kwargs))


def test_bad_table_type(small_uri):
    with pytest.raises(TypeError, match=r"table must be a LanceDB table, a lance\.LanceDataset or a URI"):
        StreamingDataset(42)


def test_missing_table_is_an_error(tmp_path):
    with pytest.raises(ValueError):
        StreamingDataset(str(tmp_path / "missing.lance"))


def _no_rows(kind: str, folder: Path) -> dict[str, Any]:
    """Arguments of a dataset with nothing to plan: a table with no rows, all rows deleted, or a
    filter that matches none."""
    if kind == "no rows":
        schema = pa.schema([("id", pa.int64()), ("x", pa.float32())])
        return {"table": lancedb.connect(str(folder)).create_table("empty", schema=schema)}
    if kind == "every row deleted":
        return {"table": make_table(folder / "t.lance", [5, 3], deleted=range(8))}
    return {"table": make_table(folder / "t.lance", [5, 3]), "filter": "id > 100"}


@pytest.mark.parametrize("kind", ["no rows", "every row deleted", "filter matches nothing"])
@pytest.mark.parametrize("num_splits", [None, 4])
def test_a_table_without_rows_to_plan_says_so(tmp_path, kind, num_splits):
    """Not "use num_splits <= 0": no number of splits would help, rows or the filter must change."""
    kwargs = _no_rows(kind, tmp_path) | ({} if num_splits is None else {"num_splits": num_splits})
    with pytest.raises(ValueError) as error:
        len(StreamingDataset(**kwargs))
    message = str(error.value)
    assert (
        "no rows to plan: it is empty, or every row is deleted, or the filter matches no live row" in message
    )
    assert "num_splits" not in message, message


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
    with pytest.raises(
        ValueError, match=r"checkpoint.json is not a state written by save_state_dict"
    ) as error:
        load_state_dict(StreamingDataset(small_uri, num_splits=2), path)
    assert type(error.value) is ValueError, "a bare JSONDecodeError says neither which file nor what to do"
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"checkpoint.json holds a JSON list, not a state dict"):
        load_state_dict(StreamingDataset(small_uri, num_splits=2), path)


def test_a_broken_transform_raises_a_public_exception(small_uri):
    data = StreamingDataset(small_uri, num_splits=2, transform=lambda batch: batch.to_pylist()[1:])
    with pytest.raises(TransformContractError) as error:
        list(data)
    assert (
        type(error.value) is TransformContractError and TransformContractError.__name__ in streaming.__all__
    )


def _exception_classes(path: Path, known: set[str]) -> list[str]:
    """Classes of a module that derive from a built-in exception or from one of ``known``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ClassDef):
            continue
        bases = {base.id if isinstance(base, ast.Name) else getattr(base, "attr", "") for base in node.bases}
        builtin = {name for name in bases if isinstance(getattr(builtins, name, None), type)}
        if bases & known or any(issubclass(getattr(builtins, name), BaseException) for name in builtin):
            found.append(node.name)
    return found


def test_no_private_exception_can_reach_users():
    """Every exception or warning class the package defines anywhere is public and exported.

    A private one (an internal ``_CountMismatch`` once reached users) would show its name in
    tracebacks and could not be caught by name.
    """
    files = sorted(Path(streaming.__file__).parent.rglob("*.py"))
    known: set[str] = set()
    while True:  # classes deriving from the package's own exceptions, to a fixed point
        found = {(path.name, name) for path in files for name in _exception_classes(path, known)}
        if {name for _, name in found} <= known:
            break
        known |= {name for _, name in found}
    assert known, "no exception class found: the scan is broken"
    private = sorted(f"{file}:{name}" for file, name in found if name not in streaming.__all__)
    assert not private, f"exception classes users cannot import from streaming: {private}"


def test_too_few_rows_raise_at_first_use_not_when_the_dataset_is_built(tmp_path):
    """N < num_splits is refused when the version is first used (``len``, ``iter``,
    ``state_dict``), so a resume can still pin a version that has enough rows (G10)."""
    uri = make_table(tmp_path / "t.lance", [5])
    dataset = StreamingDataset(uri, num_splits=8)  # built: nothing is planned yet
    for use in (lambda: len(dataset), lambda: next(iter(dataset)), dataset.state_dict):
        with pytest.raises(ValueError, match=r"5 rows to plan but num_splits=8; .*use num_splits <= 5"):
            use()


def test_construction_warnings_point_at_the_callers_line(small_uri, tmp_path):
    """A warning raised while a dataset is built names the line that built it (so a user's
    ``filterwarnings`` by module, and the message's location, are theirs), through the
    facade and its engine's builder."""
    import lance

    from streaming import CacheUnusedWarning, PackingEstimateWarning

    tokens = str(tmp_path / "tokens.lance")
    lance.write_dataset(pa.table({"tokens": pa.array([[3, 4, 5]] * 40, pa.list_(pa.int32()))}), tokens)
    with pytest.warns(CacheUnusedWarning) as cache:
        StreamingDataset(small_uri, cache_dir=str(tmp_path / "cache"))
    with pytest.warns(PackingEstimateWarning) as packing:
        StreamingDataset(
            tokens, columns=["tokens"], pack_sequences=4, eos_id=1, pad_id=0, blocks_per_epoch="auto"
        )
    assert [record.filename for record in (*cache, *packing)] == [__file__] * 2
