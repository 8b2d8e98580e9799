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
# Two pytest processes: most tests wait on worker processes, servers and ranks, so two
# keep a 2-core machine busy. A short base folder keeps the AF_UNIX socket paths of
# forkserver and torchrun (under the tests' temporary folders) within their limit.
base=$(mktemp -d /tmp/lsXXXX)
trap 'rm -rf "$base"' EXIT
# Tests marked `long` (minutes each: the elastic Ray Train job) are left out unless
# LANCE_STREAMING_LONG_TESTS=1; `bash scripts/test.sh -m long tests/jobs` runs only those
# (a later -m replaces this one).
select=(-m "not long")
[ "${LANCE_STREAMING_LONG_TESTS:-0}" = 1 ] && select=()
"$py" -m pytest -q -n "${LANCE_STREAMING_TEST_PROCESSES:-2}" --dist loadfile --basetemp="$base/t" --durations=15 \
  "${select[@]}" "$@"
