"""``python -m benchmarks SUITE [OPTIONS]``: the one entry point of the benchmarks.

``python -m benchmarks --list`` lists the suites with one line each;
``python -m benchmarks SUITE --help`` gives a suite's options.
"""

from __future__ import annotations

import compileall
import sys
from pathlib import Path

from benchmarks import suites

USAGE = "usage: python -m benchmarks SUITE [OPTIONS]  |  python -m benchmarks --list"


def listing() -> str:
    """One line per suite: its name and what it measures."""
    width = max(len(name) for name in suites.names())
    return "\n".join(f"  {name:<{width}}  {suites.summary(name)}" for name in suites.names())


def compile_package() -> None:
    """Compile the package's modules once, as pip does when it installs a wheel: every run
    then imports ours as a user's installation would, not recompiling each module in each
    fresh process (the peers' packages were compiled by pip; where ``PYTHONDONTWRITEBYTECODE``
    is set, nothing else would write ours, and each process paid about 0.1 s for it)."""
    package = Path(__file__).resolve().parents[1] / "streaming"
    compileall.compile_dir(package, quiet=1, legacy=False)


def main(argv: list[str] | None = None) -> int:
    """Run the suite ``argv[0]`` with the rest of ``argv``; the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "--list"):
        print(f"{USAGE}\n\nsuites:\n{listing()}", file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    try:
        suite = suites.load(argv[0])
    except ValueError as error:
        print(f"{USAGE}\npython -m benchmarks: error: {error}", file=sys.stderr)
        return 2
    compile_package()
    status = suite.main(argv[1:])
    return int(status or 0)


if __name__ == "__main__":
    sys.exit(main())
