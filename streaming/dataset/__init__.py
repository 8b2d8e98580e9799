"""``StreamingDataset``: a snapshot, its plan, the committed position, and iteration.

``dataset`` builds it from user settings and iterates it, ``positioned`` holds the
position and the state methods, ``host`` declares what loaders may call,
``striped`` cuts a process's samples per loader batch, ``board`` posts the
committed position to persistent workers, ``observe`` the peer's attributes,
``topology``/``torchrun`` the process group, ``watchdog`` what runs in worker
processes. Imports ``core``, ``state``, ``read`` and the top-level ``errors`` and
``_compat``.
"""

__all__: list[str] = []
