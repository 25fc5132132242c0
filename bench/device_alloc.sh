#!/usr/bin/env bash
# Cost per allocation of memory that device code allocates (malloc/free in target regions):
# the stock x86_64 plugin (in-process libc malloc) against ours on 1 worker, alternating runs.
#   bash bench/device_alloc.sh [ROUNDS] [K]
# Each run of bench/device_alloc.c does 5 rounds of: a region allocating K blocks of 32 bytes
# that outlive it, a region freeing them, a region allocating and freeing K blocks itself;
# it prints the median per allocation. The stock side needs /usr/lib/llvm-16/lib on
# LD_LIBRARY_PATH (Debian 12: without it the regions run on the host, and the program stops).
# The table goes to bench/results/device_alloc.json too (bench/plot.py).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5} k=${2:-2000}
started=$(date -u '+%Y-%m-%d %H:%M UTC')
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
clang-16 -O2 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu bench/device_alloc.c -o "$tmp/da"
stock_ld="/usr/lib/llvm-16/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for _ in $(seq "$rounds"); do
  echo "stock $(LD_LIBRARY_PATH="$stock_ld" "$tmp/da" "$k" 5)"
  echo "ours $(target/release/ompcluster-run -np 2 "$tmp/da" "$k" 5)"
done | python3 -c '
import sys, collections, statistics
runs = collections.defaultdict(lambda: collections.defaultdict(list))
for line in sys.stdin:
    who, *rest = line.split()
    for name, value in zip(rest[::2], rest[1::2]):
        runs[who][name].append(float(value))
names = ["alloc_kept_us", "free_us", "alloc_free_in_region_us"]
print("| us per allocation (median of runs) | " + " | ".join(names) + " |")
print("|---|" + "---|" * len(names))
for who in ["stock", "ours"]:
    print(f"| {who} | " + " | ".join(f"{statistics.median(runs[who][n]):.3f}" for n in names) + " |")
med = {who: {n: statistics.median(runs[who][n]) for n in names} for who in ("stock", "ours")}
ratio = [med["ours"][n] / max(med["stock"][n], 1e-9) for n in names]
print("| ours / stock | " + " | ".join(f"{r:.0f}x" for r in ratio) + " |")
sys.path.insert(0, "bench")
import plot
rounds, k, started = sys.argv[1:4]
plot.record("device_alloc", "bench/device_alloc.sh", f"bash bench/device_alloc.sh {rounds} {k}", {"alloc": {
    "rounds": int(rounds), "k": int(k), **{who: {n: float(f"{med[who][n]:.3f}") for n in names} for who in ("stock", "ours")},
    "ours_over_stock": {n: float(f"{r:.0f}") for n, r in zip(names, ratio)}}}, date=started)
' "$rounds" "$k" "$started"
