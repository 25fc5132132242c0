#!/usr/bin/env bash
# A/B of an environment setting on the same build: side B runs with VAR=VALUE added, side A
# without; alternating runs, 3 workers (the empty region: 1). Cases: the matmul example with
# tiny blocks (1024/32), Task Bench-style stencil_1d 8 x 200 with K=0, and the empty region.
# Prints per case the median and range of each side and the ratio B/A.
#   bash bench/ab_env.sh ROUNDS "VAR=VALUE [VAR=VALUE...]"
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 2 ] || { echo "usage: $0 ROUNDS \"VAR=VALUE ...\"" >&2; exit 2; }
rounds=$1 benv=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc() { clang-16 -O2 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu "$1" -lm -o "$tmp/$2"; }
cc examples/matmul/matmul.c matmul
cc bench/taskbench.c taskbench
cc bench/offload_bench.c offload_bench
run=target/release/ompcluster-run
for _ in $(seq "$rounds"); do
  for side in A B; do
    e=(); [ "$side" = B ] && read -r -a e <<<"$benv"
    o=$(env "${e[@]}" "$run" -np 4 "$tmp/matmul" 1024 32 2>&1)
    echo "$side|matmul 1024/32 (s)|$(sed -n 's/.*: \([0-9.]*\) s,.*/\1/p' <<<"$o")"
    o=$(env "${e[@]}" "$run" -np 4 "$tmp/taskbench" stencil_1d 8 200 0 2>&1)
    echo "$side|stencil_1d 8x200 K=0 (s)|$(sed -n 's/.* seconds=\([0-9.]*\) .*/\1/p' <<<"$o")"
    o=$(env "${e[@]}" "$run" -np 2 "$tmp/offload_bench" empty 20000 2>&1)
    echo "$side|empty region (us)|$(sed -n 's/^empty_us \([0-9.]*\)/\1/p' <<<"$o")"
  done
done | python3 -c '
import sys, collections, statistics
runs = collections.defaultdict(list)
for line in sys.stdin:
    side, case, v = line.rstrip("\n").split("|")
    if not v:
        sys.exit(f"no result for side {side}, {case}")
    runs[(case, side)].append(float(v))
for case in dict.fromkeys(c for c, _ in runs):
    a, b = runs[(case, "A")], runs[(case, "B")]
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"{case:26} A {ma:8.3f} [{min(a):.3f}-{max(a):.3f}]   B {mb:8.3f} [{min(b):.3f}-{max(b):.3f}]   B/A {mb / ma:4.2f}   ({len(a)} runs each)")
'
