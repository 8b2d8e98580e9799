"""The public API: exports, drop-in keywords, docstrings, import purity."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest
from torch.utils.data import DataLoader, IterableDataset

import streaming
from streaming import StreamingDataLoader, StreamingDataset, StreamingMixture

API_PAGE = Path(__file__).resolve().parents[2] / "docs" / "api.md"
ACCELERATE_FLAGS = {"use_stateful_dataloader"}
"""What ``accelerate`` reads on a loader to keep it as it is (docs/interop.md)."""

PEER_KEYWORDS = {
    "num_splits": None,
    "shuffle": True,
    "shuffle_seed": 0,
    "epoch": 0,
    "read_batch_size": 64,
    "io_queue_depth": 4,
    "prefetch_batches": None,
    "columns": None,
    "shuffle_clump_size": None,
    "filter": None,
    "transform": None,
    "transform_parallelism": None,
    "transform_queue_depth": None,
    "pack_sequences": None,
    "eos_id": None,
    "pad_id": None,
    "blocks_per_epoch": None,
    "on_transform_error": "raise",
    "connection_factory": None,
    "worker_info_override": None,
}


def test_all_is_sorted_and_complete():
    assert streaming.__all__ == sorted(streaming.__all__)
    assert sorted(streaming._HOMES) == streaming.__all__
    for name in streaming.__all__:
        assert getattr(streaming, name).__doc__, f"{name} has no docstring"


def test_constructor_takes_the_peers_keywords_with_the_same_defaults():
    parameters = inspect.signature(StreamingDataset.__init__).parameters
    for name, default in PEER_KEYWORDS.items():
        assert name in parameters, name
        assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY, name
        assert parameters[name].default == default, name
    # Documented difference: rank/world_size default to the process group's.
    assert parameters["rank"].default is None and parameters["world_size"].default is None


def test_pure_modules_import_neither_torch_nor_lance():
    code = (
        "import sys, streaming.core.plan, streaming.state.format, streaming.state.merge;"
        "print(sorted(m for m in ('torch', 'lance', 'lancedb') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"


def test_public_methods_are_documented():
    for name, member in inspect.getmembers(StreamingDataset):
        if not name.startswith("_") and callable(member):
            assert member.__doc__, name


def test_every_internal_module_declares_its_names():
    """Modules are internal unless re-exported; each says what it offers with __all__."""
    import importlib
    import pkgutil

    for module in pkgutil.walk_packages(streaming.__path__, "streaming."):
        if module.name.rsplit(".", 1)[-1].startswith("_"):
            continue
        loaded = importlib.import_module(module.name)
        assert hasattr(loaded, "__all__"), f"{module.name} has no __all__"
        assert all(hasattr(loaded, name) for name in loaded.__all__), module.name


def test_no_file_sends_readers_to_a_contract_the_repository_does_not_have():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    design = "DESIGN" + ".md"
    for folder in ("streaming", "tests", "docs", "benchmarks", "notebooks", "scripts"):
        for path in (root / folder).rglob("*"):
            if path.is_file() and path.suffix in {".py", ".md", ".ipynb", ".sh", ".yml", ".toml"}:
                assert design not in path.read_text(errors="ignore"), f"{path} mentions {design}"
    assert design not in (root / "README.md").read_text()


def documented_members() -> dict[str, set[str]]:
    """Each class block of the API page -> the names of its ``members:`` list."""
    found = {}
    for block in API_PAGE.read_text().split(":::")[1:]:
        listed = re.search(r"^\s+members: \[(.*)\]$", block, flags=re.MULTILINE)
        if listed is not None:
            found[block.split()[0]] = {name.strip() for name in listed.group(1).split(",")}
    return found


@pytest.mark.parametrize(
    ("cls", "torch_base", "extra"),
    [
        (StreamingDataset, IterableDataset, set()),
        (StreamingDataLoader, DataLoader, ACCELERATE_FLAGS),
        (StreamingMixture, IterableDataset, set()),
    ],
    ids=["StreamingDataset", "StreamingDataLoader", "StreamingMixture"],
)
def test_each_public_class_has_exactly_the_members_the_api_page_documents(cls, torch_base, extra):
    """The package's own plumbing lives in engines (``streaming.dataset.host``), not here."""
    public = {name for name in dir(cls) if not name.startswith("_")}
    own = public - {name for name in dir(torch_base) if not name.startswith("_")} - extra
    documented = documented_members()[f"streaming.{cls.__name__}"]
    assert own == documented, (
        f"{cls.__name__}: public but not on docs/api.md: {sorted(own - documented)}; "
        f"on the page but not public: {sorted(documented - own)}"
    )
    for name in documented:
        assert getattr(cls, name).__doc__, f"{cls.__name__}.{name} has no docstring"
