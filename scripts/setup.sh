#!/usr/bin/env bash
# Create .venv (if missing) and install lance-streaming with its test tools into it.
# Works on a fresh machine with Python 3.10+ and pip. Prints the venv's python path.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv >&2
fi
.venv/bin/python -m pip install --quiet --upgrade pip >&2
# The CPU build of torch keeps installs small; the constraint file pins it for
# development and CI while pyproject.toml keeps a range for users.
.venv/bin/python -m pip install --quiet -c scripts/constraints.txt -e ".[test]" >&2
# An editable install leaves our modules (and the tests' and benchmarks') uncompiled:
# compile them once, as installing a wheel does, so that the many fresh processes of a
# run (workers, ranks, servers) do not each compile them again where
# PYTHONDONTWRITEBYTECODE is set.
.venv/bin/python -m compileall -q streaming tests benchmarks >&2
echo "$PWD/.venv/bin/python"
