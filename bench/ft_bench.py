#!/usr/bin/env python3
"""Recovery benchmarks (issue 8, item 10, and the bounded record of item 11), each side measured
in the same run, alternating rounds:

  (a) matmul on 3 workers, one worker killed a third of the way in, against the failure-free
      run: time ratio, with detection, pause and re-execution reported apart;
  (b) the same failure, lost work re-run in parallel against one task after another
      (OMPCLUSTER_FT_REEXEC=sequential): ratio of the recovery pauses;
  (c) failure-free cost of what recovery keeps: fault tolerance on against the same with
      OMPCLUSTER_FT_RETAIN=0 (keeps nothing): time ratio, and the memory the head keeps;
  (d) the head's peak memory after 2,000,000 empty regions against after 100,000.

    python3 bench/ft_bench.py [--rounds 3] [--n 4096] [--bs 256]

Heartbeat: period 100 ms, timeout 1000 ms.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCHER = os.path.join(ROOT, "target", "release", "ompcluster-run")
FT = {"OMPCLUSTER_HB_PERIOD": "100", "OMPCLUSTER_HB_TIMEOUT": "1000"}


def build(src, out):
    subprocess.run(["clang-16", "-O2", "-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu", src, "-o", out], check=True)


def run(exe, args, extra, work):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMPCLUSTER_")}
    env.update(FT)
    env.update(extra)
    rep = os.path.join(work, "report.json")
    if os.path.exists(rep):
        os.remove(rep)
    env["OMPCLUSTER_REPORT"] = rep
    t0 = time.time()
    p = subprocess.run([LAUNCHER, "-np", "4", exe] + args, env=env, capture_output=True, text=True, timeout=600)
    secs = time.time() - t0
    # The offloaded product's own time, as the program prints it (start-up excluded).
    for line in p.stdout.splitlines():
        if line.startswith("matmul") and " s," in line:
            secs = float(line.split(": ")[1].split(" s,")[0])
    if p.returncode != 0 or not any(w in p.stdout for w in ("result correct", "result not checked", "empty_us")):
        sys.exit(f"run failed ({p.returncode}): {exe} {args} {extra}\n{p.stdout}\n{p.stderr[-3000:]}")
    with open(rep) as f:
        return secs, json.load(f), p.stdout


def med(v):
    return statistics.median(v)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--bs", type=int, default=256)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="ft-bench-")
    mm = os.path.join(work, "matmul")
    build(os.path.join(ROOT, "examples", "matmul", "matmul.c"), mm)
    ob = os.path.join(work, "offload_bench")
    build(os.path.join(ROOT, "bench", "offload_bench.c"), ob)
    args = [str(a.n), str(a.bs), "nocheck"]
    tasks = (a.n // a.bs) ** 3
    kill = {"OMPCLUSTER_FT_INJECT": f"kill:rank=2:after_tasks={tasks // 3}"}
    free, failed, seq, noretain = [], [], [], []
    for r in range(a.rounds):
        free.append(run(mm, args, {}, work))
        failed.append(run(mm, args, kill, work))
        seq.append(run(mm, args, dict(kill, OMPCLUSTER_FT_REEXEC="sequential"), work))
        noretain.append(run(mm, args, {"OMPCLUSTER_FT_RETAIN": "0"}, work))
        print(f"round {r + 1}: free {free[-1][0]:.2f} s, killed {failed[-1][0]:.2f} s, killed+sequential {seq[-1][0]:.2f} s, retain=0 {noretain[-1][0]:.2f} s", flush=True)

    def rec(run_):
        return run_[1]["recoveries"][0] if run_[1]["recoveries"] else {}

    tf, tk = med([x[0] for x in free]), med([x[0] for x in failed])
    det = med([x[1]["failures"][0]["detection_latency_seconds"] or 0 for x in failed])
    pause = med([rec(x).get("paused_seconds", 0) for x in failed])
    rerun = med([rec(x).get("tasks_reexecuted", 0) for x in failed])
    pause_seq = med([rec(x).get("paused_seconds", 0) for x in seq])
    rerun_seq = med([rec(x).get("tasks_reexecuted", 0) for x in seq])
    tn = med([x[0] for x in noretain])
    kept = med([x[1]["retained_bytes"] for x in free])
    rss_on = med([x[1]["head_max_rss_bytes"] for x in free])
    rss_off = med([x[1]["head_max_rss_bytes"] for x in noretain])
    print(f"\nmatmul N={a.n} BS={a.bs} ({tasks} tasks), 3 workers, {a.rounds} alternating rounds, medians:")
    print("| measure | value |")
    print("|---|---|")
    print(f"| (a) failure-free run | {tf:.2f} s |")
    print(f"| (a) rank 2 killed after {tasks // 3} tasks | {tk:.2f} s: **{tk / tf:.2f}x** |")
    print(f"| (a) detection (kill to notice) | {det * 1e3:.1f} ms |")
    print(f"| (a) recovery pause (fence, plan, re-run) | {pause:.3f} s, {rerun:.0f} tasks re-run |")
    print(f"| (a) rest of the slowdown (work of the dead worker done by 2) | {tk - tf - pause - det:.2f} s |")
    per = pause / rerun if rerun else float("nan")
    per_seq = pause_seq / rerun_seq if rerun_seq else float("nan")
    print(f"| (b) same kill, re-run one after another | pause {pause_seq:.3f} s, {rerun_seq:.0f} tasks: parallel/sequential **{pause / pause_seq if pause_seq else float('nan'):.2f}**; per re-run task {per * 1e3:.1f} / {per_seq * 1e3:.1f} ms = **{per / per_seq:.2f}** |")
    print(f"| (c) fault tolerance on, failure-free, against OMPCLUSTER_FT_RETAIN=0 | {tf:.2f} s / {tn:.2f} s: **{tf / tn:.3f}** |")
    print(f"| (c) bytes the head keeps for recovery (retained_bytes) | {kept / 2**20:.1f} MiB |")
    print(f"| (c) head peak RSS, on / retain=0 | {rss_on / 2**20:.0f} MiB / {rss_off / 2**20:.0f} MiB |")
    small = run(ob, ["empty", "100000"], {}, work)
    big = run(ob, ["empty", "2000000"], {}, work)
    rs, rb = small[1]["head_max_rss_bytes"], big[1]["head_max_rss_bytes"]
    print(f"| (d) head peak RSS after 100,000 / 2,000,000 empty regions | {rs / 2**20:.1f} / {rb / 2**20:.1f} MiB: **{rb / rs:.3f}** (tasks still recorded: {small[1]['tasks_recorded']} / {big[1]['tasks_recorded']}) |")


if __name__ == "__main__":
    main()
