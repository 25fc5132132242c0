#!/usr/bin/env python3
"""Task Bench-style METG sweep (Slaughter et al., SC20) of OpenMP target tasks: bench/taskbench.c
under the stock x86_64 plugin and under ours (see BENCHMARKS.md, "Task Bench-style METG").

  python3 bench/taskbench.py [--quick] [--rounds N] [--patterns trivial,stencil_1d,fft]
                             [--width W] [--steps T] [--kmax K] [--max-task-ms MS]
                             [--ckpt-interval S] [--configs NAME,...]

Needs target/release/ompcluster-run (cargo build --release) and clang-16. Prints a markdown
report on stdout, one progress line per run on stderr; unless --quick, writes the numbers to
bench/results/taskbench.json and the plots to docs/img/taskbench-metg.svg (METG per
configuration) and docs/img/taskbench-efficiency.svg (efficiency against granularity), with
bench/plot.py.

Configurations (the same binary):
  stock        the stock x86_64 plugin, in process: the binary run directly with
               /usr/lib/llvm-16/lib in front of LD_LIBRARY_PATH (without it libomptarget 16
               finds no plugin and the program stops with exit 3: host fallback is never timed)
  ours-1w      ompcluster-run -np 2 (1 worker), fault tolerance on (the default: heartbeat)
  ours-2w      ompcluster-run -np 3 (2 workers), fault tolerance on
  ours-3w      ompcluster-run -np 4 (3 workers), fault tolerance on
  ours-3w-noft ompcluster-run -np 4, OMPCLUSTER_FT_DISABLE=1
  ours-3w-ckpt ompcluster-run -np 4, fault tolerance on and OMPCLUSTER_CP_INTERVAL=S
               (checkpoints every S seconds, each run in its own OMPCLUSTER_CP_PERSISTENT)

Method. K (kernel iterations per task) goes from KMAX (the largest power of two whose kernel
takes at most --max-task-ms on this host, from `taskbench calibrate`) down by factors of 4 to 1,
then K = 0 (empty tasks). Rounds alternate everything: in each round every configuration runs
at one K (the configuration order rotated from round to round) before the next K, so that the
machine's drift hits all of them alike; each number is the median over the rounds of the best
of the program's repetitions (1 repetition for runs of >= 1 s of work, 3 for >= 0.1 s, else 5).
  granularity  = wall time x cores / tasks, cores = 2 (the cores of this machine, the hardware
                 every configuration shares; the stock plugin runs the tasks in one process on
                 those 2 cores, ours runs them in 1-3 worker processes on the same 2 cores).
                 The alternative, cores = the number of processes that run tasks (workers;
                 2 for stock, whose helper threads use both cores), is printed alongside.
  rate         = total kernel iterations (W x T x K) / wall time
  efficiency   = rate / peak, peak = the highest rate measured for that pattern over all
                 configurations and sizes (Task Bench divides by the machine's peak; this is
                 the best this machine showed for the same kernel)
  METG(50%)    = as Task Bench's chart_metg.py: the smallest granularity among the sizes with
                 efficiency >= 50%; when the next smaller size has a smaller granularity (and
                 efficiency < 50%), linear interpolation of granularity against efficiency
                 between the two at 50%. The smallest measured point is printed too.
A failed run is never timed. A failed stock run (libomp 16 sometimes aborts with
`task_team != __null` under the stock plugin) is retried up to 3 times, except a validation
FAIL, which is reported (and makes the script exit 1). Ours is not retried: its failures are
listed. Every subprocess has a timeout.
"""
import argparse, json, math, os, re, shutil, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plot  # noqa: E402  (bench/plot.py: the result file and its plots)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = os.path.join(ROOT, "target", "release", "ompcluster-run")
SRC = os.path.join(ROOT, "bench", "taskbench.c")
CFLAGS = ["-O2", "-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu"]
LLVM_LIB = "/usr/lib/llvm-16/lib"
STOCK_RETRIES = 3
CORES = 2  # the granularity's "cores": this machine's (see the docstring)
TASK_TEAM_RE = re.compile(r"task_team != (__null|NULL|nullptr)")
LINE_RE = re.compile(r"^taskbench pattern=(\S+) width=(\d+) steps=(\d+) iters=(\d+) tasks=(\d+) reps=(\d+) "
                     r"seconds=([\d.]+) rep_seconds=(\S+) check=ok$", re.M)
PATTERNS = ("trivial", "stencil_1d", "fft")
# Variables this script sets per configuration: never inherited from the caller.
OWN_VARS = ("OMPCLUSTER_FT_DISABLE", "OMPCLUSTER_CP_ENABLE", "OMPCLUSTER_CP_INTERVAL", "OMPCLUSTER_CP_PERSISTENT",
            "OMPCLUSTER_CP_WSPEED", "OMPCLUSTER_CP_MTBF", "OMPCLUSTER_CP_DALY", "OMPCLUSTER_REPORT",
            "LIBOMP_USE_HIDDEN_HELPER_TASK", "OMPCLUSTER_PLUGIN")
# libomp 16 runs `target nowait` tasks on its hidden helper threads by default; with this set
# to 0 the team's own threads run them (see "Hidden helper threads" in BENCHMARKS.md).
NO_HELPERS = {"LIBOMP_USE_HIDDEN_HELPER_TASK": "0"}


def configs(ckpt_interval):
    """(name, label, ranks or None for stock, extra environment)."""
    return [
        ("stock", "stock x86_64 plugin (in process)", None, {}),
        ("ours-1w", "ours, 1 worker (-np 2), FT on", 2, {}),
        ("ours-2w", "ours, 2 workers (-np 3), FT on", 3, {}),
        ("ours-3w", "ours, 3 workers (-np 4), FT on (default: heartbeat)", 4, {}),
        ("ours-3w-noft", "ours, 3 workers, FT off (OMPCLUSTER_FT_DISABLE=1)", 4, {"OMPCLUSTER_FT_DISABLE": "1"}),
        ("ours-3w-ckpt", f"ours, 3 workers, FT on + checkpoints (OMPCLUSTER_CP_INTERVAL={ckpt_interval})", 4,
         {"OMPCLUSTER_CP_INTERVAL": str(ckpt_interval)}),
        ("stock-nohh", "stock x86_64 plugin, LIBOMP_USE_HIDDEN_HELPER_TASK=0", None, NO_HELPERS),
        ("ours-3w-nohh", "ours, 3 workers, FT on, LIBOMP_USE_HIDDEN_HELPER_TASK=0", 4, NO_HELPERS),
    ]


def before_configs(before):
    """`--before SO`: ours-3w and ours-3w-nohh with another build of the plugin (OMPCLUSTER_PLUGIN)."""
    return [
        ("before-3w", f"ours-3w with the plugin {before}", 4, {"OMPCLUSTER_PLUGIN": before}),
        ("before-3w-nohh", f"ours-3w-nohh with the plugin {before}", 4, {"OMPCLUSTER_PLUGIN": before, **NO_HELPERS}),
    ]


def base_env():
    e = {k: v for k, v in os.environ.items() if k not in OWN_VARS}
    return e


def stock_ld():
    old = os.environ.get("LD_LIBRARY_PATH")
    return LLVM_LIB + (":" + old if old else "")


def other_mpi_jobs():
    """Command lines of mpirun / ompcluster-run processes already running (not ours)."""
    found = []
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) == os.getpid():
            continue
        try:
            argv = open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        name = os.path.basename(argv[0].decode(errors="replace")) if argv and argv[0] else ""
        if name in ("mpirun", "mpiexec", "orterun", "prterun", "ompcluster-run"):
            found.append(f"{p}: {b' '.join(argv).decode(errors='replace').strip()[:120]}")
    return found


def run_once(cmd, env, timeout):
    """(rc or 'timeout', stdout, stderr, seconds)."""
    t0 = time.time()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
        rc, out, err = r.returncode, r.stdout, r.stderr
    except subprocess.TimeoutExpired as e:
        rc = "timeout"
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = f"timed out after {timeout:.0f} s"
    return rc, out, err, time.time() - t0


def describe(rc, out, err):
    if rc == "timeout":
        return err
    why = f"killed by signal {-rc}" if rc < 0 else f"exit {rc}"
    fail = [l for l in out.splitlines() if l.startswith("FAIL")]
    if fail:
        return f"{why}: {fail[0]}"
    if TASK_TEAM_RE.search(err + out):
        return f"{why}: libomp's task_team assertion"
    return f"{why}: {(err or out).strip()[-300:]}"


class Sweep:
    def __init__(self, args, binary, tmp):
        self.args, self.binary, self.tmp = args, binary, tmp
        self.results = {}  # (pattern, config, K) -> list of seconds (one per successful round)
        self.checkpoints = {}  # (pattern, config, K) -> list of checkpoint counts (ckpt config)
        self.failures = []  # (pattern, config, K, round, why)
        self.validation_failures = []
        self.stock_retried = {"task_team": 0, "other": 0}
        self.run_seconds = 0.0
        self.runs = 0

    def command(self, cfg, pattern, k, reps):
        name, _, ranks, _ = cfg
        prog = [self.binary, pattern, str(self.args.width), str(self.args.steps), str(k), str(reps)]
        return prog if ranks is None else [RUN, "-np", str(ranks)] + prog

    def run(self, cfg, pattern, k, reps, timeout, rnd):
        name, _, ranks, extra = cfg
        env = base_env()
        env.update(extra)
        report = None
        if name == "ours-3w-ckpt":
            ck = tempfile.mkdtemp(prefix="ckpt-", dir=self.tmp)
            report = os.path.join(ck, "report.json")
            env.update({"OMPCLUSTER_CP_PERSISTENT": os.path.join(ck, "persistent"), "OMPCLUSTER_REPORT": report})
        if ranks is None:
            env["LD_LIBRARY_PATH"] = stock_ld()
        cmd = self.command(cfg, pattern, k, reps)
        attempts = 1 + (STOCK_RETRIES if ranks is None else 0)
        key = (pattern, name, k)
        try:
            for attempt in range(attempts):
                rc, out, err, took = run_once(cmd, env, timeout)
                self.run_seconds += took
                self.runs += 1
                if rc == 3 and "no offloading device" in err:
                    sys.exit(f"taskbench: {' '.join(cmd)} found no offloading device"
                             f"{' (LD_LIBRARY_PATH=' + env['LD_LIBRARY_PATH'] + ')' if ranks is None else ''}:\n{err}")
                m = LINE_RE.search(out) if rc == 0 else None
                if m:
                    secs = float(m.group(7))
                    self.results.setdefault(key, []).append(secs)
                    if report:
                        try:
                            self.checkpoints.setdefault(key, []).append(json.load(open(report)).get("checkpoints", 0))
                        except (OSError, ValueError):
                            pass
                    print(f"taskbench: round {rnd} {pattern} K={k} {name}: {secs:.6f} s (run {took:.1f} s)",
                          file=sys.stderr, flush=True)
                    return
                why = describe(rc, out, err) if not (rc == 0) else f"exit 0 but no result line: {out.strip()[-300:]}"
                if "FAIL" in out:
                    self.validation_failures.append((pattern, name, k, rnd, why))
                    self.failures.append((pattern, name, k, rnd, why))
                    print(f"taskbench: VALIDATION FAILED: {' '.join(cmd)}: {why}", file=sys.stderr, flush=True)
                    return
                if attempt + 1 < attempts:
                    self.stock_retried["task_team" if TASK_TEAM_RE.search(err + out) else "other"] += 1
                    print(f"taskbench: stock run {' '.join(cmd)} failed ({why}); retrying", file=sys.stderr, flush=True)
                    continue
                self.failures.append((pattern, name, k, rnd, why))
                print(f"taskbench: FAILED (not timed): {' '.join(cmd)}: {why}", file=sys.stderr, flush=True)
        finally:
            if report:
                shutil.rmtree(os.path.dirname(report), ignore_errors=True)


def calibrate(binary, k):
    """ns per kernel iteration on the host (median of 3)."""
    vals = []
    for _ in range(3):
        rc, out, err, _ = run_once([binary, "calibrate", str(k)], base_env(), 120)
        m = re.search(r"ns_per_iter=([\d.]+)", out)
        if rc != 0 or not m:
            sys.exit(f"taskbench: calibration failed: {describe(rc, out, err)}")
        vals.append(float(m.group(1)))
    return statistics.median(vals)


def metg(points, threshold):
    """points: [(K, granularity_us, efficiency)] sorted by K, largest first. Returns
    (METG interpolated, smallest measured granularity with efficiency >= threshold, note)."""
    above = [(i, p) for i, p in enumerate(points) if p[2] >= threshold]
    if not above:
        return None, None, "no size reached the threshold"
    i, p = min(above, key=lambda x: x[1][1])
    note = ""
    value = p[1]
    if i + 1 < len(points) and points[i + 1][1] < p[1]:
        q = points[i + 1]  # q[2] < threshold <= p[2]: q has a smaller granularity than the minimum above
        value = q[1] + (threshold - q[2]) * (p[1] - q[1]) / (p[2] - q[2])
    elif i + 1 == len(points):
        note = "the smallest size measured is still above the threshold: METG is at most this"
    return value, p[1], note


def fmt(x, spec="{:.1f}"):
    return "-" if x is None else spec.format(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="3 sizes, 1 round, 20 steps (a smoke test)")
    ap.add_argument("--rounds", type=int, default=None, help="rounds (default 3; --quick: 1)")
    ap.add_argument("--patterns", default=",".join(PATTERNS))
    ap.add_argument("--width", type=int, default=8, help="points per step (default 8; a power of two for fft)")
    ap.add_argument("--steps", type=int, default=None, help="steps (default 100; --quick: 20)")
    ap.add_argument("--kmax", type=int, default=None, help="largest K (default: from --max-task-ms)")
    ap.add_argument("--max-task-ms", type=float, default=16.0, help="largest task's kernel time (default 16 ms)")
    ap.add_argument("--ckpt-interval", type=float, default=0.2, help="OMPCLUSTER_CP_INTERVAL of ours-3w-ckpt (s)")
    ap.add_argument("--configs", default=None, help="subset of configurations, comma-separated")
    ap.add_argument("--threshold", type=float, default=0.5, help="METG efficiency threshold (default 0.5)")
    ap.add_argument("--no-save", action="store_true", help="write nothing to bench/results and docs/img (an A/B)")
    ap.add_argument("--before", default=None, help="another build of the plugin (a .so): adds the configurations "
                    "before-3w and before-3w-nohh, ours-3w and ours-3w-nohh with it, for a side-by-side A/B")
    args = ap.parse_args()
    rounds = args.rounds or (1 if args.quick else 3)
    args.steps = args.steps or (20 if args.quick else 100)
    patterns = [p for p in args.patterns.split(",") if p]
    for p in patterns:
        if p not in PATTERNS:
            sys.exit(f"taskbench: unknown pattern {p} (trivial, stencil_1d, fft)")
    if "fft" in patterns and (args.width < 2 or args.width & (args.width - 1)):
        sys.exit("taskbench: fft needs --width a power of two >= 2")
    cfgs = configs(args.ckpt_interval)
    if args.before:
        if not os.path.isfile(args.before):
            sys.exit(f"taskbench: --before {args.before}: no such file")
        cfgs += before_configs(os.path.realpath(args.before))
    if args.configs:
        want = args.configs.split(",")
        unknown = set(want) - {c[0] for c in cfgs}
        if unknown:
            sys.exit(f"taskbench: unknown configuration(s) {sorted(unknown)}: {[c[0] for c in cfgs]}")
        cfgs = [c for c in cfgs if c[0] in want]
    if any(c[2] for c in cfgs) and not os.access(RUN, os.X_OK):
        sys.exit(f"taskbench: {RUN} not found: cargo build --release first")

    started = time.time()
    tmp = tempfile.mkdtemp(prefix="ompcluster-taskbench-")
    try:
        binary = os.path.join(tmp, "taskbench")
        r = subprocess.run(["clang-16", *CFLAGS, SRC, "-o", binary], capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            sys.exit(f"taskbench: build failed:\n{r.stdout}\n{r.stderr}")
        ns = calibrate(binary, 1 << 20)
        kmax = args.kmax or 1 << max(0, int(math.floor(math.log2(args.max_task_ms * 1e6 / ns))))
        if args.quick:
            sizes = sorted({kmax >> 2, 1 << 12, 0}, reverse=True)
        else:
            sizes, k = [], kmax
            while k >= 1:
                sizes.append(k)
                k >>= 2
            sizes.append(0)
        tasks = args.width * args.steps
        others = other_mpi_jobs()
        cmdline = "python3 bench/taskbench.py" + ("".join(" " + a for a in sys.argv[1:]))
        load_before = os.getloadavg()[0]
        sweep = Sweep(args, binary, tmp)
        for rnd in range(1, rounds + 1):
            for k in sizes:
                # Work of one repetition on 2 cores, from the host calibration.
                est = tasks * k * ns * 1e-9 / CORES
                reps = 1 if est >= 1 else 3 if est >= 0.1 else 5
                timeout = 120 + 20 * est * reps
                for pattern in patterns:
                    shift = (rnd - 1) % len(cfgs)
                    for cfg in cfgs[shift:] + cfgs[:shift]:
                        sweep.run(cfg, pattern, k, reps, timeout, rnd)

        # ---- The report ----
        print(f"# Task Bench-style METG, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))}, `{cmdline}`\n")
        print(f"Machine: {os.cpu_count()} cores; load average before {load_before:.2f}, after {os.getloadavg()[0]:.2f}. "
              f"Sweep took {time.time() - started:.0f} s ({sweep.runs} program runs, {sweep.run_seconds:.0f} s in them).\n")
        if others:
            print("**Warning: other MPI jobs were running when the sweep started:** " + "; ".join(others) + "\n")
        leftover = sorted(k for k in os.environ if k.startswith("OMPCLUSTER_") and k not in OWN_VARS)
        if leftover:
            print(f"OMPCLUSTER_* variables inherited by every run of ours: {', '.join(leftover)}\n")
        print(f"Width W={args.width}, steps T={args.steps}: {tasks} tasks per run; {rounds} round(s), each number "
              f"the median over the rounds of the best of the program's repetitions. Kernel: {ns:.3f} ns per "
              f"iteration on the host (`taskbench calibrate {1 << 20}`, median of 3), so K iterations take "
              f"about K x {ns:.3f} ns. Sizes K: {', '.join(str(k) for k in sizes)}.\n")
        print(f"Granularity = wall time x {CORES} cores / tasks (the {CORES} cores every configuration shares); "
              f"the alternative column uses cores = the processes running tasks (workers for ours, {CORES} for "
              f"the stock plugin). Efficiency = iteration rate / the highest rate measured for that pattern over "
              f"all configurations and sizes. METG({args.threshold:.0%}) as Task Bench's chart_metg.py: the smallest "
              f"granularity with efficiency >= {args.threshold:.0%}, linearly interpolated (granularity against "
              f"efficiency) with the next smaller size when that one is smaller; \"smallest measured\" is the point "
              f"itself. Configurations: " + "; ".join(f"`{c[0]}` = {c[1]}" for c in cfgs) + ".\n")

        results = {}  # bench/results/taskbench.json: the report's numbers, as printed
        for pattern in patterns:
            print(f"## {pattern}\n")
            med = {}
            for c in cfgs:
                for k in sizes:
                    v = sweep.results.get((pattern, c[0], k))
                    if v:
                        med[(c[0], k)] = statistics.median(v)
            rates = {key: tasks * key[1] / s for key, s in med.items() if s > 0 and key[1] > 0}
            if not rates:
                print("No successful run with K > 0: no efficiency.\n")
                continue
            peak_key = max(rates, key=rates.get)
            peak = rates[peak_key]
            res = results[pattern] = {"peak_rate": float(f"{peak:.3e}"), "peak_config": peak_key[0], "peak_k": peak_key[1],
                                      "metg_us": {}, "smallest_measured_us": {}, "points": {}}
            print(f"Peak: {peak:.3e} iterations/s ({peak_key[0]}, K={peak_key[1]}); the host kernel on {CORES} "
                  f"cores would do {CORES / ns * 1e9:.3e} (peak / that = {peak / (CORES / ns * 1e9):.2f}).\n")
            print(f"| configuration | METG({args.threshold:.0%}), us | smallest measured >= {args.threshold:.0%}, us "
                  f"| METG, cores = processes running tasks, us | note |")
            print("|---|---|---|---|---|")
            tables = []
            for name, label, ranks, _ in cfgs:
                alt_cores = (ranks - 1) if ranks else CORES
                pts, rows = [], []
                for k in sizes:
                    s = med.get((name, k))
                    runs = len(sweep.results.get((pattern, name, k), []))
                    failed = sum(1 for f in sweep.failures if f[:3] == (pattern, name, k))
                    if s is None:
                        rows.append(f"| {k} | {k * ns / 1e3:.3f} | failed ({failed}) | - | - | - | - |")
                        continue
                    g = s * CORES / tasks * 1e6
                    eff = (tasks * k / s) / peak if k > 0 else 0.0
                    pts.append((k, g, eff))
                    res["points"].setdefault(name, []).append({"k": k, "seconds": float(f"{s:.6f}"), "granularity_us": float(f"{g:.2f}"),
                                                               "efficiency": float(f"{eff:.3f}")})
                    extra = f"{runs}" + (f", {failed} failed" if failed else "")
                    ck = sweep.checkpoints.get((pattern, name, k))
                    if ck is not None:
                        extra += f"; checkpoints {statistics.median(ck):g}"
                    rows.append(f"| {k} | {k * ns / 1e3:.3f} | {s:.6f} | {g:.2f} | {g * alt_cores / CORES:.2f} "
                                f"| {eff:.3f} | {extra} |")
                value, smallest, note = metg(pts, args.threshold)
                res["metg_us"][name] = None if value is None else float(f"{value:.1f}")
                res["smallest_measured_us"][name] = None if smallest is None else float(f"{smallest:.1f}")
                alt = value * alt_cores / CORES if value is not None else None
                print(f"| {label} | {fmt(value)} | {fmt(smallest)} | {fmt(alt)} | {note} |")
                tables.append((label, rows))
            print()
            for label, rows in tables:
                print(f"### {pattern}: {label}\n")
                print(f"| K | kernel (host), us | seconds (median) | granularity, us | granularity, cores = "
                      f"processes, us | efficiency | runs{'; checkpoints per run' if 'checkpoints' in label else ''} |")
                print("|---|---|---|---|---|---|---|")
                print("\n".join(rows) + "\n")

        print("## Failures\n")
        print(f"Stock runs retried after libomp's task_team assertion: {sweep.stock_retried['task_team']}; "
              f"after another failure: {sweep.stock_retried['other']}. Runs that failed (not timed): "
              f"{len(sweep.failures)}; validation failures: {len(sweep.validation_failures)}.")
        for pattern, name, k, rnd, why in sweep.failures:
            print(f"- {pattern} K={k} {name} (round {rnd}): {why}")
        print()
        if sweep.validation_failures:
            sys.exit(1)
        if args.quick or args.no_save:
            print("taskbench: --quick or --no-save: nothing written to bench/results", file=sys.stderr)
            return
        common = {"width": args.width, "steps": args.steps, "rounds": rounds, "cores": CORES, "threshold": args.threshold,
                  "configs": {c[0]: c[1] for c in cfgs}}
        plot.record("taskbench", "bench/taskbench.py", cmdline, {
            "metg": dict(common, patterns={p: {"metg_us": r["metg_us"]} for p, r in results.items()}),
            "efficiency": dict(common, ns_per_iter=float(f"{ns:.3f}"), sizes=sizes, patterns=results,
                               failures=[{"pattern": f[0], "config": f[1], "k": f[2], "round": f[3], "why": f[4]} for f in sweep.failures]),
        }, [{"chart": "metg", "parts": ["metg"], "output": "taskbench-metg.svg"},
            {"chart": "efficiency", "parts": ["efficiency"], "output": "taskbench-efficiency.svg"}],
            date=time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
