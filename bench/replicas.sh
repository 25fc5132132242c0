#!/usr/bin/env bash
# What replicas cost (issue 35): the same build and programs run with OMPCLUSTER_FT_REPLICAS=1
# (the default), 2, 3, 3 with voting, and 2 and 3 with OMPCLUSTER_FT_REPLICATE=auto (its
# default budget, 25%), alternating run by run, 3 workers (-np 4). Cases: the matmul example
# 1024/256 and the Cholesky example 2048/128 (they compute: on this 2-core machine every
# replica takes a core, so they show what replicas cost in cores), the resident stencil 24
# blocks x 8 steps, ft_matmul 256/64 with kernels that sleep 200 ms (cores do not decide: it
# shows what they cost in workers), and ft_print's chain of 120 regions of 25 ms. Then a
# worker killed: the same chain, rank 1 SIGKILLed after 60 regions, with k = 1 (buddy copies,
# the default), k = 2 and k = 2 auto: seconds and regions re-run. Prints per case the median
# and range of each setting and its ratio to k = 1, and writes the medians to
# bench/results/replicas.json (read by bench/replica_model.py).
#   bash bench/replicas.sh ROUNDS
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 1 ] || { echo "usage: $0 ROUNDS" >&2; exit 2; }
rounds=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc() { clang-16 -O2 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu "$1" -lm -o "$tmp/$2"; }
cc examples/matmul/matmul.c matmul
cc examples/cholesky/cholesky.c cholesky
cc tests/programs/resident_stencil.c stencil
cc tests/programs/ft_matmul.c ft_matmul
cc tests/programs/ft_print.c ft_print
run=target/release/ompcluster-run
ft="OMPCLUSTER_HB_PERIOD=100 OMPCLUSTER_HB_TIMEOUT=1000"
settings=("k=1|" "k=2|OMPCLUSTER_FT_REPLICAS=2" "k=3|OMPCLUSTER_FT_REPLICAS=3" "k=3 vote|OMPCLUSTER_FT_REPLICAS=3 OMPCLUSTER_FT_VOTE=1"
          "k=2 auto|OMPCLUSTER_FT_REPLICAS=2 OMPCLUSTER_FT_REPLICATE=auto" "k=3 auto|OMPCLUSTER_FT_REPLICAS=3 OMPCLUSTER_FT_REPLICATE=auto")
secs() { # command...: wall seconds of a run that must exit 0
  local t0 t1
  t0=$(date +%s.%N)
  "$@" >"$tmp/out" 2>"$tmp/err" || { echo "failed: $*" >&2; cat "$tmp/err" >&2; exit 1; }
  t1=$(date +%s.%N)
  python3 -c "print(f'{$t1 - $t0:.3f}')"
}
for _ in $(seq "$rounds"); do
  for s in "${settings[@]}"; do
    name=${s%%|*}
    read -r -a e <<<"$ft ${s#*|}"
    echo "$name|matmul 1024/256 (s)|$(secs env "${e[@]}" "$run" -np 4 "$tmp/matmul" 1024 256)"
    echo "$name|cholesky 2048/128 (s)|$(secs env "${e[@]}" "$run" -np 4 "$tmp/cholesky" 2048 128)"
    echo "$name|resident stencil 24x8 (s)|$(secs env "${e[@]}" "$run" -np 4 "$tmp/stencil" 24 65536 8)"
    echo "$name|ft_matmul 256/64, 200 ms kernels (s)|$(secs env "${e[@]}" "$run" -np 4 "$tmp/ft_matmul" 256 64 200000)"
    echo "$name|ft_print 120 x 25 ms (s)|$(secs env "${e[@]}" "$run" -np 4 "$tmp/ft_print" 120 25000)"
  done
  for s in "k=1|" "k=2|OMPCLUSTER_FT_REPLICAS=2" "k=2 auto|OMPCLUSTER_FT_REPLICAS=2 OMPCLUSTER_FT_REPLICATE=auto"; do
    name=${s%%|*}
    read -r -a e <<<"$ft OMPCLUSTER_FT_INJECT=kill:rank=1:after_tasks=60 OMPCLUSTER_REPORT=$tmp/r.json ${s#*|}"
    echo "$name|ft_print, rank 1 killed (s)|$(secs env "${e[@]}" "$run" -np 4 "$tmp/ft_print" 120 25000)"
    echo "$name|ft_print, rank 1 killed (regions re-run)|$(python3 -c "import json; print(json.load(open('$tmp/r.json'))['tasks_reexecuted'])")"
  done
done | python3 -c '
import sys, collections, statistics
sys.path.insert(0, "bench")
import plot
runs = collections.defaultdict(list)
for line in sys.stdin:
    name, case, v = line.rstrip("\n").split("|")
    runs[(case, name)].append(float(v))
names = ["k=1", "k=2", "k=3", "k=3 vote", "k=2 auto", "k=3 auto"]
medians = {}
for case in dict.fromkeys(c for c, _ in runs):
    base = statistics.median(runs[(case, "k=1")])
    cells = []
    for name in names:
        v = runs.get((case, name))
        if v:
            m = statistics.median(v)
            medians.setdefault(case, {})[name] = m
            ratio = f" ({m / base:.2f})" if base else ""
            cells.append(f"{name} {m:.3f} [{min(v):.3f}-{max(v):.3f}]{ratio}")
    print(f"{case:42} " + "   ".join(cells))
plot.record("replicas", "bench/replicas.sh", "bash bench/replicas.sh " + sys.argv[1], {"runs": {"rounds": int(sys.argv[1]), "median": medians}})
' "$rounds"
