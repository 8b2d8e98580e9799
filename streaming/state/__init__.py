"""The state dict: its format (``format``: schema, parse, compatibility) and ``merge``.

Pure: imports ``streaming.core`` and ``streaming.errors`` only, neither torch nor Lance.
"""

__all__: list[str] = []
