#!/usr/bin/env bash
# A/B of two builds of the plugin on the empty target region (1 worker), alternating runs so
# that the machine's drift hits both alike; prints the median and every run, with the stock
# x86_64 plugin alongside. MODE `mapped` times a region that maps its own arrays instead
# (`offload_bench mapped`).
#   cp target/release/libompcluster_plugin.so /some/dir/a.so   # before a change
#   cargo build --release && cp target/release/libompcluster_plugin.so /some/dir/b.so
#   bash bench/ab_plugins.sh ROUNDS /some/dir/a.so /some/dir/b.so [REPS [MODE]]
#
# The stock side runs the same binary with /usr/lib/llvm-16/lib in front of LD_LIBRARY_PATH: on
# Debian 12 libomptarget 16 finds its stock plugins only there, and without it every region
# runs on the host (host fallback), which is not the stock plugin. offload_bench stops when it
# sees no device. A failed stock run is retried up to 3 times (counted at the end); one that
# fails every attempt is reported as FAILED, never timed.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 3 ] || { echo "usage: $0 ROUNDS A.so B.so [REPS [empty|mapped]]" >&2; exit 2; }
rounds=$1 a=$(realpath "$2") b=$(realpath "$3") reps=${4:-50000} mode=${5:-empty}
case "$mode" in empty|mapped) ;; *) echo "$0: MODE is empty or mapped, not $mode" >&2; exit 2 ;; esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
clang-16 -O2 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu bench/offload_bench.c -o "$tmp/ob"
run=target/release/ompcluster-run
stock_ld="/usr/lib/llvm-16/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
stock_retries=3
: >"$tmp/stock-retried"

# stock PROGRAM ARGS...: its stdout under the stock x86_64 plugin, from the first of
# 1 + stock_retries attempts that exits 0; each retry is recorded in $tmp/stock-retried with
# its cause (libomp's task_team assertion, or another failure). Prints FAILED when every
# attempt failed.
stock() {
  local out i
  for i in $(seq 0 "$stock_retries"); do
    if out=$(LD_LIBRARY_PATH="$stock_ld" "$@" 2>"$tmp/stock-err"); then
      printf '%s\n' "$out"
      return 0
    fi
    if [ "$i" -lt "$stock_retries" ]; then
      if { cat "$tmp/stock-err"; printf '%s\n' "$out"; } | grep -q 'task_team != '; then
        echo task_team >>"$tmp/stock-retried"
      else
        echo other >>"$tmp/stock-retried"
      fi
      echo "stock run failed, retrying: $(tail -c 300 "$tmp/stock-err")" >&2
    fi
  done
  echo "stock run failed all $((stock_retries + 1)) attempts (not timed): $(tail -c 300 "$tmp/stock-err")" >&2
  echo FAILED
}

# The stock side must offload: stop here if it does not.
devices=$(LD_LIBRARY_PATH="$stock_ld" "$tmp/ob" devices) || {
  echo "the stock x86_64 plugin did not load (LD_LIBRARY_PATH=$stock_ld)" >&2
  exit 1
}
echo "stock x86_64 plugin (LD_LIBRARY_PATH=$stock_ld): $devices"
for _ in $(seq "$rounds"); do
  echo "stock $(stock "$tmp/ob" "$mode" "$reps")"
  echo "A $(OMPCLUSTER_PLUGIN=$a "$run" -np 2 "$tmp/ob" "$mode" "$reps")"
  echo "B $(OMPCLUSTER_PLUGIN=$b "$run" -np 2 "$tmp/ob" "$mode" "$reps")"
done | python3 -c '
import sys, collections, statistics
runs, failed = collections.defaultdict(list), collections.Counter()
for line in sys.stdin:
    who, *rest = line.split()
    if len(rest) == 2 and rest[0].endswith("_us"):
        runs[who].append(float(rest[1]))
    else:
        # FAILED (stock, every attempt), or a run that failed its check (FAIL ...).
        failed[who] += 1
        if rest != ["FAILED"]:
            print(f"{who}: {line.strip()}", file=sys.stderr)
for who, v in runs.items():
    print(f"{who:5} median {statistics.median(v):6.2f} us   runs: {v}" + (f"   ({failed[who]} failed, not timed)" if failed[who] else ""))
for who in failed.keys() - runs.keys():
    print(f"{who:5} failed in every round")
'
echo "stock runs retried after libomp's task_team assertion: $(grep -c task_team "$tmp/stock-retried" || true); after another failure: $(grep -c other "$tmp/stock-retried" || true)"
