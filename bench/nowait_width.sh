#!/usr/bin/env bash
# How many `nowait` regions run at once, and the head's CPU, for two builds of the plugin
# side by side (alternating runs), with the stock x86_64 plugin's process alongside for the CPU.
# The regions sleep (tests/programs/wide.c), so the machine's cores decide nothing.
#   bash bench/nowait_width.sh ROUNDS A.so B.so
# Cases: 64 independent 200 ms regions on 16 workers (-np 17), 128 on 32 workers (-np 33),
# 16 chains of 8 dependent 100 ms regions on 16 workers, and 64 regions of 1 s on 16 workers
# (the head's CPU: the program's own getrusage, all its threads).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 3 ] || { echo "usage: $0 ROUNDS A.so B.so" >&2; exit 2; }
rounds=$1 a=$(realpath "$2") b=$(realpath "$3")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
clang-16 -O2 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu -Itests/programs tests/programs/wide.c -o "$tmp/wide"
run=target/release/ompcluster-run
cases=("17|independent 64 200" "33|independent 128 200" "17|chains 16 8 100" "17|independent 64 1000")
for _ in $(seq "$rounds"); do
  for c in "${cases[@]}"; do
    np=${c%%|*} args=${c#*|}
    for side in A B; do
      so=$a; [ "$side" = B ] && so=$b
      # shellcheck disable=SC2086
      out=$(OMPCLUSTER_PLUGIN=$so "$run" -np "$np" "$tmp/wide" $args 2>&1) || { echo "FAILED $side $c: $out" >&2; exit 1; }
      grep -q "wide: PASS" <<<"$out" || { echo "WRONG $side $c: $out" >&2; exit 1; }
      # "wide: 64 regions of 200 ms in 0.456 s: 28.1 at once; head cpu 0.71 s"
      echo "$side|-np $np $args|$(sed -n 's/.*: \([0-9.]*\) at once; head cpu \([0-9.]*\) s/\1|\2/p' <<<"$out")"
    done
    if [ "$args" = "independent 64 1000" ]; then
      # shellcheck disable=SC2086
      out=$(LD_LIBRARY_PATH=/usr/lib/llvm-16/lib "$tmp/wide" $args 2>&1) || { echo "FAILED stock $c: $out" >&2; exit 1; }
      echo "stock|-np $np $args|$(sed -n 's/.*: \([0-9.]*\) at once; head cpu \([0-9.]*\) s/\1|\2/p' <<<"$out")"
    fi
  done
done | python3 -c '
import sys, collections, statistics
runs = collections.defaultdict(list)
for line in sys.stdin:
    side, case, width, cpu = line.strip().split("|")
    runs[(case, side)].append((float(width), float(cpu)))
for case in dict.fromkeys(c for c, _ in runs):
    row = [f"{case:28}"]
    for side in ("A", "B", "stock"):
        r = runs.get((case, side))
        if r:
            row.append(f"{side} {statistics.median(w for w, _ in r):5.1f} at once, head cpu {statistics.median(c for _, c in r):6.2f} s")
    print("   ".join(row) + f"   ({len(runs[(case, chr(65))])} runs each)")
'
