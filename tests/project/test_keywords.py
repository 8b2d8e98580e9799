"""``StreamingDataset``'s keywords are declared once, in ``streaming/core/keywords.py``.

The facade's typed signature, its docstring (what docs/api.md renders) and the checks
that refuse a wrong value each follow that table: a keyword added to one and not the
others fails here, naming it. ``StreamingDataLoader`` hands its DataLoader keywords
(``loader/settings.py`` ``DATALOADER_KEYWORDS``) on to torch as its signature has them.
"""

from __future__ import annotations

import inspect
import re

import pytest
from torch.utils.data import DataLoader

from streaming import StreamingDataLoader, StreamingDataset
from streaming.core import keywords
from streaming.dataset.build import build_engine
from streaming.loader.settings import DATALOADER_KEYWORDS

UNCHECKED = {
    "worker_info_override": "a testing hook: anything with id and num_workers, read in the worker",
}
"""Keywords no check refuses when the dataset is built, with why."""


def test_the_signature_has_exactly_the_declared_keywords_and_defaults_in_order():
    parameters = inspect.signature(StreamingDataset.__init__).parameters.values()
    assert [p.name for p in parameters if p.kind is not inspect.Parameter.KEYWORD_ONLY] == ["self", "table"]
    declared = [(p.name, p.default) for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY]
    assert declared == list(keywords.DEFAULTS.items())


def documented() -> list[str]:
    """The names the class docstring's ``Args:`` section documents, in its order."""
    text = inspect.cleandoc(StreamingDataset.__doc__ or "")
    section = text.split("\nArgs:\n", 1)[1].split("\n\n", 1)[0]
    return re.findall(r"^    (\w+): ", section, flags=re.MULTILINE)


def test_the_docstring_documents_every_keyword_in_the_signatures_order():
    assert documented() == ["table", *keywords.DEFAULTS]


@pytest.mark.parametrize("name", sorted(set(keywords.DEFAULTS) - set(UNCHECKED)))
def test_every_keyword_is_checked_when_the_dataset_is_built(name):
    """A wrong value is refused before the table is opened, naming the keyword."""
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        build_engine("/no/such/table.lance", {**keywords.DEFAULTS, name: object()})


def test_given_takes_the_declared_keywords_and_refuses_a_signature_without_one():
    values = {"self": None, "table": "t", **keywords.DEFAULTS, "shuffle": False}
    assert keywords.given(values) == {**keywords.DEFAULTS, "shuffle": False}
    del values["blobs"]
    with pytest.raises(TypeError, match="blobs"):
        keywords.given(values)


def test_the_loader_hands_every_dataloader_keyword_of_its_signature_on_to_torch():
    """``StreamingDataLoader``'s body passes ``DATALOADER_KEYWORDS`` to ``DataLoader``:
    every keyword of its signature but ``dataset`` and its own ``len_counts`` and ``head_start``."""
    ours = list(inspect.signature(StreamingDataLoader.__init__).parameters)
    assert ours == ["self", "dataset", *DATALOADER_KEYWORDS, "len_counts", "head_start"]
    assert set(DATALOADER_KEYWORDS) <= set(inspect.signature(DataLoader.__init__).parameters)
