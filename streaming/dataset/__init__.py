"""``StreamingDataset``: a snapshot, its plan, the committed position, and iteration.

``dataset`` is the facade users hold, ``build`` turns its settings into an engine,
``engine`` (iteration, the loaders' side) and ``positioned`` (the position and the
state methods) are that engine, ``host`` declares what loaders may call on it and
finds a facade's engine, ``observe`` the peer's attributes, ``topology``/``torchrun``
the process group, ``jobplan`` one filter scan per job. Imports ``core``, ``state``,
``tables``, ``samples``, ``workers`` and the top-level ``errors`` and ``_compat``.
"""

__all__: list[str] = []
