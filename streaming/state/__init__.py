"""The state dict: its schema (``fields``), parse (``format``), compatibility (``compat``)
and ``merge``.

Pure: imports ``streaming.core`` and ``streaming.errors`` only, neither torch nor Lance.
"""

__all__: list[str] = []
