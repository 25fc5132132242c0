#!/usr/bin/env bash
# Build, then run the benchmarks and print the report (markdown). Run on an otherwise idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
python3 bench/run.py "$@"
