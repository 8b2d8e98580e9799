"""Stream a Lance table into PyTorch with exact, elastic checkpoint/resume.

Public names are imported lazily, so ``import streaming.core.plan`` or
``import streaming.state.format`` loads neither torch nor Lance.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .dataset.dataset import StreamingDataset
    from .distributed import gather_state_dict, gather_stats, load_state_dict, save_state_dict
    from .errors import (
        CacheUnusedWarning,
        CacheWarning,
        EpochCompleteWarning,
        PackingEstimateWarning,
        PartialStateWarning,
        SeededTransformWarning,
        SnapshotGoneError,
        StreamingWarning,
        TableMovedWarning,
        TorchrunStoreWarning,
        TransformContractError,
        TransformErrorWarning,
        UnownedSplitsWarning,
    )
    from .loader.hf import StreamingTrainerCallback, StreamingTrainerMixin
    from .loader.loader import StreamingDataLoader
    from .mixture.mixture import StreamingMixture
    from .profiling.findings import LoaderProfile
    from .profiling.run import profile
    from .samples.blobhandle import BlobHandle

__all__ = [
    "BlobHandle",
    "CacheUnusedWarning",
    "CacheWarning",
    "EpochCompleteWarning",
    "LoaderProfile",
    "PackingEstimateWarning",
    "PartialStateWarning",
    "SeededTransformWarning",
    "SnapshotGoneError",
    "StreamingDataLoader",
    "StreamingDataset",
    "StreamingMixture",
    "StreamingTrainerCallback",
    "StreamingTrainerMixin",
    "StreamingWarning",
    "TableMovedWarning",
    "TorchrunStoreWarning",
    "TransformContractError",
    "TransformErrorWarning",
    "UnownedSplitsWarning",
    "gather_state_dict",
    "gather_stats",
    "load_state_dict",
    "profile",
    "save_state_dict",
]

__version__ = "0.1.0"

_HOMES = {
    "BlobHandle": ".samples.blobhandle",
    "CacheUnusedWarning": ".errors",
    "CacheWarning": ".errors",
    "EpochCompleteWarning": ".errors",
    "LoaderProfile": ".profiling.findings",
    "PackingEstimateWarning": ".errors",
    "PartialStateWarning": ".errors",
    "SeededTransformWarning": ".errors",
    "SnapshotGoneError": ".errors",
    "StreamingDataLoader": ".loader.loader",
    "StreamingDataset": ".dataset.dataset",
    "StreamingMixture": ".mixture.mixture",
    "StreamingTrainerCallback": ".loader.hf",
    "StreamingTrainerMixin": ".loader.hf",
    "StreamingWarning": ".errors",
    "TableMovedWarning": ".errors",
    "TorchrunStoreWarning": ".errors",
    "TransformContractError": ".errors",
    "TransformErrorWarning": ".errors",
    "UnownedSplitsWarning": ".errors",
    "gather_state_dict": ".distributed",
    "gather_stats": ".distributed",
    "load_state_dict": ".distributed",
    "profile": ".profiling.run",
    "save_state_dict": ".distributed",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'streaming' has no attribute {name!r}")
    value = getattr(import_module(home, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
