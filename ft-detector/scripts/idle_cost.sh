#!/usr/bin/env bash
# Item 7 of issue 3: a communication-heavy MPI loop with the detector on (period 100 ms)
# against off, in the same run, alternating phases; prints one JSON line with the ratio.
#   bash ft-detector/scripts/idle_cost.sh [NP] [ITERS] [ROUNDS] [TIMESTEP_MS]
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}" MPICC="${MPICC:-mpicc.openmpi}"
cargo build --release -q -p ft-detector --bin ft-idle-cost
mpirun --allow-run-as-root --oversubscribe --enable-recovery --mca pml ob1 --mca btl self,vader \
  -np "${1:-4}" "$CARGO_TARGET_DIR/release/ft-idle-cost" \
  --iters "${2:-20000}" --rounds "${3:-10}" --timestep "${4:-50}" --period 100 --timeout 1000 2>/dev/null | tail -1
