#!/usr/bin/env bash
# The checkpoint tests against a real VeloC (issue 11): builds VeloC from
# ../shared/third_party/veloc (or uses VELOC_ROOT if set), builds the plugin with the VeloC
# store into target/veloc (the default build stays free of VeloC), then runs every test that
# takes a checkpoint store (the checkpoint tests, recovery's checkpoint tests, resuming a job,
# the trace of a checkpointed run, device allocations with checkpoints) with the VeloC store
# in sync and in async mode, and the VeloC store's own tests.
# CI runs it after scripts/test.sh. Usage: bash scripts/test-veloc.sh [VELOC_SOURCES_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:-../shared/third_party/veloc}
if [ -z "${VELOC_ROOT:-}" ]; then
  [ -f "$src/build.sh" ] || { echo "test-veloc: no VeloC sources at $src (pass their directory, or set VELOC_ROOT)" >&2; exit 1; }
  VELOC_ROOT=$(bash "$src/build.sh" "$PWD/target/veloc-install" | tail -1)
fi
export VELOC_ROOT
. scripts/toolchain.sh
use_cargo
export CARGO_TARGET_DIR=$PWD/target/veloc
export MPICC="${MPICC:-mpicc.openmpi}"
"$CARGO_BIN" build --release -p libomptarget-plugin --features ckpt-veloc/veloc
"$CARGO_BIN" build --release -p ckpt-veloc --bin ompcluster-ckpt
# (tests/trace.rs draws its trace with it)
"$CARGO_BIN" build --release -p timeline --bin ompcluster-trace
for store in veloc-sync veloc-async; do
  echo "== checkpoint tests with OMPCLUSTER_TEST_STORE=$store"
  OMPCLUSTER_TEST_STORE=$store "$CARGO_BIN" test --release -p ompcluster-tests --test checkpoints -- --test-threads=1
  OMPCLUSTER_TEST_STORE=$store "$CARGO_BIN" test --release -p ompcluster-tests --test recovery -- --test-threads=1 checkpoint
  # Resuming (11 tests, 6-11 minutes under VeloC) in one mode only, async, to keep CI's time:
  # what a resume reads from the store is the same in both.
  if [ "$store" = veloc-async ]; then
    OMPCLUSTER_TEST_STORE=$store "$CARGO_BIN" test --release -p ompcluster-tests --test resume -- --test-threads=1
  fi
  OMPCLUSTER_TEST_STORE=$store "$CARGO_BIN" test --release -p ompcluster-tests --test trace -- --test-threads=1 the_trace_marks_failures_checkpoints
  OMPCLUSTER_TEST_STORE=$store "$CARGO_BIN" test --release -p ompcluster-tests --test device_memory -- --test-threads=1 device_allocations_survive
done
echo "== the VeloC store's own tests"
"$CARGO_BIN" test --release -p ckpt-veloc --features veloc
"$CARGO_BIN" test --release -p ompcluster-tests --features veloc --test veloc -- --test-threads=1
