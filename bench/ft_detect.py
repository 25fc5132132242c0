#!/usr/bin/env python3
"""Heartbeat settings against false positives under load, and against detection time.

For each (period, timeout) pair: RUNS failure-free runs of the matmul example on 4 ranks (the
2-core machine fully loaded: 4 processes computing), counting the workers the detector
declared dead although none failed (false positives: each costs a needless recovery and a
killed worker); then one run with a worker frozen (SIGSTOP, injected 1.5 s in), measuring how long the
head took to declare it dead (a frozen process is only ever noticed by the heartbeat).

    python3 bench/ft_detect.py [--runs 4] [--n 2048] [--pairs 100:500,100:1000,250:2000,500:5000]

Prints a markdown table; the numbers go to bench/results/ft_detect.json (bench/plot.py).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plot  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCHER = os.path.join(ROOT, "target", "release", "ompcluster-run")


def run(exe, args, env_extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMPCLUSTER_")}
    env.update(env_extra)
    rep = tempfile.mktemp(suffix=".json")
    env["OMPCLUSTER_REPORT"] = rep
    p = subprocess.run([LAUNCHER, "-np", "4", exe] + args, env=env, capture_output=True, timeout=600)
    with open(rep) as f:
        r = json.load(f)
    os.remove(rep)
    return p.returncode, r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--pairs", default="100:500,100:1000,250:2000,500:5000")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="ft-detect-")
    exe = os.path.join(work, "matmul")
    subprocess.run(["clang-16", "-O2", "-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu",
                    os.path.join(ROOT, "examples", "matmul", "matmul.c"), "-o", exe], check=True)
    args = [str(a.n), "256", "nocheck"]
    started, rows = plot.now(), []
    print("| period ms | timeout ms | failure-free runs | false positives | run time (median) | frozen worker declared dead after |")
    print("|---|---|---|---|---|---|")
    for pair in a.pairs.split(","):
        period, timeout = pair.split(":")
        env = {"OMPCLUSTER_HB_PERIOD": period, "OMPCLUSTER_HB_TIMEOUT": timeout}
        fps, times = 0, []
        for _ in range(a.runs):
            t0 = time.time()
            code, r = run(exe, args, env)
            times.append(time.time() - t0)
            fps += len(r["failures"])
        # A frozen worker (injected: the head knows when) is noticed by the heartbeat only.
        code, r = run(exe, ["3072", "256", "nocheck"], dict(env, OMPCLUSTER_FT_INJECT="stop:rank=2:after_ms=1500"))
        lat = [f["detection_latency_seconds"] for f in r["failures"] if f["rank"] == 2]
        detect = f"{lat[0]:.2f} s" if lat and lat[0] is not None else "not noticed"
        times.sort()
        print(f"| {period} | {timeout} | {a.runs} | {fps} | {times[len(times) // 2]:.2f} s | {detect} |", flush=True)
        rows.append({"period_ms": int(period), "timeout_ms": int(timeout), "runs": a.runs, "false_positives": fps,
                     "run_time_median_s": float(f"{times[len(times) // 2]:.2f}"),
                     "frozen_declared_dead_after_s": float(f"{lat[0]:.2f}") if lat and lat[0] is not None else None})
    plot.record("ft_detect", "bench/ft_detect.py", f"python3 bench/ft_detect.py --runs {a.runs} --n {a.n} --pairs {a.pairs}",
                {"settings": {"n": a.n, "rows": rows}}, date=started)


if __name__ == "__main__":
    main()
