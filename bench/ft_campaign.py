#!/usr/bin/env python3
"""Random failure campaign: N trials, each a program of tests/programs run on 4 ranks with one
worker (a random rank, 1..3) killed (SIGKILL) or frozen (SIGSTOP, never resumed) from outside
by pid at a random moment of its run, timed from the end of the ranks' start-up (the progress
files `startup.rs` writes, as the tests do): a rank frozen inside MPI_Init cannot be left
behind, and ends the job after OMPCLUSTER_START_TIMEOUT with a message naming it
(README, "Start-up"), which is not what this campaign measures. A trial is right when it exits 0 and prints exactly what
the failure-free run printed, wrong when it prints something else or exits non-zero, a hang
when it has not ended after the bound. Prints one line per trial and a summary with the
recovery times the run reports give.

With --flips, a trial injects silent data corruption instead of a failure: one bit of what a
region run on a random worker writes, after a random number of regions
(`OMPCLUSTER_FT_INJECT=flip:rank=R:after_tasks=N`). Run it with replicas and voting
(`--env OMPCLUSTER_FT_REPLICAS=3 --env OMPCLUSTER_FT_VOTE=1`): a trial is then right when
the output is the failure-free one, stopped when the program ended with the runtime's "no
majority agrees" message and printed nothing wrong, wrong otherwise; the report says whether
the flip was detected (a disagreement: a lost vote) and corrected, or voided and named by no
one (a replica whose unexpected change hit a copy another region shared while it ran has its
ballot left out; its worker loses a vote later, once every kernel that used the copy ended and
nothing that may be a region's write landed in it, else the flip is caught, not named:
docs/recovery.md, "Replicas and voting").

    python3 bench/ft_campaign.py [--trials 100] [--seed 1] [--stop-share 0.2] [--bound 120]
                                 [--programs NAME,...] [--verbose] [--plugin PATH.so]
                                 [--env VAR=VALUE ...] [--flips] [--keep-slow X]

Needs `cargo build --release` (the launcher and the plugin) and clang-16. The summary, with
one line per program, goes to bench/results/ft_campaign.json (bench/plot.py).
"""
import argparse
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCHER = os.path.join(ROOT, "target", "release", "ompcluster-run")
PROGRAMS = [  # (source, args): a few seconds each on 3 workers
    ("../../examples/cholesky/cholesky.c", ["2048", "128"]),  # computes; prints its time
    ("ft_matmul.c", ["512", "128", "400000"]),
    ("ft_stencil.c", ["8", "4096", "24", "90000"]),
    ("ft_devptr.c", ["8", "4096", "20", "25000"]),
    ("ft_cxx.cpp", ["8", "4096", "20", "120000"]),
    ("ft_print.c", ["120", "25000"]),
    ("device_new.cpp", ["12", "16", "40000"]),  # objects made by device code
    ("ft_inplace.c", ["150000"]),  # small in-place updates of resident buffers (buddy copies)
]
FT_ENV = {"OMPCLUSTER_HB_PERIOD": "100", "OMPCLUSTER_HB_TIMEOUT": "1000"}
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plot  # noqa: E402


def compile_all(out_dir):
    exes = {}
    for src, _ in PROGRAMS:
        cc = "clang++-16" if src.endswith(".cpp") else "clang-16"
        exe = os.path.join(out_dir, os.path.basename(src).split(".")[0])
        subprocess.run([cc, "-O2", "-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu",
                        os.path.join(ROOT, "tests", "programs", src), "-lm", "-o", exe], check=True)
        exes[src] = exe
    return exes


def masked(out):
    """The output without timings (the examples print how long they took)."""
    return re.sub(r": [0-9.]+ s,", ": X s,", out)


def env_with(extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMPCLUSTER_")}
    env.update(FT_ENV)
    env.update(extra)
    return env


def ranks_of(job_pid, exe):
    """(rank, pid) of the job's processes running exe."""
    found = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{p}/exe") != exe:
                continue
            with open(f"/proc/{p}/stat") as f:
                sid = int(f.read().rsplit(")", 1)[1].split()[3])
            if sid != job_pid:
                continue
            rank = environ_of(p, "OMPI_COMM_WORLD_RANK")
            if rank is not None:
                found.append((int(rank), int(p)))
        except (OSError, ValueError):
            pass
    return sorted(found)


STARTED_STAGE = 8  # startup.rs: a rank's progress file reads "PID 8" once its start-up is done


def started(rank, pid):
    """Whether rank's progress file (beside the launcher's status file) says its start-up ended."""
    status = environ_of(pid, "OMPCLUSTER_EXIT_STATUS_FILE")
    try:
        with open(os.path.join(os.path.dirname(status), f"rank-{rank}")) as f:
            return f.read().split()[1] == str(STARTED_STAGE)
    except (OSError, TypeError, IndexError):
        return False


def environ_of(pid, name):
    """The value of name in process pid's environment, or None."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            for kv in f.read().split(b"\0"):
                if kv.startswith(name.encode() + b"="):
                    return kv.split(b"=", 1)[1].decode(errors="replace")
    except OSError:
        pass
    return None


def kill_session(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[3]) == pid:
                        os.kill(int(p), signal.SIGKILL)
            except (OSError, ValueError, IndexError):
                pass


def run(exe, args, extra_env, bound, hit=None):
    """Run the job; hit = (rank, sig, seconds after the ranks' start-up). Returns
    (status or None on hang, stdout, stderr, seconds)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.time()
        job = subprocess.Popen([LAUNCHER, "-np", "4", exe] + args, stdout=out, stderr=err,
                               env=env_with(extra_env), start_new_session=True)
        if hit:
            rank, sig, after = hit
            ranks = []
            while not (len(ranks) == 4 and all(started(r, p) for r, p in ranks)) \
                    and job.poll() is None and time.time() - t0 < 60:
                ranks = ranks_of(job.pid, os.path.realpath(exe))
                time.sleep(0.02)
            time.sleep(after)
            for r, p in ranks:
                if r == rank:
                    try:
                        os.kill(p, sig)
                    except OSError:
                        pass
        try:
            status = job.wait(timeout=bound)
        except subprocess.TimeoutExpired:
            status = None
        kill_session(job.pid)
        job.wait()
        out.seek(0)
        err.seek(0)
        return status, out.read().decode(errors="replace"), err.read().decode(errors="replace"), time.time() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--stop-share", type=float, default=0.2, help="share of trials that freeze instead of kill")
    ap.add_argument("--bound", type=float, default=120.0, help="seconds after which a trial is a hang")
    ap.add_argument("--programs", default="", help="comma-separated sources to run (default: all)")
    ap.add_argument("--verbose", action="store_true", help="run with OMPCLUSTER_VERBOSE=1 (its log is shown for a trial that fails)")
    ap.add_argument("--plugin", default="", help="a build of the plugin to run (OMPCLUSTER_PLUGIN; default: target/release's)")
    ap.add_argument("--env", action="append", default=[], help="VAR=VALUE set for every run, the failure-free ones included (e.g. OMPCLUSTER_FT_REPLICAS=2)")
    ap.add_argument("--flips", action="store_true", help="inject a bit flip per trial instead of a failure (see above)")
    ap.add_argument("--keep-slow", type=float, default=0.0, metavar="X",
                    help="keep the stderr and report of a right trial that took over X times its failure-free run (with --verbose, its log)")
    a = ap.parse_args()
    for kv in a.env:
        k, sep, v = kv.partition("=")
        if not sep or not k.startswith("OMPCLUSTER_"):
            sys.exit(f"--env {kv!r}: expected OMPCLUSTER_VAR=VALUE")
        FT_ENV[k] = v
    if a.plugin:
        FT_ENV["OMPCLUSTER_PLUGIN"] = os.path.realpath(a.plugin)
    global PROGRAMS
    if a.programs:
        wanted = a.programs.split(",")
        unknown = [w for w in wanted if w not in [os.path.basename(s) for s, _ in PROGRAMS]]
        if unknown:
            sys.exit(f"unknown programs {unknown}; known: {[os.path.basename(s) for s, _ in PROGRAMS]}")
        PROGRAMS = [(s, args) for s, args in PROGRAMS if os.path.basename(s) in wanted]
    rng = random.Random(a.seed)
    work = tempfile.mkdtemp(prefix="ft-campaign-")
    exes = compile_all(work)
    refs = {}
    for src, args in PROGRAMS:
        st, out, err, secs = run(exes[src], args, {}, a.bound)
        if st != 0:
            sys.exit(f"the failure-free run of {src} failed ({st}):\n{out}\n{err}")
        refs[src] = (out, secs)
        print(f"reference {os.path.basename(src)}: {secs:.1f} s", flush=True)
    right = wrong = hangs = stopped = detected = corrected = injected = voided = 0
    pauses, detections, reruns, slowdowns = [], [], [], []
    replicated_reruns = 0  # tasks of regions with replicas re-run, over all recoveries
    started = plot.now()
    per_program = {}  # program -> {"SIGKILL right": n, "SIGSTOP right": n, "wrong": n, "hangs": n}
    for i in range(a.trials):
        src, args = PROGRAMS[rng.randrange(len(PROGRAMS))]
        rank = rng.randrange(1, 4)
        sig = signal.SIGSTOP if rng.random() < a.stop_share else signal.SIGKILL
        ref_out, ref_secs = refs[src]
        after = rng.uniform(0.1, max(0.2, ref_secs - 1.0))
        rep = os.path.join(work, "report.json")
        if os.path.exists(rep):
            os.remove(rep)
        extra = {"OMPCLUSTER_REPORT": rep}
        if a.verbose:
            extra["OMPCLUSTER_VERBOSE"] = "1"
        hit = (rank, sig, after)
        if a.flips:
            # After a random share of the run's regions (a region per ~25 ms at least).
            extra["OMPCLUSTER_FT_INJECT"] = f"flip:rank={rank}:after_tasks={rng.randrange(1, 40)}"
            hit, sig = None, None
        st, out, err, secs = run(exes[src], args, extra, a.bound, hit)
        if st is None:
            verdict = "HANG"
            hangs += 1
        elif st == 0 and masked(out) == masked(ref_out):
            verdict = "right"
            right += 1
        elif a.flips and st != 0 and "no majority agrees" in err and masked(ref_out).startswith(masked(out)):
            verdict = "stopped"
            stopped += 1
        else:
            verdict = f"WRONG (exit {st})"
            wrong += 1
        info = ""
        try:
            with open(rep) as f:
                r = json.load(f)
            for rec in r.get("recoveries", []):
                pauses.append(rec["paused_seconds"])
                reruns.append(rec["tasks_reexecuted"])
                replicated_reruns += rec.get("replicated_reexecuted", 0)
            for fl in r.get("failures", []):
                detections.append(fl["at_seconds"])
            info = f"recoveries {len(r.get('recoveries', []))}, re-ran {r.get('tasks_reexecuted', 0)}"
            rep_r = r.get("replicas", {})
            if a.flips:
                seen = bool(rep_r.get("disagreements"))
                detected += seen
                corrected += seen and verdict == "right"
                fired = rep_r.get("flips_injected", 1) > 0
                injected += fired
                voids = rep_r.get("ballots_voided", 0)
                voided += bool(voids) and not seen
                info += f", flip {'injected' if fired else 'never fired (its rank ran no region after the trigger)'}, disagreements {len(rep_r.get('disagreements', []))}, corrections {rep_r.get('corrections', 0)}, tiebreaks {rep_r.get('tiebreaks', 0)}, ballots voided {voids}"
            if rep_r.get("regions_replicated"):
                info += f", replicated {rep_r['regions_replicated']}, copies kept {rep_r.get('copies_kept', 0)}, re-ran replicated {rep_r.get('reexecuted', 0)}"
        except (OSError, ValueError, KeyError):
            if a.flips and verdict == "stopped":
                detected += 1  # ended by the vote: no report is written
                injected += 1
        slowdowns.append(secs / ref_secs)
        name = "flip" if a.flips else "SIGSTOP" if sig == signal.SIGSTOP else "SIGKILL"
        tally = per_program.setdefault(os.path.basename(src), {"SIGKILL right": 0, "SIGSTOP right": 0, "flip right": 0, "stopped": 0, "wrong": 0, "hangs": 0})
        tally[f"{name} right" if verdict == "right" else "hangs" if verdict == "HANG" else "stopped" if verdict == "stopped" else "wrong"] += 1
        when = extra["OMPCLUSTER_FT_INJECT"].rsplit(":", 1)[1] if a.flips else f"at {after:5.2f} s"
        print(f"trial {i + 1:3d}: {os.path.basename(src):13s} {name} rank {rank} {when}: {verdict}, {secs:5.1f} s ({secs / ref_secs:.2f}x); {info}", flush=True)
        slow = a.keep_slow and verdict == "right" and secs / ref_secs > a.keep_slow
        if slow or verdict not in ("right", "stopped"):
            kept = os.path.join(work, f"trial-{i + 1}")
            with open(kept + ".stderr", "w") as f:
                f.write(err)
            if os.path.exists(rep):
                os.replace(rep, kept + ".report.json")
        if slow:
            print(f"    slow: its stderr and report kept in {kept}.*", flush=True)
        elif verdict not in ("right", "stopped"):
            log = kept + ".stderr"
            print(f"--- stdout ---\n{out[-2000:]}\n--- stderr (all of it in {log}) ---\n{err[-3000:]}", flush=True)

    def stats(v):
        return f"median {statistics.median(v):.3f}, max {max(v):.3f}" if v else "none"

    print(f"\n{a.trials} trials: {right} right, {wrong} wrong, {hangs} hangs" + (f", {stopped} stopped by the vote; flips injected {injected}, detected {detected}, corrected {corrected}, voided (not detected) {voided}" if a.flips else ""))
    print(f"recovery pause (s): {stats(pauses)}; tasks re-run per recovery: {stats(reruns)}; of regions with replicas, in all: {replicated_reruns}")
    print(f"run time against the failure-free run: {stats(slowdowns)}")
    mm = lambda v: {"median": float(f"{statistics.median(v):.3f}"), "max": float(f"{max(v):.3f}")} if v else None
    cmd = "python3 bench/ft_campaign.py" + "".join(" " + x for x in sys.argv[1:])
    # One part per kind of campaign: failures or flips, and the settings given.
    part = " ".join(["campaign"] + (["flips"] if a.flips else []) + a.env)
    plot.record("ft_campaign", "bench/ft_campaign.py", cmd, {part: {
        "trials": a.trials, "seed": a.seed, "stop_share": a.stop_share, "programs": len(PROGRAMS), "right": right, "wrong": wrong, "hangs": hangs,
        "env": a.env, "flips": a.flips, "stopped": stopped, "injected": injected, "detected": detected, "corrected": corrected, "voided": voided,
        "pause_s": mm(pauses), "tasks_rerun_per_recovery": mm(reruns), "replicated_reruns": replicated_reruns, "slowdown": mm(slowdowns), "per_program": per_program}}, date=started)
    return 0 if wrong == 0 and hangs == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
