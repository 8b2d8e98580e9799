"""Every public exception and warning of lance-streaming.

Hierarchy::

    ValueError
     ├── SnapshotGoneError        the Lance version a checkpoint pins is gone
     └── TransformContractError   a transform returned another number of samples than rows
    UserWarning
     └── StreamingWarning         base of every warning, so users can filter them all
          ├── CacheWarning
          │    └── CacheUnusedWarning
          ├── EpochCompleteWarning
          ├── TableMovedWarning
          ├── UnownedSplitsWarning
          ├── TransformErrorWarning
          ├── SeededTransformWarning
          ├── PackingEstimateWarning
          ├── PartialStateWarning
          └── TorchrunStoreWarning

Everything else raises the built-in exceptions: ``ValueError`` for bad settings or
states, ``TypeError`` for wrong types, ``RuntimeError`` for calls made at the wrong
time (each message says what to do instead).
"""

from __future__ import annotations

__all__ = [
    "CacheUnusedWarning",
    "CacheWarning",
    "EpochCompleteWarning",
    "PackingEstimateWarning",
    "PartialStateWarning",
    "SeededTransformWarning",
    "SnapshotGoneError",
    "StreamingWarning",
    "TableMovedWarning",
    "TorchrunStoreWarning",
    "TransformContractError",
    "TransformErrorWarning",
    "UnownedSplitsWarning",
]


class SnapshotGoneError(ValueError):
    """The Lance version a checkpoint pins no longer exists (see ``tag_snapshot=True``)."""


class TransformContractError(ValueError):
    """A ``transform`` returned another number of samples than its batch had rows.

    Never treated as a bad row by ``on_transform_error``: the transform itself is wrong.
    """


class StreamingWarning(UserWarning):
    """Base class of every warning lance-streaming emits."""


class CacheWarning(StreamingWarning):
    """The local cache of a table on object storage could not be used (a full disk, a folder that
    cannot be written); this process reads from object storage instead, exactly as
    without the cache. Warned once per process and table."""


class CacheUnusedWarning(CacheWarning):
    """``cache_dir=`` was passed for a table on local disk, which the cache never copies
    (nothing would be gained); the table is read where it is. Warned once per process
    and table."""


class EpochCompleteWarning(StreamingWarning):
    """An iterator was started on an epoch that was already fully delivered."""


class TableMovedWarning(StreamingWarning):
    """A checkpoint names another table URI than the dataset (tables get copied)."""


class UnownedSplitsWarning(StreamingWarning):
    """A merge found splits that no state owned; their lockstep counts were used."""


class TransformErrorWarning(StreamingWarning):
    """``on_transform_error="warn"`` dropped rows the transform failed on."""


class SeededTransformWarning(StreamingWarning):
    """A ``worker_init_fn`` seeded the global random generators while the transform runs
    on several threads: draws from them change from run to run (use ``transform_rng=True``)."""


class PackingEstimateWarning(StreamingWarning):
    """``blocks_per_epoch="auto"`` estimated the block budget from a sample."""


class PartialStateWarning(StreamingWarning):
    """``load_state_dict`` found ``<file>.partial`` beside a state file: the leftover of a
    ``save_state_dict`` that was killed mid-write. It is never read (the complete file
    is); the next ``save_state_dict`` to that path replaces it."""


class TorchrunStoreWarning(StreamingWarning):
    """A multi-node torchrun job that may restart shares the agent's store with its workers.

    torch's c10d rendezvous keeps that store from one attempt to the next, so a
    restarted process group reads the previous attempt's keys and fails to
    connect, or waits out its timeout (pytorch/pytorch#135712). Set
    ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` in every agent's environment.
    """
