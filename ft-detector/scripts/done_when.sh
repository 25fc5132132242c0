#!/usr/bin/env bash
# The "Done when" scenarios of issue 3 with 8 ranks, period 100 ms, timeout 1000 ms,
# shuffle on, each repeated REPS times; prints per-run consistent times (ms).
#   bash ft-detector/scripts/done_when.sh [REPS]
set -euo pipefail
cd "$(dirname "$0")/../.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}" MPICC="${MPICC:-mpicc.openmpi}"
cargo build --release -q -p ft-detector --bin ompcluster-ftbench
B="$CARGO_TARGET_DIR/release/ompcluster-ftbench"
MPI=(mpirun --allow-run-as-root --oversubscribe --enable-recovery --mca pml ob1 --mca btl self,vader -np 8)
summ() { python3 "$(dirname "$0")/summarize.py"; }
for i in $(seq "${1:-5}"); do
  echo -n "single kill (rank 5):        "; "${MPI[@]}" "$B" --period 100 --timeout 1000 --kill 5 --after-ms 1000 --run-ms 3000 2>/dev/null | summ
  echo -n "two consecutive kills (3,4): "; "${MPI[@]}" "$B" --period 100 --timeout 1000 --kill 3,4 --after-ms 1000 --run-ms 3500 2>/dev/null | summ
  echo -n "stall rank 2 for 2 s:        "; "${MPI[@]}" "$B" --period 100 --timeout 1000 --stall 2 --after-ms 1000 --for-ms 2000 --run-ms 5000 2>/dev/null | summ
done
