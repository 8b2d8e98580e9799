"""The pure core: numbers in, numbers out. Imports neither torch nor Lance.

Which row sits at each position (``plan``), where each split stands (``progress``,
``ledger``), the order of a rank's samples and each worker's share (``order``), one process's place
(``world``), what an uneven resume gives back (``balance``), the checked settings
(``options``, ``checks``, ``profiles``, ``cachesettings``), the counters behind
``stats()`` (``stats``) and how iterators end (``lifecycle``). Imports nothing of the
package but ``streaming.errors``.
"""

__all__: list[str] = []
