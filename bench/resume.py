#!/usr/bin/env python3
"""Resuming a job whose head died (issue 26's benchmark), and what the log costs.

  python3 bench/resume.py [--rounds N] [--interval S] [--quick]

For each program (matmul and Cholesky, sized to run about 10 s on 3 workers, -np 4, their
host check skipped):
  fresh    a failure-free run with checkpoints every S seconds (and the log), and one without
           the log: time T, the faster of the two
  killed   the same, rank 0 SIGKILLed at 80% of T (after the checkpoints before it published)
  resumed  ompcluster-run --resume on what the killed job left: its time, against T
and the log's cost: the failure-free run with checkpoints, OMPCLUSTER_CP_LOG=1 against
OMPCLUSTER_CP_LOG=0, alternated. Times are whole jobs (ompcluster-run start to exit).
Each number is the median over the rounds. Writes bench/results/resume.json unless --quick.
"""
import argparse, json, os, shutil, signal, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = os.path.join(ROOT, "target/release/ompcluster-run")

CASES = [
    # name, source, args (about 10 s on 3 workers here), quick args
    ("matmul", "examples/matmul/matmul.c", ["4096", "256", "nocheck"], ["2048", "256", "nocheck"]),
    ("cholesky", "examples/cholesky/cholesky.c", ["5632", "256", "nocheck"], ["3072", "256", "nocheck"]),
]


def build(tmp):
    progs = {}
    for name, src, _, _ in CASES:
        out = os.path.join(tmp, name)
        subprocess.run(["clang-16", "-O2", "-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu", os.path.join(ROOT, src), "-o", out, "-lm"], check=True)
        progs[name] = out
    return progs


def env_for(ck, interval, log=True, report=None):
    env = dict(os.environ)
    env.update({"OMPCLUSTER_CP_ENABLE": "1", "OMPCLUSTER_CP_INTERVAL": str(interval), "OMPCLUSTER_CP_PERSISTENT": ck,
                "OMPCLUSTER_CP_LOG": "1" if log else "0"})
    if report:
        env["OMPCLUSTER_REPORT"] = report
    return env


def run(cmd, env, kill_after=None, prog=None):
    """Run a job; with kill_after, SIGKILL its rank 0 that many seconds after the start."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed = None
    if kill_after is not None:
        while time.monotonic() - t0 < kill_after and p.poll() is None:
            time.sleep(0.01)
        for pid in head_pids(prog):
            os.kill(pid, signal.SIGKILL)
            killed = time.monotonic() - t0
    out, err = p.communicate(timeout=600)
    return time.monotonic() - t0, p.returncode, out, err, killed


def head_pids(prog):
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{d}/exe") != prog:
                continue
            env = open(f"/proc/{d}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if b"OMPI_COMM_WORLD_RANK=0" in env:
            pids.append(int(d))
    return pids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--interval", type=float, default=0.5)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    results = {"interval_seconds": a.interval, "rounds": a.rounds, "cases": {}}
    with tempfile.TemporaryDirectory() as tmp:
        progs = build(tmp)
        for name, _, args, quick in CASES:
            args = quick if a.quick else args
            prog = progs[name]
            cmd = [RUN, "-np", "4", prog] + args
            rows = {"fresh": [], "nolog": [], "resumed": [], "ratio": [], "skipped": [], "killed_at": [], "first_ckpt_regions": []}
            for r in range(a.rounds):
                ck = os.path.join(tmp, f"ck-{name}")
                # The log's cost: with and without, alternating which goes first.
                order = [True, False] if r % 2 == 0 else [False, True]
                expected = None
                for log in order:
                    shutil.rmtree(ck, ignore_errors=True)
                    t, rc, out, err, _ = run(cmd, env_for(ck, a.interval, log))
                    if rc != 0:
                        sys.exit(f"{name}: failure-free run failed ({rc}):\n{err}")
                    rows["fresh" if log else "nolog"].append(t)
                    expected = out.splitlines()[-1].split(":")[0] if log else expected
                # The failure-free time: the faster of the two runs (this machine's noise
                # makes one run slower now and then; a kill must come before the end).
                fresh = min(rows["fresh"][-1], rows["nolog"][-1])
                # At 80% of the failure-free time (70% if a faster run ended before).
                for share in (0.8, 0.7):
                    shutil.rmtree(ck, ignore_errors=True)
                    _, rc, out, err, killed = run(cmd, env_for(ck, a.interval), kill_after=share * fresh, prog=prog)
                    if killed is not None and rc != 0:
                        break
                else:
                    sys.exit(f"{name}: the head was not killed before the end (rc {rc})")
                report = os.path.join(tmp, "report.json")
                t, rc, out, err, _ = run([RUN, "--resume", "-np", "4", prog] + args, env_for(ck, a.interval, report=report))
                if rc != 0 or not out.strip() or out.splitlines()[-1].split(":")[0] != expected:
                    sys.exit(f"{name}: the resumed job failed or printed another result ({rc}):\n{out}\n{err}")
                res = json.load(open(report))["resume"]
                rows["resumed"].append(t)
                rows["ratio"].append(t / fresh)
                rows["skipped"].append(res["regions_skipped"])
                rows["killed_at"].append(killed)
                rows["first_ckpt_regions"].append(res["first_job_regions"])
                print(f"{name} round {r + 1}: fresh {fresh:.2f} s (no log {rows['nolog'][-1]:.2f} s), head killed at {killed:.2f} s, "
                      f"resumed {t:.2f} s = {t / fresh:.2f}x, {res['regions_skipped']} regions skipped "
                      f"(checkpoint {res['checkpoint']} at {res['first_job_seconds']:.2f} s)", flush=True)
            med = {k: statistics.median(v) for k, v in rows.items()}
            log_cost = statistics.median([f / n for f, n in zip(rows["fresh"], rows["nolog"])])
            results["cases"][name] = {"args": args, "rows": rows, "median": med, "log_cost_ratio": log_cost}
            print(f"{name} {' '.join(args)}: resumed/fresh {med['ratio']:.2f} (median of {a.rounds}); "
                  f"with the log / without {log_cost:.3f}", flush=True)
    if not a.quick:
        os.makedirs(os.path.join(ROOT, "bench/results"), exist_ok=True)
        with open(os.path.join(ROOT, "bench/results/resume.json"), "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
