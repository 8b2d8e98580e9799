"""``StreamingDataLoader``: a DataLoader whose checkpoints count what the trainer received."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader, default_collate, default_convert

from ..core.lifecycle import Guarded
from ..dataset import host as hosts
from ..dataset.host import DatasetHost, LoaderHost
from ..workers import seeding
from ..workers.shares import Gathering, single
from ..workers.worker import ReportingCollate
from . import frameworks
from .iterators import Committing
from .launch import Launch
from .registry import served_by
from .settings import (
    Build,
    EpochSampler,
    check_dataset,
    check_picklable,
    checked_keywords,
    options_of,
    start_method,
    untransformed,
)

__all__ = ["StreamingDataLoader"]


class StreamingDataLoader(DataLoader[Any]):
    """A ``DataLoader`` for ``StreamingDataset`` whose state is consumer-committed.

    Every worker batch travels with its worker's progress, committed to the dataset
    only when ``next()`` returns the batch to the trainer, so prefetched batches
    never move the saved position. Takes the arguments of
    ``torch.utils.data.DataLoader`` and yields the same collated batches (with
    ``batch_size=None``, single samples, as a DataLoader does).

    One live iterator per dataset: ``iter(loader)`` closes an older iterator of the
    same dataset that has not finished (its workers stop, its prefetched batches
    are discarded) and continues from the committed position; ``next()`` on the
    older one then raises ``RuntimeError``. Leaving an epoch early and calling
    ``set_epoch`` is normal (see docs/lifecycle.md).

    Any ``num_workers`` works with any dataset: without a ``transform`` each of k
    workers reads about 1/k of the rows of every window of the rank's splits (its
    blocks of them), with one each worker owns whole splits (positions w, w + k,
    ... of the rank's); every batch is assembled in the trainer from one share per
    worker, so the batches are the same for every ``num_workers`` (0 included), each
    row is read once, and the state after any batch is exact and resumes on any
    worker count. A ``collate_fn`` of the user's runs in the trainer on
    the whole batch (it need not be picklable); ``default_collate`` runs in the
    workers on their shares. ``persistent_workers=True`` keeps the workers between
    iterators, each of which continues from the committed position;
    ``drop_last=True`` never yields (nor counts) a short last batch. Without a
    ``multiprocessing_context`` workers start with forkserver (else spawn); fork is
    refused because Lance is not fork-safe. Workers see the trainer's environment
    as it is when they start.

    With workers and no ``transform``, ``iter(loader)`` starts them on a thread and
    the trainer draws the first batches itself until they are up (``head_start=True``,
    the default; see docs/workers.md): the first batch comes as soon as with
    ``num_workers=0``, and the batches and states are the same. ``head_start=False``
    starts the workers first, as torch's DataLoader does (so do mixtures, and
    datasets with a ``transform``, whose work belongs in the workers).

    ``len_counts`` chooses what ``len(loader)`` counts: ``"remaining"`` is the
    batches the next iteration really yields; ``"epoch"`` is the batches of this
    rank's whole epoch, what Lightning, Hugging Face ``transformers`` and
    ``accelerate`` expect (after a restore they run ``len()`` minus the batches
    they already ran); ``"auto"`` (the default) counts the epoch when one of those
    frameworks asks (the first caller outside this package is in its modules) and
    the remaining batches when anyone else does. None changes what is yielded.

    ``Accelerator.prepare`` keeps the loader as it is (each rank already reads only
    its own splits; batches are not moved to a device) and ``save_state`` /
    ``load_state`` save and restore its ``state_dict()`` (docs/interop.md).

    Raises:
        TypeError: ``dataset`` is not a ``StreamingDataset`` or overrides
            ``__iter__``.
        ValueError: a ``batch_size``, ``num_workers``, ``prefetch_factor`` or
            ``timeout`` out of range, an unknown ``len_counts``, ``in_order=False``,
            ``drop_last=True`` with ``batch_size=None``, or a fork context. Any
            ``num_workers`` works with any dataset.
    """

    # Accelerator.prepare keeps this loader; save_state/load_state use its state_dict()
    _is_accelerate_prepared = frameworks.ACCELERATE_FLAGS["_is_accelerate_prepared"]
    use_stateful_dataloader = frameworks.ACCELERATE_FLAGS["use_stateful_dataloader"]
    _workers: int  # ``num_workers``, set once by DataLoader's ``__init__``

    def __new__(cls, dataset: Any = None, *args: Any, **kwargs: Any) -> StreamingDataLoader:
        """A registered kind of dataset (a ``StreamingMixture``) gets its own loader."""
        del args, kwargs
        served = served_by(dataset) if cls is StreamingDataLoader else None
        return super().__new__(cls if served is None else served)

    def __init__(
        self,
        dataset: Any,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Any = None,
        batch_sampler: Any = None,
        num_workers: int = 0,
        collate_fn: Callable[[Any], Any] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = None,
        multiprocessing_context: Any = None,
        generator: Any = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
        len_counts: str = "auto",
        head_start: bool = True,
    ) -> None:
        dataset = self._accept(dataset)
        given = checked_keywords(locals())  # DataLoader's keywords, checked; len_counts too
        build = self._prepare(dataset, given, head_start=bool(head_start), len_counts=len_counts)
        super().__init__(dataset, **build.torch_keywords())
        self._settle(dataset, build)

    @property
    def num_workers(self) -> int:  # type: ignore[override]
        """The worker count the loader was built with (torch's DataLoader reads it here).

        Fixed: setting another count raises ``ValueError`` (each worker's splits were
        checked for this one); build a new loader instead."""
        return self._workers

    @num_workers.setter
    def num_workers(self, value: int) -> None:
        """Set once, by DataLoader's ``__init__``. As torch refuses ``batch_size`` after
        construction, another count is refused: each worker's splits were checked for it."""
        if "_workers" in self.__dict__ and value != self._workers:
            raise ValueError(
                f"num_workers is fixed when a StreamingDataLoader is built (it was {self._workers}, "
                f"got {value!r}): each worker's splits were checked for it; build a new "
                f"StreamingDataLoader(dataset, num_workers={value!r}) instead"
            )
        self._workers = value

    def _prepare(self, dataset: Any, given: dict[str, Any], *, head_start: bool, len_counts: str) -> Build:
        """What is decided before DataLoader's ``__init__``: whether batches are columnar,
        the start method (never fork), that the dataset serves the batch size and worker
        count (``_fit``), and the collation."""
        batch_size, num_workers, collate_fn = given["batch_size"], given["num_workers"], given["collate_fn"]
        columnar = self._columnar_for(
            dataset, collate_fn=collate_fn, batch_size=batch_size, batch_sampler=given["batch_sampler"]
        )
        chosen_here = num_workers > 0 and given["multiprocessing_context"] is None
        if num_workers > 0:
            given["multiprocessing_context"] = start_method(given["multiprocessing_context"])
        self._fit(dataset, batch_size=batch_size, num_workers=num_workers)
        collate, finish = self._collation(collate_fn, given=given, columnar=columnar)
        collate.transforming = seeding.transforming(options_of(dataset))  # for a seeding worker_init_fn
        return Build(
            given,
            collate=collate,
            finish=finish,
            columnar=columnar,
            chosen_here=chosen_here,
            head_start=head_start,
            len_counts=len_counts,
        )

    def _collation(
        self, collate_fn: Callable[[Any], Any] | None, *, given: dict[str, Any], columnar: bool
    ) -> tuple[Any, Callable[[Any], Any] | None]:
        """The DataLoader's ``collate_fn`` (each worker's share, with its report) and what
        the trainer finishes a whole batch with (``None``: nothing)."""
        batched = given["batch_size"] is not None or given["batch_sampler"] is not None
        default = default_collate if batched else default_convert
        collate = self._collate_for(collate_fn or default, given=collate_fn, columnar=columnar)
        # the trainer collates when the user's function (or batch_size=None) needs the whole batch
        finish = collate_fn if collate_fn not in (None, default_collate) else None
        if not batched:
            finish = single(collate_fn or default_convert)
        collate.raw = finish is not None
        return collate, finish

    def _settle(self, dataset: Any, build: Build) -> None:
        """After DataLoader's ``__init__``: the user's ``batch_size`` and ``drop_last``, the
        epoch sampler, the engine, and the launch that starts and gathers the batches."""
        given = build.given
        object.__setattr__(self, "sampler", EpochSampler(dataset))
        object.__setattr__(self, "batch_size", given["batch_size"])  # what the user asked for
        object.__setattr__(self, "drop_last", given["drop_last"])  # kept by the loader's iterator
        gathering = Gathering(
            batch_size=given["batch_size"] or 1,
            drop_last=given["drop_last"],
            finish=build.finish,
            pin=given["pin_memory"] and torch.cuda.is_available(),
            pin_device=given["pin_memory_device"] or None,
        )
        self._streaming = dataset  # the facade (or a registered kind's: a mixture)
        self._host: LoaderHost = self._engine_for(dataset)
        self._launch = Launch(
            self,
            self._host,
            collate=build.collate,
            gathering=gathering,
            columnar=build.columnar,
            chosen_here=build.chosen_here,
            persistent=given["persistent_workers"],
            head_start=self._head_start and build.head_start and untransformed(dataset),
        )
        self._columnar = build.columnar  # whole columnar batches (read by tests)
        self._len_counts = build.len_counts

    # -- hooks a loader registered with ``serves`` overrides ---------------------

    _head_start = True
    """Whether the trainer draws the first batches while the workers start (``headstart``)."""

    def _accept(self, dataset: Any) -> Any:
        """The dataset, checked to be one this class iterates."""
        return check_dataset(dataset)

    def _engine_for(self, dataset: Any) -> LoaderHost:
        """The engine this loader iterates (see ``dataset.host``)."""
        return hosts.dataset_engine(dataset)

    @property
    def _dataset_host(self) -> DatasetHost:
        return hosts.dataset_engine(self._streaming)

    def _fit(self, dataset: Any, *, batch_size: int | None, num_workers: int) -> None:
        """Refuse a batch size or worker count the dataset cannot serve (a dataset serves
        any of either: which worker reads which rows is the loader's business)."""
        del dataset, batch_size, num_workers

    def _columnar_for(
        self, dataset: Any, *, collate_fn: Any, batch_size: int | None, batch_sampler: Any
    ) -> bool:
        """Whether the dataset may yield whole columnar batches, which equal default_collate's:
        the default collate, no transform, no packing, a batch size and no batch sampler."""
        options = hosts.dataset_engine(dataset).options
        plain = collate_fn in (None, default_collate) and options.transform is None
        return plain and options.pack_sequences is None and batch_size is not None and batch_sampler is None

    def _collate_for(self, collate: Callable[[Any], Any], *, given: Any, columnar: bool) -> Any:
        """The DataLoader's ``collate_fn``: ``collate`` (``given``, else the default)
        attaching each worker's report."""
        del given
        return ReportingCollate(collate, columnar=columnar)

    def _new_iterator(self) -> Guarded:
        """A new iterator of this loader (not yet begun)."""
        return Committing(self, self._launch, self._dataset_host)

    def _counts_epoch(self) -> bool:
        """Whether this ``len()`` counts the whole epoch (see ``len_counts``)."""
        whole = self._len_counts == "epoch" or (self._len_counts == "auto" and frameworks.counts_epochs())
        self._launch.framework_counts |= whole
        return whole

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        """Yield batches; each one's progress is committed as it is returned.

        Closes an older iterator of the same dataset that has not finished. With an
        endless dataset, each epoch ends with its last (possibly short) batches and
        the same iterator goes on with the next epoch's, on new worker processes.
        """
        host = self._host
        if self.num_workers > 0:
            for keyword, function in host.user_functions():
                check_picklable(keyword, function)
        host.supersede("iter(loader)")
        iterator = self._new_iterator()
        host.hold(iterator)
        return iterator

    def __len__(self) -> int:
        """Batches the next iteration yields: the rank's samples left over the batch size,
        rounded up (down with ``drop_last=True``, which never yields the short one).

        With ``len_counts="epoch"`` (and ``"auto"`` when an epoch-counting framework
        asks): the batches of this rank's whole epoch instead, however much of it was
        delivered (as torchdata and Lightning count; for an endless dataset exactly
        one epoch's batches, so a framework's epochs line up with the dataset's).

        Raises:
            TypeError: an endless dataset when ``len()`` counts what remains.
        """
        dataset, batch_size = self._dataset_host, self.batch_size or 1
        whole = self._counts_epoch()
        if dataset.endless and not whole:
            raise TypeError(
                "the loader of an endless StreamingDataset has no len(): it moves into the next "
                "epoch by itself; pass len_counts='epoch' for the batches of one epoch (what "
                "Lightning needs to fetch no batch ahead), or count steps"
            )
        remaining = dataset.remaining(whole=whole)
        total = sum(remaining[split] for split in dataset.owned_splits())
        return total // batch_size if self.drop_last else -(-total // batch_size)

    def replay_allowance(self) -> int:
        """Most batches a resume from ``state_dict()`` delivers again: 0.

        Every batch is assembled from all workers' shares and ends at an exact
        position, so a state taken after any batch resumes with nothing repeated.
        Kept for code written against earlier releases.
        """
        return 0

    def state_dict(self, *, strict: bool = False) -> dict[str, Any]:
        """The dataset state after the last batch returned: exact, for any ``num_workers``.

        ``strict`` is accepted for code written against earlier releases and changes
        nothing.

        Raises:
            RuntimeError: an evaluation dataset.
        """
        del strict
        return self._streaming.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Forward to ``StreamingDataset.load_state_dict``."""
        self._streaming.load_state_dict(state)

    def set_epoch(self, epoch: int) -> None:
        """Forward to ``StreamingDataset.set_epoch``."""
        self._streaming.set_epoch(epoch)
