#!/usr/bin/env bash
# Every A/B benchmark of a change to the region path, in one run, build A (before) against
# build B (after), each part alternating its runs (BENCHMARKS.md, "nowait regions in flight"):
#   1. regions at once and the head's CPU, 16 and 32 workers (bench/nowait_width.sh);
#   2. matmul and Cholesky on 3 workers, the tiny-block matmul 1024/32 among them
#      (bench/ab_examples.sh);
#   3. the empty region, 1 worker (bench/ab_plugins.sh);
#   4. the 1,000,000-region long run with a worker killed at 90% (bench/ab_long_run.sh);
#   5. Task Bench METG, 3 workers, with the stock plugin alongside (bench/taskbench.py --before).
#   bash bench/ab_all.sh ROUNDS A.so B.so      (about 1 hour at ROUNDS=3)
# B is also what target/release holds for the parts that take the current build (METG's
# ours-3w): build B first. Output: each part's own table, in order.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 3 ] || { echo "usage: $0 ROUNDS A.so B.so" >&2; exit 2; }
rounds=$1 a=$(realpath "$2") b=$(realpath "$3")
if ! cmp -s "$b" target/release/libompcluster_plugin.so; then
  echo "ab_all: $b is not target/release/libompcluster_plugin.so: METG's ours-3w would time another build" >&2
  exit 2
fi
echo "## 1. Regions at once, head CPU (bench/nowait_width.sh $rounds A B)"
bash bench/nowait_width.sh "$rounds" "$a" "$b"
echo
echo "## 2. Examples on 3 workers (bench/ab_examples.sh $((rounds + 2)) A B ...)"
bash bench/ab_examples.sh "$((rounds + 2))" "$a" "$b" "matmul 2048 256" "matmul 1024 32" "cholesky 2048 256" "cholesky 3072 256"
echo
echo "## 3. Empty region, 1 worker (bench/ab_plugins.sh $((rounds * 4)) A B)"
bash bench/ab_plugins.sh "$((rounds * 4))" "$a" "$b"
echo
echo "## 4. 1,000,000 regions, rank 2 killed at 90% (bench/ab_long_run.sh $rounds A B)"
bash bench/ab_long_run.sh "$rounds" "$a" "$b"
echo
echo "## 5. METG (python3 bench/taskbench.py --rounds 2 --configs stock,ours-3w,before-3w --before A)"
python3 bench/taskbench.py --rounds 2 --no-save --configs stock,ours-3w,before-3w --before "$a" 2>/dev/null
