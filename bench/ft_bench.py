#!/usr/bin/env python3
"""Recovery benchmarks (issue 8, item 10, and the bounded record of item 11), each side measured
in the same run, alternating rounds:

  (a) matmul on 3 workers, one worker killed a third of the way in, against the failure-free
      run: time ratio, with detection, pause and re-execution reported apart;
  (b) the same lost set re-run in parallel against one task after another
      (OMPCLUSTER_FT_REEXEC=sequential): bench/ft_reexec.c on 4 workers, round-robin
      placement, rank 2 killed once every task completed, so that each run loses the same
      number of equal, independent tasks (the program says why); ratio of the recovery
      pauses, for compute-bound tasks and for tasks that wait (sleep) instead;
  (c) failure-free cost of what recovery keeps: fault tolerance on against the same with
      OMPCLUSTER_FT_RETAIN=0 (keeps nothing): time ratio, and the memory the head keeps;
  (d) the head's peak memory after 2,000,000 empty regions against after 100,000.

    python3 bench/ft_bench.py [--rounds 3] [--n 4096] [--bs 256] [--only a,b,c,d]

Heartbeat: period 100 ms, timeout 1000 ms. Prints markdown tables; the parts measured go to
bench/results/ft_bench.json (bench/plot.py).
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
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plot  # noqa: E402


def build(src, out, extra=()):
    subprocess.run(["clang-16", "-O2", "-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu", src, "-o", out, *extra], check=True)


def launch(exe, args, extra, work, np_=4, timeout=600):
    """One run under ompcluster-run with the heartbeat settings above, `extra` settings and a
    report: (the finished process, its wall seconds, the report's path)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMPCLUSTER_")}
    env.update(FT)
    env.update(extra)
    rep = os.path.join(work, "report.json")
    if os.path.exists(rep):
        os.remove(rep)
    env["OMPCLUSTER_REPORT"] = rep
    t0 = time.time()
    p = subprocess.run([LAUNCHER, "-np", str(np_), exe] + args, env=env, capture_output=True, text=True, timeout=timeout)
    return p, time.time() - t0, rep


def run(exe, args, extra, work, np_=4):
    p, secs, rep = launch(exe, args, extra, work, np_)
    # The offloaded product's own time, as the program prints it (start-up excluded).
    for line in p.stdout.splitlines():
        if line.startswith("matmul") and " s," in line:
            secs = float(line.split(": ")[1].split(" s,")[0])
    if p.returncode != 0 or not any(w in p.stdout for w in ("result correct", "result not checked", "empty_us", "ft_reexec:", "resubmit ")):
        sys.exit(f"run failed ({p.returncode}): {exe} {args} {extra}\n{p.stdout}\n{p.stderr[-3000:]}")
    with open(rep) as f:
        return secs, json.load(f), p.stdout


def med(v):
    return statistics.median(v)


def f(x, digits):
    """x as the tables print it, for the result file."""
    return float(f"{x:.{digits}f}")


def bench_b(rounds, work, parts):
    """(b): the same lost set, parallel against sequential re-execution."""
    exe = os.path.join(work, "ft_reexec")
    build(os.path.join(ROOT, "bench", "ft_reexec.c"), exe)
    nb = 24
    base = {"OMPCLUSTER_SCHEDULER": "roundrobin", "OMPCLUSTER_FT_INJECT": f"kill:rank=2:after_tasks={nb}"}
    kinds = [("compute-bound (0.33 s each)", [str(nb), "4096", "60000", "0"]), ("waiting (sleep 250 ms)", [str(nb), "4096", "20", "250000"])]
    print(f"\n(b) bench/ft_reexec.c, {nb} tasks on 4 workers (-np 5), round-robin, rank 2 killed after the last task; {rounds} alternating rounds, medians of the recovery pause:")
    print("| tasks | lost set (versions lost, tasks re-run), every run | parallel pause (3 survivors) | sequential pause | parallel / sequential |")
    print("|---|---|---|---|---|")
    rows = []
    for kind, args in kinds:
        par, seq, sets = [], [], set()
        for _ in range(rounds):
            for mode, out in (("parallel", par), ("sequential", seq)):
                _, rep, _ = run(exe, args, dict(base, OMPCLUSTER_FT_REEXEC=mode), work, np_=5)
                r = rep["recoveries"][0]
                sets.add((r["versions_lost"], r["tasks_reexecuted"]))
                out.append(r["paused_seconds"])
        same = ", ".join(f"({v}, {t})" for v, t in sorted(sets)) + (" (the same)" if len(sets) == 1 else " (NOT the same)")
        p, q = med(par), med(seq)
        print(f"| {kind} | {same} | {p:.3f} s | {q:.3f} s | **{p / q:.2f}** |", flush=True)
        rows.append({"kind": kind, "lost_set": same, "parallel_pause_s": f(p, 3), "sequential_pause_s": f(q, 3), "parallel_over_sequential": f(p / q, 2)})
    parts["b"] = {"tasks": nb, "workers": 4, "rounds": rounds, "rows": rows}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--bs", type=int, default=256)
    ap.add_argument("--only", default="a,b,c,d", help="which benchmarks (a,c and d share runs)")
    a = ap.parse_args()
    only = set(a.only.split(","))
    work = tempfile.mkdtemp(prefix="ft-bench-")
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    parts = {}
    record = lambda: plot.record("ft_bench", "bench/ft_bench.py", f"python3 bench/ft_bench.py --rounds {a.rounds} --n {a.n} --bs {a.bs} --only {a.only}",
                                 parts, date=started)
    if "b" in only:
        bench_b(a.rounds, work, parts)
    if not only & {"a", "c", "d"}:
        record()
        return
    mm = os.path.join(work, "matmul")
    build(os.path.join(ROOT, "examples", "matmul", "matmul.c"), mm)
    ob = os.path.join(work, "offload_bench")
    build(os.path.join(ROOT, "bench", "offload_bench.c"), ob)
    args = [str(a.n), str(a.bs), "nocheck"]
    tasks = (a.n // a.bs) ** 3
    kill = {"OMPCLUSTER_FT_INJECT": f"kill:rank=2:after_tasks={tasks // 3}"}
    free, failed, noretain = [], [], []
    for r in range(a.rounds):
        # Alternate which side goes first: the machine drifts within a round too.
        order = [("free", {}), ("noretain", {"OMPCLUSTER_FT_RETAIN": "0"})]
        if r % 2:
            order.reverse()
        if "a" in only:
            order.append(("failed", kill))
        got = {}
        for name, extra in order:
            got[name] = run(mm, args, extra, work)
        free.append(got["free"])
        noretain.append(got["noretain"])
        if "failed" in got:
            failed.append(got["failed"])
        print(f"round {r + 1}: " + ", ".join(f"{k} {v[0]:.2f} s" for k, v in got.items()), flush=True)

    def rec(run_):
        return run_[1]["recoveries"][0] if run_[1]["recoveries"] else {}

    tf, tn = med([x[0] for x in free]), med([x[0] for x in noretain])
    print(f"\nmatmul N={a.n} BS={a.bs} ({tasks} tasks), 3 workers, {a.rounds} alternating rounds, medians:")
    print("| measure | value |")
    print("|---|---|")
    print(f"| (a) failure-free run | {tf:.2f} s |")
    if failed:
        tk = med([x[0] for x in failed])
        det = med([x[1]["failures"][0]["detection_latency_seconds"] or 0 for x in failed])
        pause = med([rec(x).get("paused_seconds", 0) for x in failed])
        rerun = med([rec(x).get("tasks_reexecuted", 0) for x in failed])
        print(f"| (a) rank 2 killed after {tasks // 3} tasks | {tk:.2f} s: **{tk / tf:.2f}x** |")
        print(f"| (a) detection (kill to notice) | {det * 1e3:.1f} ms |")
        print(f"| (a) recovery pause (fence, plan, re-run) | {pause:.3f} s, {rerun:.0f} tasks re-run |")
        print(f"| (a) rest of the slowdown (work of the dead worker done by 2) | {tk - tf - pause - det:.2f} s |")
        parts["a"] = {"n": a.n, "bs": a.bs, "tasks": tasks, "workers": 3, "rounds": a.rounds, "free_s": f(tf, 2), "killed_s": f(tk, 2),
                      "killed_over_free": f(tk / tf, 2), "inject": kill["OMPCLUSTER_FT_INJECT"], "detection_ms": f(det * 1e3, 1),
                      "recovery_pause_s": f(pause, 3), "tasks_rerun": round(rerun), "rest_of_slowdown_s": f(tk - tf - pause - det, 2)}
    ratios = [f[0] / n[0] for f, n in zip(free, noretain)]
    kept = med([x[1]["retained_bytes"] for x in free])
    rss_on = med([x[1]["head_max_rss_bytes"] for x in free])
    rss_off = med([x[1]["head_max_rss_bytes"] for x in noretain])
    print(f"| (c) fault tolerance on, failure-free, against OMPCLUSTER_FT_RETAIN=0 | {tf:.2f} s / {tn:.2f} s: **{tf / tn:.3f}**; per round {', '.join(f'{x:.3f}' for x in ratios)} (median {med(ratios):.3f}) |")
    pc = parts["c"] = {"free_on_s": f(tf, 2), "free_retain0_s": f(tn, 2), "on_over_retain0": f(tf / tn, 3), "per_round": [f(x, 3) for x in ratios], "resubmit": []}
    # The one request whose work retention adds to: a whole host update of a buffer a
    # region changed on a worker (the head's copy is written too, while the bytes travel).
    for size in (1 << 20, 16 << 20):
        on, off = [], []
        for r in range(a.rounds):
            pair = [(on, {}), (off, {"OMPCLUSTER_FT_RETAIN": "0"})]
            for out, extra in (pair if r % 2 == 0 else pair[::-1]):
                o = run(ob, ["resubmit", "40", str(size)], extra, work, np_=2)[2]
                out.append(float(o.split(" ms ")[1]))
        print(f"| (c) `target update to` of {size >> 20} MiB a region changed (offload_bench resubmit, 1 worker, median of 40), on / retain=0 | {med(on):.3f} / {med(off):.3f} ms: **{med(on) / med(off):.2f}** |")
        pc["resubmit"].append({"bytes": size, "on_ms": f(med(on), 3), "retain0_ms": f(med(off), 3), "ratio": f(med(on) / med(off), 2)})
    print(f"| (c) bytes the head keeps for recovery (retained_bytes) | {kept / 2**20:.1f} MiB |")
    print(f"| (c) head peak RSS, on / retain=0 | {rss_on / 2**20:.0f} MiB / {rss_off / 2**20:.0f} MiB |")
    pc.update(retained_mib=f(kept / 2**20, 1), head_peak_rss_mib_on=round(rss_on / 2**20), head_peak_rss_mib_retain0=round(rss_off / 2**20))
    if "d" in only:
        small = run(ob, ["empty", "100000"], {}, work)
        big = run(ob, ["empty", "2000000"], {}, work)
        rs, rb = small[1]["head_max_rss_bytes"], big[1]["head_max_rss_bytes"]
        print(f"| (d) head peak RSS after 100,000 / 2,000,000 empty regions | {rs / 2**20:.1f} / {rb / 2**20:.1f} MiB: **{rb / rs:.3f}** (tasks still recorded: {small[1]['tasks_recorded']} / {big[1]['tasks_recorded']}) |")
        parts["d"] = {"head_peak_rss_mib_100k": f(rs / 2**20, 1), "head_peak_rss_mib_2m": f(rb / 2**20, 1), "ratio": f(rb / rs, 3),
                      "tasks_recorded": [small[1]["tasks_recorded"], big[1]["tasks_recorded"]]}
    record()


if __name__ == "__main__":
    main()
