#!/usr/bin/env python3
"""Recovery whose cost is bounded by recent work (issue 23): each comparison measured in the
same run, alternating rounds, medians.

  (a) the in-place pattern (tests/programs/ft_inplace.c: 64 buffers of 512 bytes kept on the
      device, one region per iteration updating one of them in place) at 100,000 and
      1,000,000 regions, -np 4, default settings: failure-free time with buddy copies
      against without; a worker (rank 2) killed at 90% against the failure-free run; the
      head's peak memory at 1,000,000 against 100,000 regions;
  (b) the same with buddy copies off: the re-run rate during the recovery against the rate
      the failure-free run executed regions at;
  (c) the matmul and Cholesky examples: failure-free cost of buddy copies (on against off),
      and the makespan with one worker killed a third of the way in, buddy copies on and off;
  (d) a spare against no spare: matmul, one worker killed a third of the way in, 3 workers
      plus one spare (-np 5, OMPCLUSTER_FT_SPARES=1) against 3 workers (-np 4).

Times of the in-place pattern are the regions' own (the program prints them on stderr),
those of the examples the product's or factorisation's own (start-up excluded).

    python3 bench/ft_bounded.py [--rounds 3] [--only a,b,c,d] [--lengths 100000,1000000]

Heartbeat: period 100 ms, timeout 1000 ms. Prints markdown tables; the parts measured go to
bench/results/ft_bounded.json (bench/plot.py).
"""
import argparse
import json
import os
import re
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ft_bench import ROOT, build, launch, med  # noqa: E402
import plot  # noqa: E402

OFF = {"OMPCLUSTER_FT_BUDDY_INTERVAL": "0"}


def run(exe, args, extra, work, np_=4):
    """One run: (seconds, report, stdout). Seconds: the program's own time."""
    p, secs, rep = launch(exe, args, extra, work, np_, timeout=1800)
    m = re.search(r"regions took ([0-9.]+) s", p.stderr)
    if m:
        secs = float(m.group(1))
    m = re.search(r"^(matmul|cholesky) .*?: ([0-9.]+) s,", p.stdout, re.M)
    if m:
        secs = float(m.group(2))
    if p.returncode != 0 or not ("PASS" in p.stdout or "result correct" in p.stdout):
        sys.exit(f"run failed ({p.returncode}): {exe} {args} {extra}\n{p.stdout}\n{p.stderr[-3000:]}")
    with open(rep) as f:
        return secs, json.load(f), p.stdout


def rec(rep):
    return rep["recoveries"][0] if rep["recoveries"] else None


def rng(v, digits):
    """Median, min and max of v, rounded as the tables print them."""
    r = lambda x: float(f"{x:.{digits}f}")
    return {"median_s": r(med(v)), "min_s": r(min(v)), "max_s": r(max(v))}


def bench_a_b(rounds, work, lengths, only, parts):
    exe = os.path.join(work, "ft_inplace")
    build(os.path.join(ROOT, "tests", "programs", "ft_inplace.c"), exe)
    rss = {}
    rate_rows = []
    a_rows = []
    if "a" in only:
        print(f"\n(a) tests/programs/ft_inplace.c (64 buffers of 512 bytes, one in-place region per iteration), -np 4, default settings; {rounds} alternating rounds, medians (range):")
        print("| regions | failure-free, buddy copies on | off | on / off | rank 2 killed at 90% (on) | killed / failure-free | tasks re-run (each run) | recovery pause | head peak RSS, failure-free on (off) | tasks recorded at the end (on) |")
        print("|---|---|---|---|---|---|---|---|---|---|")
    for n in lengths:
        args = [str(n)]
        kill = {"OMPCLUSTER_FT_INJECT": f"kill:rank=2:after_tasks={n * 9 // 10}"}
        on, off, killed, reruns, pauses, rss_on, rss_off, recorded = [], [], [], [], [], [], [], []
        off_killed, off_rates, free_rates = [], [], []
        for _ in range(rounds):
            if "a" in only:
                s, r, _ = run(exe, args, {}, work)
                on.append(s)
                rss_on.append(r["head_max_rss_bytes"])
                recorded.append(r["tasks_recorded"])
                s, r, _ = run(exe, args, OFF, work)
                off.append(s)
                rss_off.append(r["head_max_rss_bytes"])
                free_rates.append(n / s)
                s, r, _ = run(exe, args, kill, work)
                killed.append(s)
                x = rec(r)
                reruns.append(x["tasks_reexecuted"] if x else 0)
                pauses.append(x["paused_seconds"] if x else 0)
            if "b" in only:
                if "a" not in only:
                    s, _, _ = run(exe, args, OFF, work)
                    free_rates.append(n / s)
                s, r, _ = run(exe, args, dict(kill, **OFF), work)
                x = rec(r)
                off_killed.append((x["tasks_reexecuted"], x["paused_seconds"], x["rerun_rate_per_second"]))
                off_rates.append(x["rerun_rate_per_second"])
        if "a" in only:
            rss[n] = med(rss_on)
            print(
                f"| {n:,} | {med(on):.2f} s ({min(on):.2f}-{max(on):.2f}) | {med(off):.2f} s ({min(off):.2f}-{max(off):.2f}) | {med(on) / med(off):.3f} "
                f"| {med(killed):.2f} s ({min(killed):.2f}-{max(killed):.2f}) | {med(killed) / med(on):.3f} | {', '.join(str(x) for x in reruns)} "
                f"| {med(pauses):.3f} s | {med(rss_on) / 1e6:.0f} MB ({med(rss_off) / 1e6:.0f} MB) | {', '.join(str(x) for x in recorded)} |"
            )
            a_rows.append({"regions": n, "free_buddy_on": rng(on, 2), "free_buddy_off": rng(off, 2), "on_over_off": float(f"{med(on) / med(off):.3f}"),
                           "killed_at_90pct_on": rng(killed, 2), "killed_over_free": float(f"{med(killed) / med(on):.3f}"), "tasks_rerun": reruns,
                           "recovery_pause_s": float(f"{med(pauses):.3f}"), "head_peak_rss_mb_on": round(med(rss_on) / 1e6),
                           "head_peak_rss_mb_off": round(med(rss_off) / 1e6), "tasks_recorded_at_end_on": recorded})
        if "b" in only:
            rate_rows.append((n, off_killed, med(free_rates), med(off_rates)))
    if "a" in only:
        parts["a"] = {"rounds": rounds, "rows": a_rows}
    if "a" in only and len(lengths) > 1:
        lo, hi = min(lengths), max(lengths)
        print(f"\nHead peak memory, buddy copies on: {rss[hi] / 1e6:.0f} MB at {hi:,} regions against {rss[lo] / 1e6:.0f} MB at {lo:,}: {rss[hi] / rss[lo]:.2f}x")
        parts["a"]["head_memory_ratio_long_over_short"] = float(f"{rss[hi] / rss[lo]:.2f}")
    if "b" in only:
        print(f"\n(b) the same, buddy copies off (OMPCLUSTER_FT_BUDDY_INTERVAL=0), rank 2 killed at 90%; {rounds} rounds:")
        print("| regions | each run: tasks re-run, recovery pause, re-run rate | failure-free execution rate | re-run rate / execution rate |")
        print("|---|---|---|---|")
        for n, runs, free, rerun in rate_rows:
            each = "; ".join(f"{t:,} in {p:.2f} s, {r:,.0f}/s" for t, p, r in runs)
            print(f"| {n:,} | {each} | {free:,.0f}/s | {rerun / free:.2f} |")
        parts["b"] = {"rounds": rounds, "rows": [
            {"regions": n, "runs": [{"tasks_rerun": t, "pause_s": float(f"{p:.2f}"), "rerun_rate_per_s": round(r)} for t, p, r in runs],
             "free_rate_per_s": round(free), "rerun_over_free": float(f"{rerun / free:.2f}")} for n, runs, free, rerun in rate_rows]}


def bench_c(rounds, work, parts):
    mm = os.path.join(work, "matmul")
    build(os.path.join(ROOT, "examples", "matmul", "matmul.c"), mm)
    ch = os.path.join(work, "cholesky")
    build(os.path.join(ROOT, "examples", "cholesky", "cholesky.c"), ch, ["-lm"])
    cases = [("matmul 2048/256", mm, ["2048", "256"], 512), ("cholesky 2048/128", ch, ["2048", "128"], None)]
    print(f"\n(c) the examples on 3 workers (-np 4); {rounds} alternating rounds, medians (range) of the program's own time:")
    print("| program | failure-free, buddy on | off | on / off | rank 2 killed at 1/3, buddy on | off | on / off | tasks re-run on (off) |")
    print("|---|---|---|---|---|---|---|---|")
    rows = []
    for name, exe, args, tasks in cases:
        if tasks is None:
            _, r, _ = run(exe, args, {}, work)
            tasks = r["tasks_executed"]
        kill = {"OMPCLUSTER_FT_INJECT": f"kill:rank=2:after_tasks={tasks // 3}"}
        on, off, kon, koff, ron, roff = [], [], [], [], [], []
        for _ in range(rounds):
            on.append(run(exe, args, {}, work)[0])
            off.append(run(exe, args, OFF, work)[0])
            s, r, _ = run(exe, args, kill, work)
            kon.append(s)
            ron.append(rec(r)["tasks_reexecuted"] if rec(r) else 0)
            s, r, _ = run(exe, args, dict(kill, **OFF), work)
            koff.append(s)
            roff.append(rec(r)["tasks_reexecuted"] if rec(r) else 0)
        rg = lambda v: f"{med(v):.3f} s ({min(v):.3f}-{max(v):.3f})"
        print(f"| {name} | {rg(on)} | {rg(off)} | {med(on) / med(off):.3f} | {rg(kon)} | {rg(koff)} | {med(kon) / med(koff):.3f} | {med(ron):.0f} ({med(roff):.0f}) |")
        rows.append({"program": name, "free_on": rng(on, 3), "free_off": rng(off, 3), "free_on_over_off": float(f"{med(on) / med(off):.3f}"),
                     "killed_on": rng(kon, 3), "killed_off": rng(koff, 3), "killed_on_over_off": float(f"{med(kon) / med(koff):.3f}"),
                     "tasks_rerun_on": round(med(ron)), "tasks_rerun_off": round(med(roff))})
    parts["c"] = {"rounds": rounds, "rows": rows}


def bench_d(rounds, work, parts):
    mm = os.path.join(work, "matmul")
    if not os.path.exists(mm):
        build(os.path.join(ROOT, "examples", "matmul", "matmul.c"), mm)
    args = ["2048", "256"]
    kill = {"OMPCLUSTER_FT_INJECT": f"kill:rank=2:after_tasks={512 // 3}"}
    spare, none, used = [], [], []
    for _ in range(rounds):
        s, r, _ = run(mm, args, dict(kill, OMPCLUSTER_FT_SPARES="1"), work, np_=5)
        spare.append(s)
        used.append(json.dumps(rec(r)["spares"]))
        none.append(run(mm, args, kill, work, np_=4)[0])
    print(f"\n(d) matmul 2048/256, rank 2 killed after 170 of 512 tasks; {rounds} alternating rounds, medians (range):")
    print("| 3 workers + 1 spare (-np 5) | 3 workers, no spare (-np 4) | spare / no spare | spares used (first run) |")
    print("|---|---|---|---|")
    print(f"| {med(spare):.3f} s ({min(spare):.3f}-{max(spare):.3f}) | {med(none):.3f} s ({min(none):.3f}-{max(none):.3f}) | {med(spare) / med(none):.3f} | {used[0]} |")
    parts["d"] = {"rounds": rounds, "program": "matmul 2048/256", "spare": rng(spare, 3), "no_spare": rng(none, 3),
                  "spare_over_none": float(f"{med(spare) / med(none):.3f}"), "spares_used_first_run": json.loads(used[0])}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="a,b,c,d")
    ap.add_argument("--lengths", default="100000,1000000")
    a = ap.parse_args()
    only = set(a.only.split(","))
    lengths = [int(x) for x in a.lengths.split(",")]
    started = time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())
    print(f"# bench/ft_bounded.py --rounds {a.rounds} --only {a.only} --lengths {a.lengths}  ({started})")
    parts = {}
    with tempfile.TemporaryDirectory() as work:
        if only & {"a", "b"}:
            bench_a_b(a.rounds, work, lengths, only, parts)
        if "c" in only:
            bench_c(a.rounds, work, parts)
        if "d" in only:
            bench_d(a.rounds, work, parts)
    plot.record("ft_bounded", "bench/ft_bounded.py", f"python3 bench/ft_bounded.py --rounds {a.rounds} --only {a.only} --lengths {a.lengths}",
                parts, date=started)


if __name__ == "__main__":
    main()
