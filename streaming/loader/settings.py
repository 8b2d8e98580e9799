"""What a ``StreamingDataLoader`` checks of its arguments, how it is put together
(``Build``), and the sampler it installs.

Shared by the loader of a dataset and the loader of a mixture (``mixture/loader.py``):
the dataset, the start method (never fork), the refused DataLoader options, the counts,
what ``len()`` counts, and that the functions workers run can be pickled.
"""

from __future__ import annotations

import multiprocessing
import numbers
import operator
import pickle
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from torch.utils.data import Sampler

from ..core.options import Options
from ..dataset import host as hosts
from ..dataset.dataset import StreamingDataset
from ..dataset.host import LoaderHost
from ..workers.worker import WorkerInit

__all__ = [
    "DATALOADER_KEYWORDS",
    "LEN_COUNTS",
    "SAFE_METHODS",
    "Build",
    "EpochSampler",
    "check_dataset",
    "check_len_counts",
    "check_options",
    "check_picklable",
    "checked_keywords",
    "checked_numbers",
    "options_of",
    "start_method",
    "untransformed",
]

SAFE_METHODS = ("forkserver", "spawn")
LEN_COUNTS = ("auto", "remaining", "epoch")
DATALOADER_KEYWORDS = (
    "batch_size",
    "shuffle",
    "sampler",
    "batch_sampler",
    "num_workers",
    "collate_fn",
    "pin_memory",
    "drop_last",
    "timeout",
    "worker_init_fn",
    "multiprocessing_context",
    "generator",
    "prefetch_factor",
    "persistent_workers",
    "pin_memory_device",
    "in_order",
)
"""The ``torch.utils.data.DataLoader`` keywords ``StreamingDataLoader`` takes (``dataset``
aside) and hands on to it, changed where the loader needs to (``checked_keywords``)."""


@dataclass(frozen=True)
class Build:
    """How one loader is put together, decided before torch's ``DataLoader.__init__``."""

    given: dict[str, Any]  # the DataLoader keywords, checked, with the start method chosen
    collate: Any  # the DataLoader's collate_fn: one process's share, with its report
    finish: Callable[[Any], Any] | None  # what the trainer finishes a whole batch with
    columnar: bool  # the dataset may yield whole columnar batches
    chosen_here: bool  # the loader chose the start method (not the user)
    head_start: bool  # the user's keyword
    len_counts: str  # the user's keyword (checked)

    def torch_keywords(self) -> dict[str, Any]:
        """What torch's ``DataLoader.__init__`` gets besides the dataset: each item is one
        process's share of a batch, collated by ``collate``; batching and dropping are the
        loader's own."""
        workers = self.given["num_workers"]
        init = self.given["worker_init_fn"]
        return {
            **self.given,
            "batch_size": None,  # each item is one process's share of a batch (``Share``)
            "collate_fn": self.collate,
            "drop_last": False,
            "worker_init_fn": WorkerInit(init) if workers > 0 else init,
        }


def start_method(context: Any) -> Any:
    """The multiprocessing context to use: never fork (Lance is not fork-safe)."""
    if context is None:
        available = multiprocessing.get_all_start_methods()
        return multiprocessing.get_context("forkserver" if "forkserver" in available else "spawn")
    name = context if isinstance(context, str) else context.get_start_method()
    if name == "fork":
        raise ValueError(
            "multiprocessing_context='fork' is refused: a worker forked from a process that "
            "has used Lance can hang or crash; use one of "
            f"{', '.join(repr(m) for m in SAFE_METHODS)} (or leave it unset for the default)"
        )
    return context


class EpochSampler(Sampler[None]):
    """The sampler of an IterableDataset loader (``None`` forever), with ``set_epoch``.

    Lightning sets the epoch through ``loader.sampler.set_epoch``.
    """

    def __init__(self, dataset: LoaderHost) -> None:
        self._dataset = dataset

    def __iter__(self) -> Iterator[None]:
        while True:
            yield None

    def set_epoch(self, epoch: int) -> None:
        """Forward to ``StreamingDataset.set_epoch``; ignored for an endless dataset,
        whose epochs are its own (a framework's epoch counter stays at 0 there)."""
        if not self._dataset.endless:
            self._dataset.set_epoch(epoch)


def check_options(*, in_order: bool, batch_size: int | None, drop_last: bool) -> None:
    """Refuse the DataLoader options the loader cannot honour (``in_order=False``), and
    those a DataLoader refuses too (``drop_last=True`` with ``batch_size=None``)."""
    if drop_last and batch_size is None:
        raise ValueError(
            "StreamingDataLoader refuses drop_last=True with batch_size=None: without batches there "
            "is no short last batch to drop (torch's DataLoader refuses the pair too); pass a "
            "batch_size, or leave drop_last=False to yield single samples"
        )
    if not in_order:
        raise ValueError(
            "StreamingDataLoader refuses in_order=False: batches must reach the trainer in the "
            "order they were planned; leave it at its default"
        )


def _whole(value: object, *, low: int, allow_none: bool) -> bool:
    if value is None:
        return allow_none
    try:
        return not isinstance(value, bool) and operator.index(value) >= low  # type: ignore[arg-type]
    except TypeError:
        return False


_NUMBERS: tuple[tuple[str, int, bool, str], ...] = (
    ("batch_size", 1, True, "a positive integer, or None to yield single samples"),
    ("num_workers", 0, False, "a non-negative integer"),
    ("prefetch_factor", 1, True, "a positive integer or None"),
)


def checked_numbers(values: dict[str, Any]) -> dict[str, Any]:
    """The counts as plain ints (numpy integers too) and ``timeout`` as a float.

    Refuses a bad one now, naming it, rather than with an IndexError mid-epoch.
    """
    for name, low, allow_none, expected in _NUMBERS:
        if not _whole(values[name], low=low, allow_none=allow_none):
            raise ValueError(f"StreamingDataLoader needs {name} to be {expected}, got {values[name]!r}")
    timeout = values["timeout"]
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or timeout < 0:
        raise ValueError(f"StreamingDataLoader needs timeout to be a non-negative number, got {timeout!r}")
    counts = {name: None if values[name] is None else operator.index(values[name]) for name, *_ in _NUMBERS}
    return {**counts, "timeout": float(timeout)}


def check_len_counts(len_counts: str) -> None:
    if len_counts not in LEN_COUNTS:
        raise ValueError(
            f"len_counts must be one of {', '.join(map(repr, LEN_COUNTS))}, got {len_counts!r}; "
            "use 'epoch' with frameworks that count len() as the whole epoch (Lightning)"
        )


def checked_keywords(values: Mapping[str, Any]) -> dict[str, Any]:
    """The DataLoader keywords of ``values`` (the loader's ``locals()``), checked: the
    counts as plain ints and ``timeout`` as a float (``checked_numbers``), the refused
    options (``check_options``) and ``values["len_counts"]`` (``check_len_counts``)."""
    given = {name: values[name] for name in DATALOADER_KEYWORDS}
    given.update(checked_numbers(given))
    check_options(in_order=given["in_order"], batch_size=given["batch_size"], drop_last=given["drop_last"])
    check_len_counts(values["len_counts"])
    return given


def check_dataset(dataset: object) -> StreamingDataset:
    """``dataset``, checked to be a ``StreamingDataset`` whose samples the loader can count."""
    if not isinstance(dataset, StreamingDataset):
        raise TypeError(
            f"StreamingDataLoader needs a streaming.StreamingDataset, got {type(dataset).__name__}; "
            "use torch.utils.data.DataLoader for other datasets"
        )
    if type(dataset).__iter__ is not StreamingDataset.__iter__:
        raise TypeError(
            f"{type(dataset).__name__} overrides __iter__, so StreamingDataLoader cannot know "
            "which samples reached the trainer; transform samples with transform= or "
            "collate_fn= instead of overriding __iter__"
        )
    return dataset


def untransformed(dataset: object) -> bool:
    """Whether ``dataset`` has no ``transform``: only then does the trainer draw the first
    batches itself (a transform run there would draw from the trainer's own random
    generators as many times as the start took, and take the trainer's CPU)."""
    options = options_of(dataset)
    return options is not None and options.transform is None


def options_of(dataset: object) -> Options | None:
    """The settings of a ``StreamingDataset`` (``None`` for a registered kind's iterable)."""
    return hosts.dataset_engine(dataset).options if isinstance(dataset, StreamingDataset) else None


def check_picklable(keyword: str, function: object) -> None:
    if not callable(function):
        return
    try:
        pickle.dumps(function)
    except Exception as error:
        name = getattr(function, "__qualname__", type(function).__qualname__)
        module = getattr(function, "__module__", "?")
        raise TypeError(
            f"{keyword} {module}.{name} cannot be pickled for worker processes ({error}); "
            "define it at module level (not a lambda or a nested function) or use num_workers=0"
        ) from None
