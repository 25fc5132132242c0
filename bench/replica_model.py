#!/usr/bin/env python3
"""Efficiency by failure rate, FTHP-MPI style (issue 35): when do replicas beat buddy copies
and checkpoints? A model fed with costs this project measured, not a run.

For a mechanism with failure-free overhead o (a fraction of the run) and a cost of c seconds
per failure, a job that fails every M seconds on average spends T = T0 (1 + o) / (1 - c / M)
(every failure costs c; failures during the job's own recovery are ignored, so c << M), and
its efficiency is E = T0 / T = (1 - c / M) / (1 + o). Lineage recovery and replicas both have
such a c: what a failure costs does not grow with the job's length (what is lost is what was
not saved yet), only with what was in flight.

Checkpoint/restart alone (the classic baseline: the job rolls back to its last checkpoint),
with Daly's interval tau = sqrt(2 delta M): E = 1 / (1 + delta / tau) * (1 - (R + (tau + delta) / 2) / M).

Inputs (bench/results/replicas.json, written by `bash bench/replicas.sh ROUNDS`): for ft_print's
chain of 120 regions of 25 ms, the failure-free time and the time with rank 1 SIGKILLed after
60 regions, for k = 1 (buddy copies, the default), k = 2 and k = 2 auto; the failure-free
overhead of k = 2 on the Cholesky example (kernels that compute: replicas take cores). From
bench/results/ckpt_stores.json: the embedded store's save time (delta, 294 MB). R, a whole job's
restart after a failure: its detection (OMPCLUSTER_HB_TIMEOUT, 1 s in these runs) plus the
start-up of a job (--restart-s; 1.0 s by default, about what `ompcluster-run -np 4` of a program
that does nothing takes here).

    python3 bench/replica_model.py [--restart-s 1.0]
"""
import argparse
import json
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import plot  # noqa: E402

MTBF = [10, 30, 60, 120, 300, 600, 1800, 3600]


def lineage(o, c, m):
    return max(0.0, 1 - c / m) / (1 + o)


def checkpoint_restart(delta, r, m):
    tau = math.sqrt(2 * delta * m)
    return max(0.0, (1 / (1 + delta / tau)) * (1 - (r + (tau + delta) / 2) / m))


def crossing(f, g, lo=1.0, hi=1e6):
    """The MTBF above which f is no longer better than g (f wins at lo): bisection on a log scale."""
    if f(hi) > g(hi):
        return math.inf
    if f(lo) <= g(lo):
        return None
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        if f(mid) > g(mid):
            lo = mid
        else:
            hi = mid
    return lo


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--restart-s", type=float, default=1.0, help="a whole job's restart, seconds (R)")
    a = ap.parse_args()
    with open(os.path.join(ROOT, "bench/results/replicas.json")) as f:
        med = json.load(f)["parts"]["runs"]["data"]["median"]
    with open(os.path.join(ROOT, "bench/results/ckpt_stores.json")) as f:
        stores = json.load(f)["parts"]["stores"]["data"]["rows"]
    delta = next(r for r in stores if r["store"] == "embedded")["save_s"]
    free, killed = med["ft_print 120 x 25 ms (s)"], med["ft_print, rank 1 killed (s)"]
    t0 = free["k=1"]
    chol = med["cholesky 2048/128 (s)"]
    # Differences below the runs' spread (0.1% of the run, 10 ms) count as none.
    over = lambda a, b: max(0.0, round(a / b - 1, 3))
    cost = lambda k, f: max(0.0, round(k - f, 2))
    modes = {
        # name: (failure-free overhead, cost per failure)
        "buddy copies (k=1)": (0.0, cost(killed["k=1"], free["k=1"])),
        "k=2, chain": (over(free["k=2"], t0), cost(killed["k=2"], free["k=2"])),
        "k=2 auto, chain": (over(free["k=2 auto"], t0), cost(killed["k=2 auto"], free["k=2 auto"])),
        "k=2, Cholesky's overhead": (over(chol["k=2"], chol["k=1"]), cost(killed["k=2"], free["k=2"])),
    }
    r = 1.0 + a.restart_s
    print(f"inputs: ft_print failure-free {t0:.2f} s (k=1); checkpoint save delta {delta:.3f} s; restart R {r:.2f} s")
    for name, (o, c) in modes.items():
        print(f"  {name:26} overhead {o * 100:5.1f}%, cost per failure {c:5.2f} s")
    print()
    head = f"{'MTBF (s)':>9} " + " ".join(f"{n:>26}" for n in list(modes) + ["checkpoint/restart"])
    print(head)
    rows = []
    for m in MTBF:
        effs = [lineage(o, c, m) for o, c in modes.values()] + [checkpoint_restart(delta, r, m)]
        rows.append({"mtbf_s": m, "efficiency": dict(zip(list(modes) + ["checkpoint/restart"], [round(e, 4) for e in effs]))})
        print(f"{m:>9} " + " ".join(f"{e:>26.3f}" for e in effs))
    print()
    wins = {}
    ob, cb = modes["buddy copies (k=1)"]
    for name, (o, c) in modes.items():
        if name.startswith("buddy"):
            continue
        x = crossing(lambda m: lineage(o, c, m), lambda m: lineage(ob, cb, m))
        wins[name] = None if x is None else (None if math.isinf(x) else round(x, 1))
        if x is None:
            print(f"{name}: never better than buddy copies")
        elif math.isinf(x):
            print(f"{name}: better than buddy copies at every failure rate")
        else:
            print(f"{name}: better than buddy copies when a failure comes more often than every {x:.0f} s")
    # Where replicas (cost per failure ~0) win over lineage with buddy copies (cost c per
    # failure, no overhead): 1 / (1 + o) > 1 - c / M, i.e. M < c (1 + o) / o.
    print("\nbreak-even MTBF (s) below which k=2 wins, for a replica overhead o and a cost c per failure of buddy copies:")
    costs = [cb, 10.0, 60.0]
    print(f"{'o':>6} " + " ".join(f"{'c = %.1f s' % c:>12}" for c in costs))
    even = {}
    for o in [0.01, 0.05, 0.25, 1.0]:
        row = [c * (1 + o) / o for c in costs]
        even[str(o)] = [round(x, 1) for x in row]
        print(f"{o:>6.0%} " + " ".join(f"{x:>12.0f}" for x in row))
    cmd = "python3 bench/replica_model.py" + "".join(" " + x for x in sys.argv[1:])
    plot.record("replica_model", "bench/replica_model.py", cmd, {"model": {
        "inputs": {"t0_s": t0, "delta_s": delta, "restart_s": r, "modes": {n: {"overhead": round(o, 4), "cost_per_failure_s": round(c, 3)} for n, (o, c) in modes.items()}},
        "rows": rows, "replicas_win_below_mtbf_s": wins, "break_even_s": {"costs_s": costs, "by_overhead": even}}})


if __name__ == "__main__":
    main()
