"""torchrun settings that would make a multi-node job fail at its restarts."""

from __future__ import annotations

import os
import warnings

__all__ = ["check_torchrun_store"]

_store_checked = False  # check_torchrun_store warns once per process


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
        from ..errors import TorchrunStoreWarning

        warnings.warn(
            f"this torchrun job spans {nodes} nodes and may restart (--max-restarts={restarts}), and its "
            "process group uses the rendezvous agent's store (TORCHELASTIC_USE_AGENT_STORE=True), which "
            "torch keeps from one attempt to the next: a restarted group reads the last attempt's keys and "
            "fails to connect or waits out its timeout (pytorch/pytorch#135712). Set "
            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 in every torchrun agent's environment "
            "(see the Multi-node jobs page of the docs)",
            TorchrunStoreWarning,
            stacklevel=4,  # the caller of StreamingDataset() (through build_engine)
        )
