#!/usr/bin/env bash
# A/B of two builds of the plugin on the empty target region (1 worker), alternating runs so
# that the machine's drift hits both alike; prints the median and every run, with the stock
# x86_64 plugin alongside.
#   cp target/release/libompcluster_plugin.so /some/dir/a.so   # before a change
#   cargo build --release && cp target/release/libompcluster_plugin.so /some/dir/b.so
#   bash bench/ab_plugins.sh ROUNDS /some/dir/a.so /some/dir/b.so [REPS]
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 3 ] || { echo "usage: $0 ROUNDS A.so B.so [REPS]" >&2; exit 2; }
rounds=$1 a=$(realpath "$2") b=$(realpath "$3") reps=${4:-50000}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
clang-16 -O2 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu bench/offload_bench.c -o "$tmp/ob"
run=target/release/ompcluster-run
for _ in $(seq "$rounds"); do
  echo "stock $("$tmp/ob" empty "$reps")"
  echo "A $(OMPCLUSTER_PLUGIN=$a "$run" -np 2 "$tmp/ob" empty "$reps")"
  echo "B $(OMPCLUSTER_PLUGIN=$b "$run" -np 2 "$tmp/ob" empty "$reps")"
done | python3 -c '
import sys, collections, statistics
runs = collections.defaultdict(list)
for line in sys.stdin:
    who, _, us = line.split()
    runs[who].append(float(us))
for who, v in runs.items():
    print(f"{who:5} median {statistics.median(v):6.2f} us   runs: {v}")
'
