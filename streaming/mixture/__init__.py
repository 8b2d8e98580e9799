"""``StreamingMixture``: several datasets mixed by weights; a wing on top.

``mixture`` is the facade users hold and ``engine`` the machinery behind it
(``positioned``: its schedule, position and checkpoints);
``schedule`` decides each global batch's share of every source (stop rules are a
registry there), ``state`` is the mixture's state and merge, ``read`` reads a
rank's segments, ``checks`` validates sources, ``loader`` is the mixture's
``StreamingDataLoader`` (registered with it). Nothing below imports this wing.
"""

from . import loader as loader  # registers the mixture's loader with StreamingDataLoader

__all__: list[str] = []
