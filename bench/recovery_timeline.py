#!/usr/bin/env python3
"""One run of the matmul example with a worker killed by injection, recorded with
OMPCLUSTER_TRACE and drawn by `ompcluster-trace plot` as docs/img/recovery-timeline.svg (a
picture of a recovery, not a measurement: one run, default settings).

    python3 bench/recovery_timeline.py [--n 1024] [--bs 256] [--np 4] [--rank 2] [--after TASKS]

Needs `cargo build --release` (ompcluster-run, ompcluster-trace) and clang-16. Writes
bench/results/recovery_timeline.json (the run's command, output line, failures and
recoveries from its report) and bench/results/recovery-timeline.trace.json (the trace, which
`python3 bench/plot.py` draws again). A few seconds on 2 cores.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plot  # noqa: E402

ROOT = plot.ROOT
RUN = os.path.join(ROOT, "target", "release", "ompcluster-run")
TOOL = os.path.join(ROOT, "target", "release", "ompcluster-trace")
TRACE = "recovery-timeline.trace.json"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--bs", type=int, default=256)
    ap.add_argument("--np", type=int, default=4, help="ranks (the head and np-1 workers)")
    ap.add_argument("--rank", type=int, default=2, help="the worker killed")
    ap.add_argument("--after", type=int, default=None, help="kill it once this many regions completed (default: a third)")
    a = ap.parse_args()
    for exe in (RUN, TOOL):
        if not os.access(exe, os.X_OK):
            sys.exit(f"recovery_timeline: {exe} not found: cargo build --release first")
    tasks = (a.n // a.bs) ** 3
    after = a.after if a.after is not None else tasks // 3
    with tempfile.TemporaryDirectory(prefix="recovery-timeline-") as tmp:
        mm = os.path.join(tmp, "matmul")
        subprocess.run(["clang-16", "-O2", "-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu",
                        os.path.join(ROOT, "examples", "matmul", "matmul.c"), "-lm", "-o", mm], check=True)
        trace, rep = os.path.join(tmp, "trace.json"), os.path.join(tmp, "report.json")
        inject = f"kill:rank={a.rank}:after_tasks={after}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("OMPCLUSTER_")}
        env.update(OMPCLUSTER_TRACE=trace, OMPCLUSTER_REPORT=rep, OMPCLUSTER_FT_INJECT=inject)
        args = [str(a.n), str(a.bs)]
        p = subprocess.run([RUN, "-np", str(a.np), mm] + args, env=env, capture_output=True, text=True, timeout=600)
        if p.returncode != 0 or "result correct" not in p.stdout:
            sys.exit(f"recovery_timeline: the run failed ({p.returncode}):\n{p.stdout}\n{p.stderr[-3000:]}")
        with open(rep) as f:
            r = json.load(f)
        os.makedirs(plot.RESULTS, exist_ok=True)
        shutil.copyfile(trace, os.path.join(plot.RESULTS, TRACE))
    summary = json.loads(subprocess.run([TOOL, "summary", os.path.join(plot.RESULTS, TRACE)], capture_output=True, text=True, check=True).stdout)
    data = {
        "program": f"examples/matmul/matmul.c {a.n} {a.bs}", "ranks": a.np, "inject": inject,
        "run_command": f"OMPCLUSTER_TRACE=... OMPCLUSTER_FT_INJECT={inject} ompcluster-run -np {a.np} matmul {' '.join(args)}",
        "output": p.stdout.strip().splitlines(),
        "wall_seconds": r.get("wall_seconds"), "tasks_executed": r.get("tasks_executed"),
        "failures": r.get("failures"), "recoveries": r.get("recoveries"), "buddy_copies": r.get("buddy_copies"),
        "trace": TRACE, "trace_summary": summary,
    }
    cmd = "python3 bench/recovery_timeline.py" + "".join(" " + x for x in sys.argv[1:])
    plot.record("recovery_timeline", "bench/recovery_timeline.py", cmd, {"run": data},
                [{"chart": "trace", "parts": ["run"], "output": "recovery-timeline.svg", "width": 1400}])
    print(json.dumps({k: data[k] for k in ("output", "wall_seconds", "failures", "recoveries")}, indent=1))


if __name__ == "__main__":
    main()
