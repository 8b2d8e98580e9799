"""The benchmarks import our package compiled, as a wheel installed by pip would be."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from benchmarks.__main__ import compile_package

PACKAGE = Path(__file__).resolve().parents[2] / "streaming"


def test_the_benchmarks_compile_every_module_of_the_package() -> None:
    """After ``compile_package`` every module has bytecode that Python accepts for its
    source (the header's size and time match), so fresh processes load it, not compile."""
    compile_package()
    stale = []
    for source in sorted(PACKAGE.rglob("*.py")):
        cached = Path(importlib.util.cache_from_source(str(source)))
        stat = source.stat()
        header = cached.read_bytes()[:16] if cached.exists() else b""
        fresh = (
            len(header) == 16
            and int.from_bytes(header[8:12], "little") == int(stat.st_mtime) & 0xFFFFFFFF
            and int.from_bytes(header[12:16], "little") == stat.st_size & 0xFFFFFFFF
        )
        if not fresh:
            stale.append(str(source.relative_to(PACKAGE)))
    assert not stale, stale
