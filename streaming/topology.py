"""Rank, world size and a shared seed, from an initialised torch.distributed group."""

from __future__ import annotations

import os
import warnings
from typing import Any

__all__ = ["check_torchrun_store", "draw_seed", "topology"]

_store_checked = False  # check_torchrun_store warns once per process


def topology(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """Fill in rank/world_size from an initialised process group, else 0/1."""
    import torch.distributed as dist

    check_torchrun_store()
    if dist.is_available() and dist.is_initialized():
        return (
            dist.get_rank() if rank is None else rank,
            dist.get_world_size() if world_size is None else world_size,
        )
    return (0 if rank is None else rank, 1 if world_size is None else world_size)


def draw_seed(world_size: int) -> int:
    """One fresh seed, the same on every rank (rank 0's, broadcast)."""
    import torch.distributed as dist

    seed = int.from_bytes(os.urandom(8), "little") >> 12  # 52 bits: exact in any JSON reader
    if dist.is_available() and dist.is_initialized():
        box: list[Any] = [seed]
        dist.broadcast_object_list(box, src=0)
        return int(box[0])
    if world_size > 1:
        raise ValueError(
            f"shuffle_seed=None with world_size={world_size} needs an initialised "
            "torch.distributed process group to share one seed between ranks; pass the "
            "same integer shuffle_seed on every rank, or call init_process_group first"
        )
    return seed


def check_torchrun_store() -> None:
    """Warn (once per process) about a torchrun job that would not survive its restarts.

    Under torchrun with the c10d rendezvous, the workers' process group uses the
    agent's store (``TORCHELASTIC_USE_AGENT_STORE=True``), which outlives an attempt.
    Across nodes (``GROUP_WORLD_SIZE > 1``) with restarts allowed, the next attempt's
    process group reads the keys of the last one and fails or hangs.
    """
    global _store_checked
    if _store_checked:
        return
    _store_checked = True
    env = os.environ
    try:
        nodes = int(env.get("GROUP_WORLD_SIZE", "1"))
        restarts = int(env.get("TORCHELASTIC_MAX_RESTARTS", "0"))
    except ValueError:
        return
    if env.get("TORCHELASTIC_USE_AGENT_STORE") == "True" and nodes > 1 and restarts > 0:
        from .errors import TorchrunStoreWarning

        warnings.warn(
            f"this torchrun job spans {nodes} nodes and may restart (--max-restarts={restarts}), and its "
            "process group uses the rendezvous agent's store (TORCHELASTIC_USE_AGENT_STORE=True), which "
            "torch keeps from one attempt to the next: a restarted group reads the last attempt's keys and "
            "fails to connect or waits out its timeout (pytorch/pytorch#135712). Set "
            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 in every torchrun agent's environment "
            "(see the Multi-node jobs page of the docs)",
            TorchrunStoreWarning,
            stacklevel=4,  # the caller of StreamingDataset()
        )
