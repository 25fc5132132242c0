#!/usr/bin/env python3
"""Soak (issue 36, item 7): for a while (default an hour), in a loop, the examples and test
programs under `ompcluster-run -np 4` (now and then -np 5 with a spare,
OMPCLUSTER_FT_SPARES=1), each run with a random fault: none, a SIGKILL of a random worker at a
random moment, or a SIGSTOP/SIGCONT freeze of one longer than the failure detector's timeout.
Every ~0.5 s it samples the resident memory (RSS, from /proc) of the head (rank 0) and of each
worker. Each run is:

  right   exit 0 and exactly what the failure-free run printed (timings masked)
  wrong   exit 0 and something else printed
  failed  a non-zero exit (or a signal)
  hang    not ended within its bound (the job is then killed)

and after each run nothing may be left behind: no process of the job alive 3 s after the
launcher ended, no file in /dev/shm that names one of the job's processes or its Open MPI job,
nothing in the job's temporary directory (each run gets its own TMPDIR, which must be empty
again afterwards). A leftover is reported with the run.

    python3 bench/soak.py [--minutes 60] [--seed S] [--spare-share 0.25] [--fault-shares 0.3,0.45,0.25]
                          [--programs NAME,...] [--plugin PATH.so] [--keep-logs]

The seed is printed at the start; `--seed S` replays the same sequence of programs, faults,
victims and moments (the moments are relative to when the ranks appear, so the machine's
timing still differs). Results: bench/results/soak.json (the runs, the summary, the memory
samples thinned for the plot) and the plot docs/img/soak.svg (drawn by bench/plot.py with
Python's standard library; also docs/img/soak.png when matplotlib is importable);
BENCH_RESULTS_DIR and BENCH_IMG_DIR move them. Every sample is also in the run's work
directory (printed at the end), with the output of every run that was not right.

A worker lost while the job starts (MPI's start-up, the runtime's) ends the job, which is not
recovered from (docs: going on without it is not done); the soak runs with
OMPCLUSTER_START_TIMEOUT=15 so that such a run ends after 15-25 s (a "failed" run, marked
"start-up" in its line and record) instead of the default 60 s.

Needs `cargo build --release` and clang-16. Reuses bench/ft_campaign.py's helpers (finding a
job's ranks, killing its session, the failure detector settings, masking timings).
Exit status: 0 when every run was right and nothing was left behind, else 1.
"""
import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ft_campaign as ftc  # noqa: E402
import plot  # noqa: E402

ROOT = ftc.ROOT
LAUNCHER = ftc.LAUNCHER
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024
SAMPLE_EVERY = 0.5  # seconds between memory samples
GRACE = 3.0  # seconds the job's other processes get to be gone once the launcher ended
SOAK_ENV = {"OMPCLUSTER_START_TIMEOUT": "15"}


def programs():
    """(name, source, args): the two examples, and ft_campaign's programs (a few seconds each
    on 3 workers, each printing a result that depends on every region), plus two that map
    structs and make objects in device code."""
    progs = [("matmul", os.path.join(ROOT, "examples", "matmul", "matmul.c"), ["1024", "128"])]
    for src, args in ftc.PROGRAMS:
        path = os.path.normpath(os.path.join(ROOT, "tests", "programs", src))
        progs.append((os.path.basename(src).split(".")[0], path, list(args)))
    progs.append(("mapped_structs", os.path.join(ROOT, "tests", "programs", "mapped_structs.c"), []))
    return progs


def compile_program(src, out_dir):
    cc = "clang++-16" if src.endswith(".cpp") else "clang-16"
    exe = os.path.join(out_dir, os.path.basename(src).split(".")[0])
    subprocess.run([cc, "-O2", "-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu", "-I", os.path.join(ROOT, "tests", "programs"),
                    src, "-lm", "-o", exe], check=True)
    return os.path.realpath(exe)


def rss_kb(pid):
    """Resident memory of pid in KiB; None once it is gone or a zombie (which reads 0)."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            kb = int(f.read().split()[1]) * PAGE_KB
    except (OSError, ValueError, IndexError):
        return None
    return kb or None


def session_members(sid):
    """Live (not zombie) processes whose session is sid: (pid, comm)."""
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                s = f.read()
            comm, rest = s[s.index("(") + 1:s.rindex(")")], s[s.rindex(")") + 2:].split()
            if int(rest[3]) == sid and rest[0] not in ("Z", "X"):
                out.append((int(p), comm))
        except (OSError, ValueError, IndexError):
            pass
    return out


def files_under(d):
    found = []
    for base, dirs, files in os.walk(d):
        found += [os.path.join(base, x) for x in dirs + files]
    return sorted(found)


def shm_of_job(names, pids, jobids):
    """The /dev/shm entries among names that belong to the job: libomp's registrations
    (`__KMP_REGISTERED_LIB_<pid>_<uid>`) and anything else naming one of its pids, and Open
    MPI's shared-memory segments (`vader_segment.<host>.<n>.<job id in hex>.<rank>`)."""
    hexes = {f".{int(j):x}." for j in jobids if j.isdigit()}
    mine = []
    for n in names:
        parts = set(n.replace(".", "_").replace("-", "_").split("_"))
        if any(str(p) in parts for p in pids) or any(h in n for h in hexes):
            mine.append(n)
    return sorted(mine)


def run_once(exe, args, np_, env_extra, bound, fault, work, t_origin, samples, run_no):
    """One job. fault: None, or (kind, victim rank, seconds after the ranks appear, freeze
    seconds). Returns a dict: status (None on a hang), stdout, stderr, seconds, what the fault
    did, and what was left behind."""
    tmp = tempfile.mkdtemp(prefix=f"run-{run_no}-tmp-", dir=work)
    env = ftc.env_with(env_extra)
    env["TMPDIR"] = tmp
    shm_before = set(os.listdir("/dev/shm"))
    pids, jobids = set(), set()
    delivered = None
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.time()
        job = subprocess.Popen([LAUNCHER, "-np", str(np_), exe] + args, stdout=out, stderr=err, env=env, start_new_session=True)
        ranks, appeared, next_sample, hit_done, cont_at, frozen = {}, None, t0, fault is None, None, None
        status = None
        while True:
            status = job.poll()
            now = time.time()
            if status is not None or now - t0 > bound:
                break
            if len(ranks) < np_:
                ranks = dict(ftc.ranks_of(job.pid, exe))
                if len(ranks) == np_ and appeared is None:
                    appeared = now
                    for p in ranks.values():
                        j = ftc.environ_of(p, "OMPI_MCA_ess_base_jobid")
                        if j:
                            jobids.add(j)
            pids.update(ranks.values())
            if now >= next_sample:
                pids.update(p for p, _ in session_members(job.pid))
                sample = {"t": round(now - t_origin, 2), "run": run_no}
                for r, p in sorted(ranks.items()):
                    kb = rss_kb(p)
                    if kb is None:
                        continue
                    if r == 0:
                        sample["head"] = kb
                    else:
                        sample.setdefault("workers", {})[str(r)] = kb
                if "head" in sample or "workers" in sample:
                    samples.append(sample)
                next_sample = now + SAMPLE_EVERY
            if not hit_done and appeared is not None and now - appeared >= fault[2]:
                hit_done = True
                kind, victim = fault[0], fault[1]
                pid = ranks.get(victim)
                try:
                    if pid is None:
                        raise OSError("no such rank")
                    os.kill(pid, signal.SIGKILL if kind == "kill" else signal.SIGSTOP)
                    delivered = {"rank": victim, "pid": pid, "at": round(now - t0, 3)}
                    if kind == "freeze":
                        cont_at, frozen = now + fault[3], pid
                except OSError as e:
                    delivered = {"rank": victim, "error": str(e)}
            if cont_at is not None and now >= cont_at:
                try:
                    os.kill(frozen, signal.SIGCONT)
                except OSError:
                    pass
                cont_at = None
                delivered["continued"] = round(now - t0, 3)
            time.sleep(0.05)
        secs = time.time() - t0
        if frozen is not None and cont_at is not None:  # the job ended while it was frozen
            try:
                os.kill(frozen, signal.SIGCONT)
            except OSError:
                pass
            delivered["continued"] = round(time.time() - t0, 3)
        # Left behind: processes of the session GRACE seconds after the launcher ended.
        left_procs = []
        if status is not None:
            end = time.time()
            while True:
                left_procs = session_members(job.pid)
                if not left_procs or time.time() - end > GRACE:
                    break
                time.sleep(0.1)
        ftc.kill_session(job.pid)
        job.wait()
        out.seek(0)
        err.seek(0)
        o, e = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    left_shm = shm_of_job(set(os.listdir("/dev/shm")) - shm_before, pids, jobids)
    left_tmp = [os.path.relpath(p, tmp) for p in files_under(tmp)]
    if status is not None and not left_tmp:
        os.rmdir(tmp)
    left = {}
    if status is not None:  # (a hung job was killed: what it left says nothing)
        if left_procs:
            left["processes"] = [f"{p} ({c})" for p, c in left_procs]
        if left_shm:
            left["dev_shm"] = left_shm
        if left_tmp:
            left["tmpdir"] = left_tmp[:20]
    return {"status": status, "stdout": o, "stderr": e, "seconds": secs, "delivered": delivered, "left": left}


def outcome(res, ref_out):
    if res["status"] is None:
        return "hang"
    if res["status"] != 0:
        return "failed"
    return "right" if ftc.masked(res["stdout"]) == ftc.masked(ref_out) else "wrong"


def thin(samples, at_most):
    """Every k-th sample so that at most `at_most` remain (each run's peaks kept apart)."""
    k = max(1, -(-len(samples) // at_most))
    return samples[::k]


def draw_matplotlib(data, path):
    """The same plot as bench/plot.py's, with matplotlib, if it is importable."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (a, b) = plt.subplots(2, 1, figsize=(11, 7), sharex=True)
    s = data["samples"]
    a.plot([x["t"] / 60 for x in s if "head" in x], [x["head"] / 1024 for x in s if "head" in x], label="head (rank 0)")
    ws = [x for x in s if x.get("workers")]
    a.plot([x["t"] / 60 for x in ws], [max(x["workers"].values()) / 1024 for x in ws], label="largest worker")
    a.set_ylabel("RSS, MiB")
    a.legend()
    colors = {"right": "tab:green", "wrong": "tab:red", "failed": "tab:orange", "hang": "black"}
    marks = {"none": "o", "kill": "s", "freeze": "D"}
    for r in data["runs"]:
        b.scatter(r["start_s"] / 60, r["seconds"], c=colors[r["outcome"]], marker=marks[r["fault"]], s=18)
    b.set_xlabel("minutes since the start")
    b.set_ylabel("run time, s")
    fig.suptitle(f"Soak: {len(data['runs'])} runs, seed {data['seed']}")
    fig.savefig(path, dpi=100)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=None, help="replay a soak (printed at the start)")
    ap.add_argument("--spare-share", type=float, default=0.25, help="share of runs with -np 5 and a spare (OMPCLUSTER_FT_SPARES=1)")
    ap.add_argument("--fault-shares", default="0.3,0.45,0.25", help="shares of runs with no fault, a SIGKILL, a freeze")
    ap.add_argument("--programs", default="", help="comma-separated program names (default: all)")
    ap.add_argument("--plugin", default="", help="a build of the plugin to run (OMPCLUSTER_PLUGIN)")
    ap.add_argument("--keep-logs", action="store_true", help="keep the output of every run, not only of those that were not right")
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else int.from_bytes(os.urandom(4), "little")
    print(f"soak: seed {seed} (python3 bench/soak.py --seed {seed} replays it), {a.minutes:g} minutes", flush=True)
    rng = random.Random(seed)
    shares = [float(x) for x in a.fault_shares.split(",")]
    if len(shares) != 3 or any(x < 0 for x in shares) or sum(shares) <= 0:
        sys.exit("--fault-shares: three non-negative shares (none, kill, freeze)")
    if a.plugin:
        ftc.FT_ENV["OMPCLUSTER_PLUGIN"] = os.path.realpath(a.plugin)
    if not os.access(LAUNCHER, os.X_OK):
        sys.exit(f"{LAUNCHER} is not built: cargo build --release")
    timeout_s = int(ftc.FT_ENV["OMPCLUSTER_HB_TIMEOUT"]) / 1000
    progs = programs()
    if a.programs:
        wanted = a.programs.split(",")
        unknown = [w for w in wanted if w not in [p[0] for p in progs]]
        if unknown:
            sys.exit(f"unknown programs {unknown}; known: {[p[0] for p in progs]}")
        progs = [p for p in progs if p[0] in wanted]
    work = tempfile.mkdtemp(prefix="soak-")
    exes = {name: compile_program(src, work) for name, src, _ in progs}
    t_origin = time.time()
    budget = a.minutes * 60
    samples, runs, refs = [], [], {}
    started = plot.now()

    def one(name, args, np_, fault, reference=False):
        extra = dict(SOAK_ENV)
        if np_ == 5:
            extra["OMPCLUSTER_FT_SPARES"] = "1"
        ref = refs.get(name)
        bound = 60.0 if ref is None else max(60.0, 10 * ref[1])
        start = time.time() - t_origin
        res = run_once(exes[name], args, np_, extra, bound, fault, work, t_origin, samples, len(runs) + 1)
        if reference:
            if res["status"] != 0:
                sys.exit(f"soak: the failure-free run of {name} failed ({res['status']}):\n{res['stdout'][-2000:]}\n{res['stderr'][-3000:]}")
            refs[name] = (res["stdout"], res["seconds"])
        verdict = outcome(res, refs[name][0])
        kind = fault[0] if fault else "none"
        recovered = "recovered from the loss of rank" in res["stderr"]
        startup = verdict == "failed" and "the job did not start" in res["stderr"]
        rec = {"run": len(runs) + 1, "program": name, "np": np_, "spares": 1 if np_ == 5 else 0, "fault": kind,
               "delivered": res["delivered"], "recovered": recovered, "startup_failure": startup, "outcome": verdict, "status": res["status"],
               "start_s": round(start, 2), "seconds": round(res["seconds"], 3), "left_behind": res["left"]}
        if fault:
            rec["victim"], rec["after_s"] = fault[1], round(fault[2], 3)
            if kind == "freeze":
                rec["freeze_s"] = round(fault[3], 3)
        peaks = [x for x in samples if x["run"] == rec["run"]]
        rec["peak_head_kb"] = max((x["head"] for x in peaks if "head" in x), default=None)
        rec["peak_worker_kb"] = max((max(x["workers"].values()) for x in peaks if x.get("workers")), default=None)
        runs.append(rec)
        bad = verdict != "right" or res["left"]
        if bad or a.keep_logs:
            with open(os.path.join(work, f"run-{rec['run']}.out"), "w") as f:
                f.write(f"{json.dumps(rec)}\n--- stdout ---\n{res['stdout']}\n--- stderr ---\n{res['stderr']}")
        fault_s = "no fault" if not fault else (f"{kind} rank {fault[1]} at {fault[2]:.2f} s" + (f" for {fault[3]:.1f} s" if kind == "freeze" else ""))
        if fault and not (res["delivered"] or {}).get("pid"):
            fault_s += " (not delivered: the job had ended)"
        print(f"[{start / 60:6.2f} min] run {rec['run']:4d}: {name:15s} -np {np_} {fault_s:32s} {verdict:6s} {res['seconds']:6.1f} s"
              f"{', recovered' if recovered else ''}{' (start-up)' if startup else ''}{', LEFT BEHIND ' + json.dumps(res['left']) if res['left'] else ''}", flush=True)
        if bad:
            print(f"    output in {os.path.join(work, 'run-%d.out' % rec['run'])}", flush=True)

    for name, _, args in progs:
        one(name, args, 4, None, reference=True)
    while time.time() - t_origin < budget:
        name, _, args = progs[rng.randrange(len(progs))]
        np_ = 5 if rng.random() < a.spare_share else 4
        kind = rng.choices(["none", "kill", "freeze"], weights=shares)[0]
        victim = rng.randrange(1, np_)
        after = rng.uniform(0.05, max(0.1, refs[name][1] * 0.9))
        freeze = rng.uniform(1.5, 3.0) * timeout_s
        one(name, args, np_, None if kind == "none" else (kind, victim, after, freeze))

    summary = {}
    for r in runs:
        summary[r["outcome"]] = summary.get(r["outcome"], 0) + 1
    left = [r["run"] for r in runs if r["left_behind"]]
    at_startup = sum(1 for r in runs if r["startup_failure"])
    by_fault = {}
    for r in runs:
        t = by_fault.setdefault(r["fault"], {})
        t[r["outcome"]] = t.get(r["outcome"], 0) + 1
    heads = [r["peak_head_kb"] for r in runs if r["peak_head_kb"]]
    workers = [r["peak_worker_kb"] for r in runs if r["peak_worker_kb"]]
    print(f"\nsoak: {len(runs)} runs in {(time.time() - t_origin) / 60:.1f} min: "
          + ", ".join(f"{summary.get(k, 0)} {k}" for k in ("right", "wrong", "failed", "hang"))
          + f" ({at_startup} of the failed lost a worker at start-up)"
          + f"; {len(left)} left something behind{' (runs ' + str(left) + ')' if left else ''}")
    print("by fault: " + "; ".join(f"{k}: {v}" for k, v in by_fault.items()))
    if heads:
        print(f"peak RSS per run, MiB: head median {statistics.median(heads) / 1024:.0f}, max {max(heads) / 1024:.0f}; "
              f"largest worker median {statistics.median(workers) / 1024:.0f}, max {max(workers) / 1024:.0f}")
    with open(os.path.join(work, "samples.json"), "w") as f:
        json.dump({"seed": seed, "runs": runs, "samples": samples}, f)
    print(f"every sample and the output of the runs that were not right: {work}")
    data = {"seed": seed, "minutes": a.minutes, "spare_share": a.spare_share, "fault_shares": shares,
            "hb_timeout_s": timeout_s, "references_s": {k: round(v[1], 3) for k, v in refs.items()},
            "summary": {k: summary.get(k, 0) for k in ("right", "wrong", "failed", "hang")}, "left_behind_runs": left, "failed_at_startup": at_startup,
            "by_fault": by_fault, "runs": runs, "samples": thin(samples, 1500)}
    cmd = "python3 bench/soak.py" + "".join(" " + x for x in sys.argv[1:])
    plot.record("soak", "bench/soak.py", cmd, {"soak": data}, plots=[{"chart": "soak", "parts": ["soak"], "output": "soak.svg"}], date=started)
    png = os.path.join(plot.IMG, "soak.png")
    if draw_matplotlib(data, png):
        print(f"soak: wrote {png}", file=sys.stderr)
    ok = summary.get("right", 0) == len(runs) and not left
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
