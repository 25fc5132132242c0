#!/usr/bin/env bash
# libomp's default reduction method against the fixed-order tree that workers use with
# replicas (KMP_DETERMINISTIC_REDUCTION=true), alternating runs, for teams of 2 and 4 threads:
#   bash bench/reduction_order.sh [RUNS] [REGIONS]
# Prints the median microseconds per reduction region of each, and their ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-9} regions=${2:-1000000}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
clang-16 -O2 -fopenmp bench/reduction_order.c -o "$tmp/ro"
for threads in 2 4; do
  for _ in $(seq "$runs"); do
    for m in false true; do
      echo "$threads $m $(OMP_NUM_THREADS=$threads KMP_DETERMINISTIC_REDUCTION=$m "$tmp/ro" "$regions")"
    done
  done
done | python3 -c '
import sys, statistics, collections
us = collections.defaultdict(list)
for line in sys.stdin:
    f = line.split()
    us[(int(f[0]), f[1])].append(float(f[5]))
print("| team | default (us/region) | fixed order (us/region) | fixed / default |")
print("|---|---|---|---|")
for t in sorted({k[0] for k in us}):
    d, x = statistics.median(us[(t, "false")]), statistics.median(us[(t, "true")])
    print(f"| {t} | {d:.3f} | {x:.3f} | {x / d:.2f} |")
'
