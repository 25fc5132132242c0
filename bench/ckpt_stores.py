#!/usr/bin/env python3
"""The VeloC store against the embedded store (issue 11), same program, same run.

Runs the matmul example (N=3072 BS=256, 4 ranks = 3 workers, OMPCLUSTER_CP_INTERVAL=1 s by
default) with checkpoints through the embedded store, the VeloC store in sync mode and the
VeloC store in async mode, in alternating rounds, and reports for each store the median over
rounds of: checkpoints taken, the largest and mean pause (the time offloading stops), the
background save (scratch) time and the flush throughput (bytes saved / sum of flush times,
the flush running while the program computes), and the program's own time.

Needs the plugin built with the VeloC store (scripts/test-veloc.sh builds it in target/veloc):
    python3 bench/ckpt_stores.py [--rounds 3] [--n 3072] [--bs 256] [--interval 1]
        [--target target/veloc/release]

The table goes to bench/results/ckpt_stores.json too (bench/plot.py).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import plot  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", default="3072")
    ap.add_argument("--bs", default="256")
    ap.add_argument("--interval", default="1")
    ap.add_argument("--target", default=os.path.join(ROOT, "target/veloc/release"))
    a = ap.parse_args()
    run = os.path.join(a.target, "ompcluster-run")
    tmp = tempfile.mkdtemp(prefix="ckpt-stores-")
    mm = os.path.join(tmp, "matmul")
    subprocess.run(["clang-16", "-O2", "-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu",
                    os.path.join(ROOT, "examples/matmul/matmul.c"), "-lm", "-o", mm], check=True)
    stores = ["embedded", "veloc-sync", "veloc-async"]
    started = plot.now()
    res = {s: [] for s in stores}
    for rnd in range(a.rounds):
        for s in stores:
            d = tempfile.mkdtemp(dir=tmp)
            rep = os.path.join(d, "report.json")
            env = dict(os.environ, OMPCLUSTER_CP_INTERVAL=a.interval, OMPCLUSTER_REPORT=rep)
            if s == "embedded":
                env["OMPCLUSTER_CP_PERSISTENT"] = os.path.join(d, "p")
                env["OMPCLUSTER_CP_SCRATCH"] = "/dev/shm"
            else:
                cfg = os.path.join(d, "veloc.cfg")
                with open(cfg, "w") as f:
                    # scratch in memory, as the embedded store's default
                    f.write(f"scratch = /dev/shm/ckpt-stores-{os.getpid()}\npersistent = {d}/p\nmode = {s[6:]}\n")
                env["OMPCLUSTER_CP_USEVELOC"] = "1"
                env["OMPCLUSTER_CP_EXECCFG"] = cfg
            out = subprocess.run([run, "-np", "4", mm, a.n, a.bs], env=env, capture_output=True, text=True, timeout=900)
            if out.returncode != 0 or "result correct" not in out.stdout:
                raise SystemExit(f"{s}: run failed\n{out.stdout}\n{out.stderr}")
            r = json.load(open(rep))
            t = float(re.search(r": ([0-9.]+) s,", out.stdout).group(1))
            flush = sum(r["checkpoint_flush_seconds"])
            res[s].append({
                "ckpts": r["checkpoints"],
                "bytes": r["checkpoint_bytes"],
                "max_pause": max(r["checkpoint_pauses_seconds"] or [0]),
                "mean_pause": statistics.mean(r["checkpoint_pauses_seconds"] or [0]),
                "save": sum(r["checkpoint_save_seconds"]),
                "flush_bw": r["checkpoint_bytes"] / flush if flush else 0.0,
                "first_flush": (r["checkpoint_flush_seconds"] or [0])[0],
                "program": t,
            })
            print(f"round {rnd + 1} {s}: {res[s][-1]}", flush=True)
    med = lambda s, k: statistics.median(x[k] for x in res[s])
    print(f"\n#### Checkpoint stores, matmul N={a.n} BS={a.bs} on 3 workers, OMPCLUSTER_CP_INTERVAL={a.interval} s, median of {a.rounds} alternating rounds\n")
    print("| store | checkpoints | bytes saved | max pause | mean pause | background save | first (full) flush | flush throughput | vs embedded | program time |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    base = med("embedded", "flush_bw")
    rows = []
    for s in stores:
        print(f"| {s} | {med(s, 'ckpts'):.0f} | {med(s, 'bytes') / 1e6:.0f} MB | {med(s, 'max_pause') * 1e3:.1f} ms | {med(s, 'mean_pause') * 1e3:.1f} ms "
              f"| {med(s, 'save'):.3f} s | {med(s, 'first_flush'):.3f} s | {med(s, 'flush_bw') / 1e6:.0f} MB/s | {med(s, 'flush_bw') / base:.2f} | {med(s, 'program'):.2f} s |")
        g = lambda x, d: float(f"{x:.{d}f}")
        rows.append({"store": s, "checkpoints": round(med(s, "ckpts")), "bytes_mb": round(med(s, "bytes") / 1e6), "max_pause_ms": g(med(s, "max_pause") * 1e3, 1),
                     "mean_pause_ms": g(med(s, "mean_pause") * 1e3, 1), "save_s": g(med(s, "save"), 3), "first_flush_s": g(med(s, "first_flush"), 3),
                     "flush_mbps": round(med(s, "flush_bw") / 1e6), "vs_embedded": g(med(s, "flush_bw") / base, 2), "program_s": g(med(s, "program"), 2)})
    target = os.path.relpath(a.target, ROOT) if os.path.abspath(a.target).startswith(ROOT) else a.target
    plot.record("ckpt_stores", "bench/ckpt_stores.py",
                f"python3 bench/ckpt_stores.py --rounds {a.rounds} --n {a.n} --bs {a.bs} --interval {a.interval} --target {target}",
                {"stores": {"n": int(a.n), "bs": int(a.bs), "interval_s": float(a.interval), "rounds": a.rounds, "rows": rows}}, date=started)


if __name__ == "__main__":
    main()
