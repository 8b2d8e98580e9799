"""The declared protocol between loaders and what they iterate (``streaming.dataset.host``)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from mixtures import make_tables, mixture

from streaming import StreamingDataLoader, StreamingDataset, StreamingMixture
from streaming.core.lifecycle import Guarded, Lifecycle
from streaming.dataset import host

API_PAGE = Path(__file__).resolve().parents[1] / "docs" / "api.md"
PROTOCOLS = (host.LoaderHost, host.DatasetHost, host.MixtureHost, host.MixtureSource)
USER_FACING_IN_PROTOCOLS = {"endless", "set_epoch", "state_dict"}  # public API the protocol also relies on


def protocol_names() -> set[str]:
    names: set[str] = set()
    for protocol in PROTOCOLS:
        names |= {name for name in vars(protocol) if not name.startswith("_")}
    return names - USER_FACING_IN_PROTOCOLS


def api_members() -> dict[str, list[str]]:
    """Each class block of the API page -> its ``members:`` list."""
    found = {}
    for block in API_PAGE.read_text().split(":::")[1:]:
        target = block.split()[0]
        listed = re.search(r"^\s+members: \[(.*)\]$", block, flags=re.MULTILINE)
        if listed is not None:
            found[target] = [name.strip() for name in listed.group(1).split(",")]
    return found


@pytest.fixture(scope="module")
def uris(tmp_path_factory) -> dict[str, str]:
    return make_tables(tmp_path_factory.mktemp("host"))


def test_datasets_and_mixtures_implement_the_protocols(uris):
    mixed = mixture(uris)
    data = next(iter(mixed.sources.values()))
    assert isinstance(data, host.DatasetHost) and isinstance(data, host.MixtureSource)
    assert isinstance(mixed, host.MixtureHost) and not isinstance(mixed, host.DatasetHost)


def test_the_api_page_lists_the_user_facing_members_and_none_of_the_protocol():
    members = api_members()
    classes = {
        "streaming.StreamingDataset": StreamingDataset,
        "streaming.StreamingDataLoader": StreamingDataLoader,
        "streaming.StreamingMixture": StreamingMixture,
    }
    assert set(classes) <= set(members)
    internal = protocol_names() | {"begin_iteration", "start", "serves"}
    for target, cls in classes.items():
        assert all(hasattr(cls, name) for name in members[target]), target
        assert not internal & set(members[target]), target


class _Items(Guarded):
    """A Guarded iterator over a list, for the lifecycle's own rules."""

    def __init__(self, items: list[int]) -> None:
        super().__init__("iter(items)")
        self._items = iter(items)

    @property
    def busy(self) -> bool:
        return False

    def _advance(self) -> int:
        return next(self._items)

    def _release(self) -> None:
        pass


def test_one_lifecycle_ships_pickles_and_keeps_an_unstarted_iterator_across_set_epoch():
    lifecycle = Lifecycle()
    unstarted = _Items([1, 2])
    lifecycle.live.hold(unstarted)
    assert lifecycle.set_epoch(1) is None and unstarted.live  # it follows the new epoch
    assert next(unstarted) == 1
    with pytest.raises(RuntimeError, match=r"cannot load_state_dict while iter\(items\) has not finished"):
        lifecycle.refuse_started("load_state_dict")
    with lifecycle.shipping():
        loaders = lifecycle.pickled(for_child=True)
    assert loaders.for_loader and loaders.trainer_pid == os.getpid() and not lifecycle.shipped
    assert unstarted.live, "a loader's pickle leaves the live iterator alone"
    plain = lifecycle.pickled(for_child=True)
    assert not plain.for_loader and lifecycle.shipped and not unstarted.live
    with pytest.raises(RuntimeError, match="closed by the worker processes of a plain DataLoader"):
        next(unstarted)
