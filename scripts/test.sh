#!/usr/bin/env bash
# Set everything up, then lint, type-check and run the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
py=$(bash scripts/setup.sh)
paths=(streaming tests)
[ -d benchmarks ] && [ -n "$(ls benchmarks/*.py 2>/dev/null)" ] && paths+=(benchmarks)
"$py" -m ruff check "${paths[@]}"
"$py" -m ruff format --check "${paths[@]}"
"$py" -m mypy streaming
"$py" -m mkdocs build --strict --site-dir "$(mktemp -d)"
"$py" -m pytest -q --durations=15 "$@"
