"""The ``StreamingDataLoader`` of a ``StreamingMixture``: one loader batch is one global step's share.

``StreamingDataLoader(mixture, ...)`` builds this class. Worker w of k yields the
rank's batches w, w + k, ... counted from the committed position; the DataLoader
hands them out in order, so the trainer's n-th batch is global step n, and the
state after it is exact (no replay) on any topology.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import default_collate

from ..core.lifecycle import Guarded
from ..dataset import host as hosts
from ..dataset.host import LoaderHost, MixtureHost
from ..loader.headstart import HeadStart
from ..loader.iterators import BatchIterator
from ..loader.launch import Launch
from ..loader.loader import StreamingDataLoader
from ..loader.registry import serves
from ..workers.shares import Shares
from .mixture import StreamingMixture

__all__ = ["MixtureLoader"]


@serves(StreamingMixture)
class MixtureLoader(StreamingDataLoader):
    """``StreamingDataLoader`` over a ``StreamingMixture`` (built by ``StreamingDataLoader``).

    Takes the base's arguments; only the hooks below differ.
    """

    _head_start = False  # a mixture's workers start before its first batch

    def _accept(self, dataset: Any) -> Any:
        return dataset  # built only for a StreamingMixture (``serves``)

    def _engine_for(self, dataset: Any) -> LoaderHost:
        return hosts.mixture_engine(dataset)

    @property
    def _mixture_host(self) -> MixtureHost:
        return hosts.mixture_engine(self.dataset)

    def _fit(self, dataset: Any, *, batch_size: int | None, num_workers: int) -> None:
        """The loader's batch is one global batch's share of this rank."""
        del num_workers  # worker w of k reads the splits at positions w, w + k, ...: any count fits
        if batch_size != dataset.batch_size:
            raise ValueError(
                f"batch_size={batch_size!r} but one global batch of this mixture on this rank is "
                f"{dataset.batch_size} samples (global_batch_size={dataset.global_batch_size} over "
                f"world_size={dataset.world_size}); pass batch_size={dataset.batch_size}"
            )

    def _columnar_for(
        self, dataset: Any, *, collate_fn: Any, batch_size: int | None, batch_sampler: Any
    ) -> bool:
        """Whole columnar batches: the default collate, no batch sampler, no source transform."""
        del batch_size  # always one global batch's share
        return (
            collate_fn in (None, default_collate)
            and batch_sampler is None
            and all(hosts.source_engine(data).options.transform is None for data in dataset.sources.values())
        )

    def _new_iterator(self) -> Guarded:
        return _MixtureBatches(self, self._launch, self._mixture_host)

    def __len__(self) -> int:
        """Batches the next iteration yields; with ``len_counts="epoch"`` (or ``"auto"``
        when an epoch-counting framework asks), the batches of the whole epoch (for
        ``stop="never"``: the batches until its first source would run out, a fixed
        length frameworks can count epochs by; the stream itself goes on).

        Raises:
            TypeError: ``stop="never"`` when ``len()`` counts what remains.
        """
        mixture = self._streaming
        if self._counts_epoch():
            return self._mixture_host.epoch_steps()
        if mixture.endless:
            raise TypeError(
                "the loader of a StreamingMixture with stop='never' has no len(); count steps, or "
                "pass len_counts='epoch' for a fixed epoch length (what Lightning needs to fetch "
                "no batch ahead)"
            )
        return len(mixture) // mixture.batch_size

    def replay_allowance(self) -> int:
        """0: a mixture's state is exact after every batch the loader returns."""
        return 0

    def state_dict(self, *, strict: bool = False) -> dict[str, Any]:
        """The mixture's state after the last batch returned (exact; ``strict`` changes nothing)."""
        del strict
        return self._streaming.state_dict()

    def load_state_dict(self, state: dict[str, Any], *, reweight: bool = False) -> None:
        """Forward to ``StreamingMixture.load_state_dict``."""
        self._streaming.load_state_dict(state, reweight=reweight)

    def set_epoch(self, epoch: int) -> None:
        """Forward to ``StreamingMixture.set_epoch``."""
        self._streaming.set_epoch(epoch)


class _MixtureBatches(BatchIterator):
    """The DataLoader's batches; each one moves the mixture's position as it is returned."""

    def __init__(self, loader: MixtureLoader, launch: Launch, mixture: MixtureHost) -> None:
        super().__init__(loader, launch)
        self._mixture = mixture

    def _shares_of(self, batches: Iterator[Any] | HeadStart) -> Shares:
        """Every process's shares, sorted and assembled, with workers or without (the
        mixture's batches never take ``Launch.shares``' plain path nor a head start)."""
        if isinstance(batches, HeadStart):
            raise TypeError("a mixture's loader starts its workers without a head start")
        return Shares(batches, workers=self._launch.num_workers)

    def _draw(self) -> Any:
        while True:
            drawn = self._launch.gather(self._shares)
            if drawn is not None:
                return drawn

    def _delivered(self, drawn: Any) -> Any:
        items, batch = drawn
        if self._launch.num_workers > 0:  # with none, the mixture's own iterator moved it
            self._mixture.commit_step()
            for item in items:
                if item.report is not None:
                    self._mixture.commit_counters(item.report)
        return batch
