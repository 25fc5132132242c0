#!/usr/bin/env python3
"""Placement over recorded task graphs (issue 24; BENCHMARKS.md, "Placement over recorded
graphs"): the runtime's placement (`scheduler::Scheduler`, policy locality) replayed by
`ompcluster-placement-sim` on 3 to 64 simulated workers over task logs recorded with
`OMPCLUSTER_TASKS`, makespan against the critical-path bound.

  python3 bench/placement_sim.py [--record] [--workers 3,4,8,16,32,64]
                                 [--latency-us US] [--bandwidth-gbps G] [--quick]
  python3 bench/placement_sim.py --head-table [--head-us 20] [--busy 0.8] [--workers ...]

Needs target/release/ompcluster-placement-sim (cargo build --release; $CARGO_TARGET_DIR is
honoured). A graph missing from bench/results/graphs/ (or every one, with --record) is recorded
first: its program compiled with clang-16 and run once with `ompcluster-run -np 4` (3 workers)
and OMPCLUSTER_TASKS set, every other inherited OMPCLUSTER_* variable dropped; a log over 1 MB is
kept gzipped. What each recording ran, and when, goes to bench/results/graphs/recorded.json.

Costs of a move (latency + bytes / bandwidth), unless given: from bench/results/offload.json,
the runtime's own submit (BENCHMARKS.md, "Transfer bandwidth"): latency = the time of one 1 KiB
submit, bandwidth = the median of its bandwidths from 256 KiB up.

Prints a markdown report on stdout (the summary, one ratio per graph and worker count, and the
recorded run's own placement replayed under the same costs; then the details); unless --quick,
writes the numbers to bench/results/placement_sim.json.

--head-table (issue 34, the head's cost): simulation only, it never records (no MPI job): every
bench/results/graphs/*.jsonl[.gz] present is simulated (default 3 to 1024 workers) with the
head free and with --head-us of head time per region (`scheduler::Head`); makespan / bound, bound
= max(critical path, total kernel time / workers, tasks x head time per region). Then, for Task
Bench's trivial shape (100 independent tasks per worker), the shortest uniform task that keeps
the workers --busy busy under that head cost (`ompcluster-placement-sim --busy`: bisection
over the simulation, next to the closed form). Prints markdown; writes nothing.
"""
import argparse, glob, gzip, json, os, shutil, statistics, subprocess, sys, tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plot  # noqa: E402  (bench/plot.py: the result files)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
SIM = os.path.join(TARGET, "release", "ompcluster-placement-sim")
RUN = os.path.join(TARGET, "release", "ompcluster-run")
GRAPHS_DIR = os.path.join(ROOT, "bench", "results", "graphs")
CFLAGS = ["-O2", "-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu"]
RANKS = 4  # the recordings: head + 3 workers
TARGET_RATIO = 1.5
COMPRESS_OVER = 1 << 20

# (label, file stem, source, arguments, whether the 1.5x target applies)
GRAPHS = [
    ("matmul 1024/128", "matmul-1024-128", "examples/matmul/matmul.c", ["1024", "128"], True),
    ("Cholesky 2048/256", "cholesky-2048-256", "examples/cholesky/cholesky.c", ["2048", "256"], True),
    ("resident stencil 6 x 64 Ki doubles, 100 steps", "resident_stencil-6-65536-100", "tests/programs/resident_stencil.c", ["6", "65536", "100"], True),
    ("Task Bench stencil_1d 8 x 100, K = 2^18", "taskbench-stencil_1d-8-100-262144", "bench/taskbench.c", ["stencil_1d", "8", "100", "262144"], False),
    ("Task Bench fft 8 x 100, K = 2^18", "taskbench-fft-8-100-262144", "bench/taskbench.c", ["fft", "8", "100", "262144"], False),
    ("Task Bench trivial 8 x 100, K = 2^18", "taskbench-trivial-8-100-262144", "bench/taskbench.c", ["trivial", "8", "100", "262144"], False),
]


def log_path(stem):
    """The recorded log of `stem`, plain or gzipped, or None."""
    for ext in (".jsonl", ".jsonl.gz"):
        p = os.path.join(GRAPHS_DIR, stem + ext)
        if os.path.exists(p):
            return p
    return None


def record(label, stem, source, args, tmp):
    """Compile `source` and run it once under ompcluster-run with OMPCLUSTER_TASKS."""
    exe = os.path.join(tmp, os.path.basename(source)[:-2])
    if not os.path.exists(exe):
        subprocess.run(["clang-16", *CFLAGS, os.path.join(ROOT, source), "-lm", "-o", exe], check=True, timeout=300)
    out = os.path.join(GRAPHS_DIR, stem + ".jsonl")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMPCLUSTER_")}
    env["OMPCLUSTER_TASKS"] = out
    command = f"OMPCLUSTER_TASKS={os.path.relpath(out, ROOT)} ompcluster-run -np {RANKS} {os.path.basename(exe)} {' '.join(args)}"
    print(f"recording {label}: {command}", file=sys.stderr)
    r = subprocess.run([RUN, "-np", str(RANKS), exe, *args], env=env, cwd=tmp, capture_output=True, text=True, timeout=300)
    if r.returncode != 0 or not os.path.exists(out):
        sys.exit(f"placement_sim: recording {label} failed (exit {r.returncode}):\n{r.stdout}{r.stderr}")
    for stale in (out + ".gz",):
        if os.path.exists(stale):
            os.remove(stale)
    if os.path.getsize(out) > COMPRESS_OVER:
        with open(out, "rb") as f, gzip.open(out + ".gz", "wb") as g:
            shutil.copyfileobj(f, g)
        os.remove(out)
    return {"command": command, "output": r.stdout.strip(), "date": plot.now(), "commit": plot.commit(), "machine": plot.machine()}


def costs_from_offload():
    """(latency in us, bandwidth in GB/s, where from) from the runtime's measured submits."""
    with open(os.path.join(ROOT, "bench", "results", "offload.json")) as f:
        part = json.load(f)["parts"]["bandwidth"]
    rows = part["data"]["rows"]
    small = next(r for r in rows if r["bytes"] == 1024)
    latency_us = 1024 / (small["ours_submit_gbps"] * 1e9) * 1e6
    large = [r["ours_submit_gbps"] for r in rows if r["bytes"] >= 256 << 10]
    where = (f"bench/results/offload.json, the runtime's submit of {part['date']}: latency = one 1 KiB submit "
             f"({small['ours_submit_gbps']} GB/s), bandwidth = median of {len(large)} sizes from 256 KiB to "
             f"{max(r['bytes'] for r in rows) >> 20} MiB ({', '.join(str(x) for x in large)} GB/s)")
    return latency_us, statistics.median(large), where


def simulate(path, workers, latency_us, bandwidth_gbps, head_us=0.0):
    """One JSON object per worker count, from ompcluster-placement-sim (the head costing
    `head_us` per region)."""
    cmd = [SIM, "--json", f"--workers={','.join(map(str, workers))}", f"--recorded-workers={RANKS - 1}",
           f"--latency-us={latency_us}", f"--bandwidth-gbps={bandwidth_gbps}", f"--head-us-per-region={head_us}"]
    if path.endswith(".gz"):
        with gzip.open(path, "rb") as f:
            r = subprocess.run(cmd + ["-"], input=f.read(), capture_output=True, timeout=600)
    else:
        r = subprocess.run(cmd + [path], capture_output=True, timeout=600)
    if r.returncode != 0:
        sys.exit(f"placement_sim: {' '.join(cmd)} {path} failed: {r.stderr.decode()}")
    return [json.loads(line) for line in r.stdout.decode().splitlines() if line.strip()]


def head_table(workers, latency_us, bandwidth_gbps, where, head_us, busy, command):
    """The --head-table report: simulation only, over the graphs already recorded."""
    labels = {stem: label for label, stem, *_ in GRAPHS}
    paths = sorted(glob.glob(os.path.join(GRAPHS_DIR, "*.jsonl")) + glob.glob(os.path.join(GRAPHS_DIR, "*.jsonl.gz")))
    if not paths:
        sys.exit(f"placement_sim: no graph in {GRAPHS_DIR}: run without --head-table to record them")
    print(f"Command: `{command}`\n")
    print(f"Costs: a move of b bytes takes {latency_us:.2f} us + b / {bandwidth_gbps:.2f} GB/s ({where}). "
          f"The head (rank 0) handles one region at a time, in the order they became ready: free, or {head_us:g} us per "
          "region (nothing per byte, no cap on regions in flight).\n")
    print(f"Makespan / bound, head free / head {head_us:g} us per region; bound = max(critical path, total kernel time / "
          f"workers, tasks x head time per region). `h`: the head's term (tasks x {head_us:g} us) is the bound.\n")
    print("| graph | tasks | kernel time, ms | critical path, ms | " + " | ".join(f"{w} workers" for w in workers) + " |")
    print("|---|---|---|---|" + "---|" * len(workers))
    details = []
    for path in paths:
        stem = os.path.basename(path).split(".jsonl")[0]
        free = [r for r in simulate(path, workers, latency_us, bandwidth_gbps) if r["placement"] == "scheduler"]
        paid = [r for r in simulate(path, workers, latency_us, bandwidth_gbps, head_us) if r["placement"] == "scheduler"]
        label = labels.get(stem, stem)
        r0 = free[0]
        head_bound = lambda r: r["tasks"] * r["head_s_per_region"] >= max(r["critical_path_s"], r["total_kernel_s"] / r["workers"])
        print(f"| {label} | {r0['tasks']} | {r0['total_kernel_s'] * 1e3:.1f} | {r0['critical_path_s'] * 1e3:.1f} | "
              + " | ".join(f"{f['ratio']:.2f} / {p['ratio']:.2f}{' h' if head_bound(p) else ''}" for f, p in zip(free, paid)) + " |")
        details.append((label, free, paid))
    print(f"\nMakespan in ms, head free / head {head_us:g} us per region:\n")
    print("| graph | " + " | ".join(f"{w} workers" for w in workers) + " |")
    print("|---|" + "---|" * len(workers))
    for label, free, paid in details:
        print(f"| {label} | " + " | ".join(f"{f['makespan_s'] * 1e3:.2f} / {p['makespan_s'] * 1e3:.2f}" for f, p in zip(free, paid)) + " |")
    cmd = [SIM, "--json", f"--busy={busy}", "--steps=100", f"--workers={','.join(map(str, workers))}",
           f"--latency-us={latency_us}", f"--bandwidth-gbps={bandwidth_gbps}", f"--head-us-per-region={head_us}"]
    r = subprocess.run(cmd, capture_output=True, timeout=3600)
    if r.returncode != 0:
        sys.exit(f"placement_sim: {' '.join(cmd)} failed: {r.stderr.decode()}")
    rows = [json.loads(line) for line in r.stdout.decode().splitlines() if line.strip()]
    print(f"\nTask Bench trivial shape: 100 x P independent tasks of one uniform length on P workers, head {head_us:g} us "
          f"per region. Shortest length keeping the workers at least {busy:g} busy (kernel time / (P x makespan)): "
          "bisection over the simulation (to 0.1 %), next to the head model's closed form B P N c / (N - B P), "
          "N tasks, c per region (exact while the length is at most (P - 1) c: the makespan is then N c + length).\n")
    print("| workers | tasks | shortest task, simulated, us | closed form, us | busy at it | simulated / (P x head time per region) |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        t = row["task_s"]
        print(f"| {row['workers']} | {row['tasks']} | {t * 1e6:.1f} | {row['closed_form_s'] * 1e6:.1f} | "
              f"{row['busy_at_task_s']:.3f} | {t / (row['workers'] * row['head_s_per_region']):.3f} |" if t is not None and row['head_s_per_region'] > 0 else
              f"| {row['workers']} | {row['tasks']} | {t * 1e6:.3f} | {row['closed_form_s'] * 1e6:.1f} | {row['busy_at_task_s']:.3f} | - |" if t is not None else
              f"| {row['workers']} | {row['tasks']} | none up to 1000 s | {row['closed_form_s'] * 1e6:.1f} | - | - |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--record", action="store_true", help="record every graph again, not only missing ones")
    ap.add_argument("--workers", default="3,4,8,16,32,64", help="worker counts to simulate")
    ap.add_argument("--latency-us", type=float, help="latency of a move (default: from bench/results/offload.json)")
    ap.add_argument("--bandwidth-gbps", type=float, help="bandwidth of a move (default: from bench/results/offload.json)")
    ap.add_argument("--quick", action="store_true", help="do not write bench/results/placement_sim.json")
    ap.add_argument("--head-table", action="store_true",
                    help="simulation only (never records): ratios with the head free and at --head-us per region, "
                         "and the shortest trivial task keeping the workers --busy busy")
    ap.add_argument("--head-us", type=float, default=20.0, help="with --head-table: the head's time per region, us")
    ap.add_argument("--busy", type=float, default=0.8, help="with --head-table: the busy fraction for the trivial shape")
    a = ap.parse_args()
    if a.head_table and a.record:
        sys.exit("placement_sim: --head-table never records: drop --record")
    if a.head_table and a.workers == ap.get_default("workers"):
        a.workers = "3,8,16,32,64,128,256,512,1024"
    workers = [int(w) for w in a.workers.split(",")]
    if not os.path.exists(SIM):
        sys.exit(f"placement_sim: {SIM} is missing: cargo build --release first")
    latency_us, bandwidth_gbps, where = costs_from_offload()
    if a.latency_us is not None or a.bandwidth_gbps is not None:
        latency_us = a.latency_us if a.latency_us is not None else latency_us
        bandwidth_gbps = a.bandwidth_gbps if a.bandwidth_gbps is not None else bandwidth_gbps
        where = "given on the command line"
    if a.head_table:
        command = f"python3 bench/placement_sim.py --head-table --head-us {a.head_us:g} --busy {a.busy:g}"
        if a.workers != "3,8,16,32,64,128,256,512,1024":
            command += f" --workers {a.workers}"
        if where == "given on the command line":
            command += f" --latency-us {latency_us} --bandwidth-gbps {bandwidth_gbps}"
        head_table(workers, latency_us, bandwidth_gbps, where, a.head_us, a.busy, command)
        return

    os.makedirs(GRAPHS_DIR, exist_ok=True)
    manifest_path = os.path.join(GRAPHS_DIR, "recorded.json")
    manifest = {}
    if os.path.exists(manifest_path):
        with open(manifest_path) as f:
            manifest = json.load(f)
    todo = [g for g in GRAPHS if a.record or log_path(g[1]) is None]
    if todo:
        if not os.path.exists(RUN):
            sys.exit(f"placement_sim: {RUN} is missing: cargo build --release first")
        with tempfile.TemporaryDirectory(prefix="placement-sim-") as tmp:
            for label, stem, source, args, _ in todo:
                manifest[stem] = record(label, stem, source, args, tmp)
        with open(manifest_path, "w") as f:
            json.dump(manifest, f, indent=1, sort_keys=True)
            f.write("\n")

    results = []
    for label, stem, source, args, target in GRAPHS:
        path = log_path(stem)
        rows = simulate(path, workers, latency_us, bandwidth_gbps)
        recorded = [r for r in rows if r["placement"] == "recorded"]
        results.append({"graph": label, "log": os.path.relpath(path, ROOT), "target": target,
                        "rows": [r for r in rows if r["placement"] == "scheduler"], "recorded": recorded[0] if recorded else None})

    print(f"Costs: a move of b bytes takes {latency_us:.2f} us + b / {bandwidth_gbps:.2f} GB/s ({where}).\n")
    print("Makespan / bound, bound = max(critical path, total kernel time / workers); in parentheses, the same for greedy\n"
          "list scheduling with free moves (an idle worker starts the ready task recorded first: what the order allows).\n"
          f"Last column: the recorded run's own placement on its {RANKS - 1} workers, replayed under the same costs.\n")
    print("| graph | tasks | kernel time, ms | critical path, ms | " + " | ".join(f"{w} workers" for w in workers)
          + f" | within 1.5x | recorded placement, {RANKS - 1} workers (tasks per worker) |")
    print("|---|---|---|---|" + "---|" * len(workers) + "---|---|")
    met_all = True
    for res in results:
        rows = res["rows"]
        worst = max(r["ratio"] for r in rows)
        if res["target"]:
            met = worst <= TARGET_RATIO
            met_all &= met
            verdict = "yes" if met else f"NO (worst {worst:.2f})"
        else:
            verdict = f"(no target; worst {worst:.2f})"
        r0, rec = rows[0], res["recorded"]
        rec_cell = f"{rec['ratio']:.2f} ({'/'.join(map(str, rec['tasks_per_worker']))})" if rec else "(the head ran tasks)"
        print(f"| {res['graph']} | {r0['tasks']} | {r0['total_kernel_s'] * 1e3:.1f} | {r0['critical_path_s'] * 1e3:.1f} | "
              + " | ".join(f"{r['ratio']:.2f} ({r['list_makespan_s'] / r['bound_s']:.2f})" for r in rows) + f" | {verdict} | {rec_cell} |")
    print(f"\nTarget (examples and stencil within {TARGET_RATIO}x of the bound from 3 to 64 workers): {'met' if met_all else 'NOT met'}.\n")
    print("| graph | workers | makespan, ms | bound, ms | ratio | list, moves free, ms | moves | MB moved | workers used | tasks per worker, min-max |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for res in results:
        for r in res["rows"]:
            used = [n for n in r["tasks_per_worker"] if n > 0]
            print(f"| {res['graph']} | {r['workers']} | {r['makespan_s'] * 1e3:.2f} | {r['bound_s'] * 1e3:.2f} | {r['ratio']:.2f} | "
                  f"{r['list_makespan_s'] * 1e3:.2f} | {r['moves']} | {r['bytes_moved'] / 1e6:.1f} | {len(used)} | {min(used)}-{max(used)} |")
    if not a.quick:
        command = "python3 bench/placement_sim.py" + (f" --workers {a.workers}" if a.workers != "3,4,8,16,32,64" else "")
        if where == "given on the command line":
            command += f" --latency-us {latency_us} --bandwidth-gbps {bandwidth_gbps}"
        plot.record("placement_sim", "bench/placement_sim.py", command,
                    {"table": {"latency_us": latency_us, "bandwidth_gbps": bandwidth_gbps, "costs_from": where,
                               "target_ratio": TARGET_RATIO, "target_met": met_all, "graphs": results,
                               "recorded": {g[1]: manifest.get(g[1]) for g in GRAPHS}}})


if __name__ == "__main__":
    main()
