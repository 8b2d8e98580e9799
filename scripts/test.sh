#!/usr/bin/env bash
# Set everything up, then lint, type-check and run the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
py=$(bash scripts/setup.sh)
"$py" -m ruff check streaming tests benchmarks
"$py" -m ruff format --check streaming tests benchmarks
"$py" -m mypy streaming
"$py" -m pytest -q "$@"
