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
  # Resuming under VeloC, in one mode only (async), and the 4 resume tests whose store work
  # differs (the whole file takes 6-14 minutes under VeloC, CI's largest part): a resume
  # reads the store's data, a final checkpoint on SIGTERM flushes it, damaged data in it is
  # rebuilt, a worker lost while resuming is recovered from it. The other 7 (the program's
  # own log, arguments, rebuilt programs, the moments the head dies) read the store the same
  # way and run under the embedded store with the rest of the tests.
  if [ "$store" = veloc-async ]; then
    OMPCLUSTER_TEST_STORE=$store "$CARGO_BIN" test --release -p ompcluster-tests --test resume -- --test-threads=1 \
      a_job_whose_head_is_killed_resumes_to_the_failure_free_output a_job_stopped_by_sigterm_resumes_skipping_what_it_had_done \
      damaged_checkpoint_data_is_rebuilt_not_trusted a_worker_killed_while_resuming_is_recovered
  fi
  OMPCLUSTER_TEST_STORE=$store "$CARGO_BIN" test --release -p ompcluster-tests --test trace -- --test-threads=1 the_trace_marks_failures_checkpoints
  OMPCLUSTER_TEST_STORE=$store "$CARGO_BIN" test --release -p ompcluster-tests --test device_memory -- --test-threads=1 device_allocations_survive
done
echo "== the VeloC store's own tests"
"$CARGO_BIN" test --release -p ckpt-veloc --features veloc
"$CARGO_BIN" test --release -p ompcluster-tests --features veloc --test veloc -- --test-threads=1
