#!/usr/bin/env bash
# Issue 34's resident stencil (tests/programs/halo_stencil.c: 6 blocks of 65,536 doubles kept
# on the device, edges read back and halos pushed every step, one nowait region per block with
# depend(inout), 400 steps) on 3 workers, RUNS times in each mode (sync, depend): per run, the
# share of the 2,400 regions each worker ran, and how many runs left a worker outside 15-60%.
#   bash bench/stencil_spread.sh [RUNS] [PLUGIN.so]     (default 50 per mode, the current build)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-50}
plugin=${2:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
clang-16 -O2 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu tests/programs/halo_stencil.c -o "$tmp/halo_stencil"
for mode in sync depend; do
  for i in $(seq "$runs"); do
    env ${plugin:+OMPCLUSTER_PLUGIN=$(realpath "$plugin")} OMPCLUSTER_REPORT="$tmp/r.json" \
      target/release/ompcluster-run -np 4 "$tmp/halo_stencil" 6 65536 400 "$mode" > "$tmp/out" 2>&1 \
      || { echo "FAILED $mode run $i:"; cat "$tmp/out"; exit 1; }
    grep -q "result correct" "$tmp/out" || { echo "WRONG $mode run $i:"; cat "$tmp/out"; exit 1; }
    python3 -c "import json,sys; d=json.load(open('$tmp/r.json'))['tasks_per_worker']; print('$mode', *(d.get(w, 0) for w in ('1','2','3')))"
  done
done | python3 -c '
import sys, collections
runs = collections.defaultdict(list)
for line in sys.stdin:
    mode, *n = line.split()
    runs[mode].append([int(x) for x in n])
for mode, rs in runs.items():
    shares = [[x / sum(r) for x in r] for r in rs]
    out = sum(1 for s in shares if min(s) < 0.15 or max(s) > 0.60)
    lo = min(min(s) for s in shares); hi = max(max(s) for s in shares)
    print(f"{mode}: {len(rs)} runs, worker shares from {lo:.1%} to {hi:.1%}, runs with a worker outside 15-60%: {out}")
'
