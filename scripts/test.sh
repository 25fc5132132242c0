#!/usr/bin/env bash
# Set everything up, then run every test of the workspace (unit tests and the integration
# tests that compile C/C++ programs with clang-16 and run them under ompcluster-run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. scripts/toolchain.sh
use_cargo
export MPICC="${MPICC:-mpicc.openmpi}"
"$CARGO_BIN" test --release --workspace -- --test-threads=2
