#!/usr/bin/env bash
# Set everything up, then run the demo: stream, checkpoint, resume on another topology.
set -euo pipefail
cd "$(dirname "$0")/.."
py=$(bash scripts/setup.sh)
"$py" -m streaming demo "$@"
