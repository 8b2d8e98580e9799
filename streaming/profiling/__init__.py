"""``streaming.profile``: a loader measured on the user's own table, and the settings
that made it faster, each tried before it is advised; a wing below the command line.

``run`` is ``profile`` (the measured run, the tries, the result); ``findings`` is
``LoaderProfile``, what it found, with the report and the advice. The package root
re-exports both; ``lance-streaming profile`` prints them. Imports the loader and
everything below it; nothing below imports this wing.
"""

__all__: list[str] = []
