#!/usr/bin/env bash
# A/B of two builds of the plugin on the matmul and Cholesky examples (3 workers), alternating
# runs so that the machine's drift hits both alike; prints, per case, the median of the
# time each program reports (its offloaded part, without start-up) and the ratio B/A.
#   cp target/release/libompcluster_plugin.so /some/dir/a.so   # before a change
#   cargo build --release && cp target/release/libompcluster_plugin.so /some/dir/b.so
#   bash bench/ab_examples.sh ROUNDS /some/dir/a.so /some/dir/b.so ["matmul N BS" | "cholesky N TS"]...
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 3 ] || { echo "usage: $0 ROUNDS A.so B.so [CASE]..." >&2; exit 2; }
rounds=$1 a=$(realpath "$2") b=$(realpath "$3")
shift 3
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=("matmul 2048 256" "matmul 1024 64" "cholesky 2048 256" "cholesky 2048 128")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for ex in matmul cholesky; do
  clang-16 -O2 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu "examples/$ex/$ex.c" -lm -o "$tmp/$ex"
done
run=target/release/ompcluster-run
for _ in $(seq "$rounds"); do
  for c in "${cases[@]}"; do
    set -- $c
    for side in A B; do
      so=$a; [ "$side" = B ] && so=$b
      out=$(OMPCLUSTER_PLUGIN=$so "$run" -np 4 "$tmp/$1" "$2" "$3" 2>&1) || { echo "FAILED $side $c: $out" >&2; exit 1; }
      grep -q "result correct" <<<"$out" || { echo "WRONG $side $c: $out" >&2; exit 1; }
      # "...: 0.198 s, max error ..." -> 0.198
      echo "$side|$c|$(sed -n 's/.*: \([0-9.]*\) s,.*/\1/p' <<<"$out")"
    done
  done
done | python3 -c '
import sys, collections, statistics
runs = collections.defaultdict(list)
for line in sys.stdin:
    side, case, s = line.strip().split("|")
    runs[(case, side)].append(float(s))
for case in dict.fromkeys(c for c, _ in runs):
    a, b = statistics.median(runs[(case, "A")]), statistics.median(runs[(case, "B")])
    print(f"{case:18} A {a:7.3f} s   B {b:7.3f} s   B/A {b / a:5.2f}   ({len(runs[(case, chr(65))])} runs each)")
'
