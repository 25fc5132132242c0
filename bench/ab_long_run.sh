#!/usr/bin/env bash
# A/B of two builds of the plugin on the long run of issue 23: tests/programs/ft_inplace.c
# (64 buffers of 512 bytes kept on the device, one in-place region per iteration), N regions
# (1,000,000 by default), -np 4, rank 2 killed after 90% of them (OMPCLUSTER_FT_INJECT),
# heartbeat 100/1000 ms. Alternating runs; prints every run's own time (the program's "regions
# took" line), the tasks re-run, the medians and the ratio B/A.
#   bash bench/ab_long_run.sh ROUNDS A.so B.so [N]
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 3 ] || { echo "usage: $0 ROUNDS A.so B.so [N]" >&2; exit 2; }
rounds=$1 a=$(realpath "$2") b=$(realpath "$3") n=${4:-1000000}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
clang-16 -O2 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu tests/programs/ft_inplace.c -o "$tmp/ft_inplace"
run=target/release/ompcluster-run
declare -A times
for _ in $(seq "$rounds"); do
  for side in A B; do
    so=$a; [ "$side" = B ] && so=$b
    OMPCLUSTER_PLUGIN=$so OMPCLUSTER_REPORT="$tmp/report.json" OMPCLUSTER_HB_PERIOD=100 OMPCLUSTER_HB_TIMEOUT=1000 \
      OMPCLUSTER_FT_INJECT="kill:rank=2:after_tasks=$((n * 9 / 10))" \
      "$run" -np 4 "$tmp/ft_inplace" "$n" >"$tmp/out" 2>"$tmp/err" || { echo "$side failed:"; tail -c 2000 "$tmp/err"; exit 1; }
    grep -q PASS "$tmp/out" || { echo "$side: wrong output"; cat "$tmp/out"; exit 1; }
    s=$(sed -n 's/.*regions took \([0-9.]*\) s.*/\1/p' "$tmp/err" | tail -1)
    rerun=$(python3 -c "import json; r=json.load(open('$tmp/report.json')); print(sum(x['tasks_reexecuted'] for x in r['recoveries']), len(r['failures']))")
    echo "$side $s s (tasks re-run, failures: $rerun)"
    times[$side]+="$s "
  done
done
python3 - "${times[A]}" "${times[B]}" <<'PY'
import statistics, sys
a = [float(x) for x in sys.argv[1].split()]
b = [float(x) for x in sys.argv[2].split()]
ma, mb = statistics.median(a), statistics.median(b)
print(f"A median {ma:.2f} s ({min(a):.2f}-{max(a):.2f}), B median {mb:.2f} s ({min(b):.2f}-{max(b):.2f}), B/A {mb / ma:.3f}")
PY
