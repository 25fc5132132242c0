#!/usr/bin/env bash
# How the blocks of a stencil kept on the device spread over 3 workers, over many runs: per
# run, the share of the 2,400 regions each worker ran, and how many runs left a worker outside
# 15-60%. Two programs:
#   halo    issue 34's stencil (tests/programs/halo_stencil.c: 6 blocks of 65,536 doubles,
#           edges read back and halos pushed every step, one nowait region per block with
#           depend(inout), 400 steps), in both forms (sync, depend);
#   resident  issue 24's (tests/programs/resident_stencil.c: 6 blocks, one in-place nowait
#           region per block per step, 400 steps), with blocks of 65,536 and of 4,096 doubles.
#   bash bench/stencil_spread.sh [RUNS] [PLUGIN.so] [halo|resident]
# (default 50 runs per form, the current build, halo)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-50}
plugin=${2:-}
program=${3:-halo}
case $program in
  halo) src=halo_stencil.c forms="sync depend" ;;
  resident) src=resident_stencil.c forms="65536 4096" ;;
  *) echo "usage: $0 [RUNS] [PLUGIN.so] [halo|resident]" >&2; exit 2 ;;
esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
clang-16 -O2 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu "tests/programs/$src" -o "$tmp/prog"
for form in $forms; do
  if [ "$program" = halo ]; then args=(6 65536 400 "$form"); else args=(6 "$form" 400); fi
  for i in $(seq "$runs"); do
    env ${plugin:+OMPCLUSTER_PLUGIN=$(realpath "$plugin")} OMPCLUSTER_REPORT="$tmp/r.json" \
      target/release/ompcluster-run -np 4 "$tmp/prog" "${args[@]}" > "$tmp/out" 2>&1 \
      || { echo "FAILED $form run $i:"; cat "$tmp/out"; exit 1; }
    grep -q "result correct" "$tmp/out" || { echo "WRONG $form run $i:"; cat "$tmp/out"; exit 1; }
    python3 -c "import json,sys; d=json.load(open('$tmp/r.json'))['tasks_per_worker']; print('$form', *(d.get(w, 0) for w in ('1','2','3')))"
  done
done | python3 -c '
import sys, collections
runs = collections.defaultdict(list)
for line in sys.stdin:
    form, *n = line.split()
    runs[form].append([int(x) for x in n])
for form, rs in runs.items():
    shares = [[x / sum(r) for x in r] for r in rs]
    out = [r for r, s in zip(rs, shares) if min(s) < 0.15 or max(s) > 0.60]
    lo = min(min(s) for s in shares); hi = max(max(s) for s in shares)
    print(f"{form}: {len(rs)} runs, worker shares from {lo:.1%} to {hi:.1%}, runs with a worker outside 15-60%: {len(out)} {out}")
'
