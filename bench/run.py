#!/usr/bin/env python3
"""Benchmarks of the cluster device, each measured side by side in one run (see BENCHMARKS.md).

  python3 bench/run.py [--quick]

Needs `cargo build --release` first (bench/run.sh does it). Prints a markdown report, and
(not with --quick) writes the numbers to bench/results/offload.json and the bandwidth plot to
docs/img/bandwidth.svg (bench/plot.py).

The stock x86_64 plugin side runs the same binary with /usr/lib/llvm-16/lib put in front of
LD_LIBRARY_PATH: on Debian 12 libomptarget 16 finds its stock plugins only there; without it
omp_get_num_devices() is 0 and every target region runs on the host (host fallback), which is
not the stock plugin. The benchmark programs stop (exit 3) when they see no device. A stock
run that fails (libomp 16 sometimes aborts a blocked matmul with many nowait regions:
`Assertion failure at kmp_tasking.cpp(4136): task_team != __null`) is retried up to
STOCK_RETRIES times; the retries are counted in the report, and a run that fails every time is
reported as failed, never timed.
"""
import os, re, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plot  # noqa: E402  (bench/plot.py: the result file and its plots)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = os.path.join(ROOT, "target", "release", "ompcluster-run")
QUICK = "--quick" in sys.argv
MPIRUN = ["mpirun"] + (["--allow-run-as-root"] if os.geteuid() == 0 else []) + [
    "--oversubscribe", "--bind-to", "none", "--mca", "pml", "ob1", "--mca", "btl", "self,vader,tcp"]
CFLAGS = ["-O2", "-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu"]
LLVM_LIB = "/usr/lib/llvm-16/lib"
STOCK_RETRIES = 3
# libomp 16's own assertion, seen under the stock plugin (not ours) on blocked matmuls.
TASK_TEAM_RE = re.compile(r"task_team != (__null|NULL|nullptr)")
# Stock runs retried, by cause, and the runs that failed every attempt (command, last error).
stock_retried = {"task_team": 0, "other": 0}
stock_failed = []


def stock_env():
    """What makes libomptarget 16 load the stock x86_64 plugin on Debian 12: /usr/lib/llvm-16/lib
    in front of LD_LIBRARY_PATH (an existing LD_LIBRARY_PATH is kept after it)."""
    old = os.environ.get("LD_LIBRARY_PATH")
    return {"LD_LIBRARY_PATH": LLVM_LIB + (":" + old if old else "")}


def sh(cmd, env=None, timeout=900):
    e = dict(os.environ)
    e.update(env or {})
    r = subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=timeout)
    if r.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r.stdout


def run_stock(cmd, timeout=900):
    """Run cmd under the stock x86_64 plugin. A failed run (non-zero exit, killed, timed out) is
    retried up to STOCK_RETRIES times and counted in stock_retried. Returns (stdout, seconds of
    the run that succeeded), or (None, None) when every attempt failed (recorded in
    stock_failed: such a run is reported, never timed). A program that finds no device is a
    set-up error: the report stops there."""
    e = dict(os.environ)
    e.update(stock_env())
    why = ""
    for attempt in range(1 + STOCK_RETRIES):
        t0 = time.time()
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=timeout)
        except subprocess.TimeoutExpired:
            rc, out, err = "timeout", "", f"timed out after {timeout} s"
        else:
            rc, out, err = r.returncode, r.stdout, r.stderr
        took = time.time() - t0
        if rc == 0:
            return out, took
        if "no offloading device" in err:
            sys.exit(f"bench: {' '.join(cmd)} with LD_LIBRARY_PATH={e['LD_LIBRARY_PATH']} found no "
                     f"offloading device: the stock x86_64 plugin did not load.\n{err}")
        tt = bool(TASK_TEAM_RE.search(err + out))
        why = (f"killed by signal {-rc}" if isinstance(rc, int) and rc < 0 else f"exit {rc}") + (": libomp's task_team assertion" if tt else f": {(err or out).strip()[-300:]}")
        if attempt < STOCK_RETRIES:
            stock_retried["task_team" if tt else "other"] += 1
            print(f"bench: stock run {' '.join(cmd)} failed ({why}); retrying", file=sys.stderr, flush=True)
    stock_failed.append((" ".join(cmd), why))
    return None, None


def devices_line(ob):
    """What each side offloads to: offload_bench devices under the stock plugin and under ours."""
    stock, _ = run_stock([ob, "devices"])
    ours = sh([RUN, "-np", "2", ob, "devices"])
    return (f"Devices (`offload_bench devices`: omp_get_num_devices(), and whether a target region ran on the host): "
            f"stock x86_64 plugin (LD_LIBRARY_PATH={stock_env()['LD_LIBRARY_PATH']}): {(stock or 'FAILED').strip()}; "
            f"ours (1 worker): {ours.strip()}")


def median_or_none(v):
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else None


def fmt(x, spec, unit=""):
    return "failed" if x is None else f"{x:{spec}}{unit}"


def build(tmp):
    b = lambda *a: sh(list(a))
    ob, pp, mm = (os.path.join(tmp, x) for x in ("offload_bench", "mpi_pingpong", "matmul"))
    b("clang-16", *CFLAGS, os.path.join(ROOT, "bench", "offload_bench.c"), "-o", ob)
    b("mpicc", "-O2", os.path.join(ROOT, "bench", "mpi_pingpong.c"), "-o", pp)
    b("clang-16", *CFLAGS, os.path.join(ROOT, "examples", "matmul", "matmul.c"), "-lm", "-o", mm)
    return ob, pp, mm


def parse_bw(out):
    return {int(m[0]): (float(m[1]), float(m[2]))
            for m in re.findall(r"^bw (\d+) submit_GBps ([\d.]+) retrieve_GBps ([\d.]+)", out, re.M)}


def rank_pid(rank, name):
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            cmd = open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")[0]
            if not cmd.endswith(name.encode()):
                continue
            env = open(f"/proc/{p}/environ", "rb").read().split(b"\0")
            if f"OMPI_COMM_WORLD_RANK={rank}".encode() in env:
                return int(p)
        except OSError:
            pass
    return None


def rss_bytes(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def probe_rss(cmd, marker_re, probes):
    """Run cmd; at each stdout line matching marker_re read the worker's (rank 1) RSS."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    seen = []
    for line in p.stdout:
        m = re.match(marker_re, line)
        if m:
            time.sleep(0.5)
            pid = rank_pid(1, "offload_bench")
            seen.append((int(m.group(1)), rss_bytes(pid) if pid else 0))
    p.wait(timeout=300)
    return seen


def cpu_seconds(pid):
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def during_compute(cmd, env, name, action):
    """Start cmd; once its rank 1 computes (busy >= 50% of a core for 0.2 s), run action();
    then wait for cmd. Returns action's result."""
    e = dict(os.environ)
    e.update(env)
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, env=e)
    result = None
    try:
        deadline = time.time() + 300
        while time.time() < deadline and p.poll() is None:
            pid = rank_pid(1, name)
            a = cpu_seconds(pid) if pid else None
            time.sleep(0.2)
            b = cpu_seconds(pid) if pid else None
            if a is not None and b is not None and b - a >= 0.1:
                result = action()
                break
    finally:
        p.wait(timeout=600)
    return result


def r2(x, digits):
    """x as the report prints it (None stays None), for the result file."""
    return None if x is None else float(f"{x:.{digits}f}")


def main():
    tmp = tempfile.mkdtemp(prefix="ompcluster-bench-")
    ob, pp, mm = build(tmp)
    started = plot.now()
    parts = {}  # what bench/results/offload.json gets: the report's numbers, as printed
    print(f"# Benchmark run {started}, `python3 bench/run.py{' --quick' if QUICK else ''}`\n")
    print(f"Machine: {os.cpu_count()} cores; load average before: {os.getloadavg()[0]:.2f}\n")
    print(f"Stock x86_64 plugin: the same binary with LD_LIBRARY_PATH={stock_env()['LD_LIBRARY_PATH']} "
          f"(without it libomptarget 16 finds no plugin and runs every region on the host); "
          f"a failed stock run is retried up to {STOCK_RETRIES} times.\n")
    print(devices_line(ob) + "\n")

    # 1. Empty region vs stock plugin and raw MPI round trip (1 worker: nothing oversubscribed).
    #    Rounds alternate the three programs so that drift on a shared machine hits them alike;
    #    each number is the median over the rounds.
    reps = "2000" if QUICK else "50000"
    rounds = 2 if QUICK else 7
    rtts, rtts_rt, stocks, ours_es = [], [], [], []
    live = "1000" if QUICK else "10000"
    stocks_live, ours_live = [], []
    for _ in range(rounds):
        rtts.append(float(re.search(r"rtt_us ([\d.]+)", sh(MPIRUN + ["-np", "2", pp, "2000"])).group(1)))
        rtts_rt.append(float(re.search(r"rtt_runtime_us ([\d.]+)", sh(
            MPIRUN + ["-x", "MPI_PINGPONG_AS_RUNTIME", "-np", "2", pp, "2000"],
            env={"MPI_PINGPONG_AS_RUNTIME": "1"})).group(1)))
        out, _ = run_stock([ob, "empty", reps])
        stocks.append(float(re.search(r"empty_us ([\d.]+)", out).group(1)) if out else None)
        ours_es.append(float(re.search(r"empty_us ([\d.]+)", sh([RUN, "-np", "2", ob, "empty", reps])).group(1)))
        out, _ = run_stock([ob, "empty", reps, live])
        stocks_live.append(float(re.search(r"empty_us ([\d.]+)", out).group(1)) if out else None)
        ours_live.append(float(re.search(r"empty_us ([\d.]+)", sh([RUN, "-np", "2", ob, "empty", reps, live])).group(1)))
    rtt, rtt_rt = statistics.median(rtts), statistics.median(rtts_rt)
    stock_e, ours_e = median_or_none(stocks), statistics.median(ours_es)
    print(f"## Empty target region (1 worker), median of {rounds} alternating rounds\n")
    print("Target (issue 9, item 1): ours <= the stock plugin's time + 2 x the MPI round trip as the "
          "runtime must wait (MPI_THREAD_MULTIPLE, polling: `mpi_pingpong` with MPI_PINGPONG_AS_RUNTIME=1). "
          "The plain blocking round trip is shown too.\n")
    print("| stock x86_64 plugin | ours | MPI round trip as the runtime waits | target: stock + 2 x that | met | blocking MPI round trip |")
    print("|---|---|---|---|---|---|")
    if stock_e is None:
        print(f"| failed | {ours_e:.2f} us | {rtt_rt:.2f} us | - | - | {rtt:.2f} us |\n")
    else:
        bound = stock_e + 2 * rtt_rt
        print(f"| {stock_e:.2f} us | {ours_e:.2f} us | {rtt_rt:.2f} us | {bound:.2f} us | {'yes' if ours_e <= bound else 'NO'} | {rtt:.2f} us |\n")
    parts["empty_region"] = {
        "rounds": rounds, "reps": int(reps), "stock_us": r2(stock_e, 2), "ours_us": r2(ours_e, 2), "rtt_runtime_us": r2(rtt_rt, 2),
        "target_us": r2(stock_e + 2 * rtt_rt, 2) if stock_e is not None else None,
        "met": (ours_e <= stock_e + 2 * rtt_rt) if stock_e is not None else None, "rtt_blocking_us": r2(rtt, 2),
        "per_round_stock_ours_us": [[r2(a, 2), r2(b, 2)] for a, b in zip(stocks, ours_es)],
        "live_buffers": int(live), "live_stock_us": r2(median_or_none(stocks_live), 2), "live_ours_us": r2(statistics.median(ours_live), 2),
        "live_per_round_ours_us": [r2(b, 2) for b in ours_live]}
    print("Per round (stock / ours, us): " + ", ".join(f"{fmt(a, '.2f')} / {b:.2f}" for a, b in zip(stocks, ours_es)) + "\n")
    print(f"With {live} other buffers mapped (the per-region cost must not grow with them): "
          f"stock {fmt(median_or_none(stocks_live), '.2f', ' us')}, ours {statistics.median(ours_live):.2f} us "
          f"(per round, ours: {', '.join(f'{b:.2f}' for b in ours_live)})\n")

    # 2. Bandwidth vs raw MPI shaped the same way, alternating rounds; the ratio is the median
    #    of the per-round ratios. For the small sizes the stock plugin's update is timed too: it
    #    moves no bytes between processes (a memcpy), so it is what libomptarget itself costs
    #    per update, which any plugin pays on top of the transfer.
    sizes = [1 << 10, 16 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20]
    small = [s for s in sizes if s <= 16 << 10]
    breps = "5" if QUICK else "20"
    sreps = "200" if QUICK else "2000"
    raw_r, ours_r, stock_r = [], [], []
    for _ in range(rounds):
        raw_r.append(parse_bw(sh(MPIRUN + ["-np", "2", pp, breps] + [str(s) for s in sizes])))
        ours_r.append(parse_bw(sh([RUN, "-np", "2", ob, "bw", breps] + [str(s) for s in sizes])))
        out, _ = run_stock([ob, "bw", sreps] + [str(s) for s in small])
        stock_r.append(parse_bw(out) if out else {})
    print(f"## Transfer bandwidth, GB/s (1 worker; `target update to/from` of a resident buffer that a region changed on the worker right before (so both go to or come from the worker) vs raw MPI send + 8-byte answer), median of {rounds} alternating rounds\n")
    print("| size | raw MPI submit | ours submit | ratio | raw MPI retrieve | ours retrieve | ratio | target |")
    print("|---|---|---|---|---|---|---|---|")
    bw_rows = []
    for s in sizes:
        # Rounds where both sides reported this size (a line that did not parse is reported).
        pairs = [(o, r) for o, r in zip(ours_r, raw_r) if s in o and s in r]
        if len(pairs) < len(raw_r):
            print(f"bench: {len(raw_r) - len(pairs)} round(s) without a {s}-byte result: {[sorted(o) for o in ours_r]} {[sorted(r) for r in raw_r]}", file=sys.stderr)
        if not pairs:
            print(f"| {s >> 10} KiB | failed | failed | - | failed | failed | - | - |")
            continue
        med = lambda side, i: statistics.median(p[side][s][i] for p in pairs)
        ratio = lambda i: statistics.median(o[s][i] / r[s][i] for o, r in pairs)
        rs_, rr_ = ratio(0), ratio(1)
        goal = 0.5 if s in small else 0.9
        met = f">= {goal}: " + ("yes" if min(rs_, rr_) >= goal else "NO")
        print(f"| {s >> 10} KiB | {med(1, 0):.3f} | {med(0, 0):.3f} | {rs_:.2f} | {med(1, 1):.3f} | {med(0, 1):.3f} | {rr_:.2f} | {met} |")
        bw_rows.append({"bytes": s, "raw_submit_gbps": r2(med(1, 0), 3), "ours_submit_gbps": r2(med(0, 0), 3), "submit_ratio": r2(rs_, 2),
                        "raw_retrieve_gbps": r2(med(1, 1), 3), "ours_retrieve_gbps": r2(med(0, 1), 3), "retrieve_ratio": r2(rr_, 2),
                        "target": goal, "met": min(rs_, rr_) >= goal})
    parts["bandwidth"] = {"rounds": rounds, "rows": bw_rows}
    print()
    # What libomptarget alone costs per update, and the best ratio a plugin can reach with it.
    print("Small updates under the stock x86_64 plugin (no transfer between processes: libomptarget's own "
          f"cost per update, plus a memcpy), microseconds, and the highest ratio to raw MPI that any plugin moving the bytes "
          f"during the update can reach, raw / (stock update + raw), median of {rounds} rounds "
          f"(`offload_bench bw {sreps}` under the stock plugin; raw MPI as above):\n")
    print("| size | stock update to | raw MPI submit | bound on the submit ratio | stock update from | raw MPI retrieve | bound on the retrieve ratio |")
    print("|---|---|---|---|---|---|---|")
    small_rows = []
    for s in small:
        rows = [(st[s], r[s]) for st, r in zip(stock_r, raw_r) if s in st and s in r]
        if not rows:
            print(f"| {s >> 10} KiB | failed | - | - | failed | - | - |")
            continue
        us = lambda gbps: s / gbps / 1e3
        cells = []
        for i in (0, 1):
            st_us = statistics.median(us(a[i]) for a, _ in rows)
            raw_us = statistics.median(us(b[i]) for _, b in rows)
            bound = statistics.median(us(b[i]) / (us(a[i]) + us(b[i])) for a, b in rows)
            cells += [f"{st_us:.3f}", f"{raw_us:.3f}", f"{bound:.2f}"]
        print(f"| {s >> 10} KiB | " + " | ".join(cells) + " |")
        c = [float(x) for x in cells]
        small_rows.append({"bytes": s, "stock_to_us": c[0], "raw_submit_us": c[1], "submit_bound": c[2],
                           "stock_from_us": c[3], "raw_retrieve_us": c[4], "retrieve_bound": c[5]})
    parts["small_updates"] = {"rounds": rounds, "rows": small_rows}
    print()

    # 3. Matmul: stock plugin vs 1, 2, 3 workers, same binary.
    n, bs = ("512", "128") if QUICK else ("1024", "256")
    runs = 1 if QUICK else 3
    def t_of(out):
        return float(re.search(r": ([\d.]+) s, max error", out).group(1))
    def med(cmd, stock=False):
        ts = []
        for _ in range(runs):
            if stock:
                out, took = run_stock(cmd)
                if out is None:
                    continue  # failed every attempt: counted in stock_failed, not timed
            else:
                t0 = time.time()
                out = sh(cmd)
                took = time.time() - t0
            assert "result correct" in out, out
            ts.append((t_of(out), took))
        if not ts:
            return None
        return statistics.median(x for x, _ in ts), statistics.median(y for _, y in ts), len(ts)
    failed_before = len(stock_failed)
    stock_m = med([mm, n, bs], stock=True)
    print(f"## Matmul N={n} BS={bs} ({(int(n) // int(bs)) ** 3} tasks), median of {runs}\n")
    print("| runtime | compute phase | ratio to stock | whole run (incl. start-up and check) |")
    print("|---|---|---|---|")
    mm_rows = []
    if stock_m is None:
        print(f"| stock x86_64 plugin | failed in all {runs} runs | - | - |")
        mm_rows.append({"runtime": "stock x86_64 plugin", "workers": None, "compute_s": None, "ratio_to_stock": None, "whole_s": None})
    else:
        lost = len(stock_failed) - failed_before
        note = f" (median of {stock_m[2]}: {lost} run(s) failed every attempt)" if lost else ""
        print(f"| stock x86_64 plugin | {stock_m[0]:.3f} s{note} | 1.00 | {stock_m[1]:.2f} s |")
        mm_rows.append({"runtime": "stock x86_64 plugin", "workers": None, "compute_s": r2(stock_m[0], 3), "ratio_to_stock": 1.0, "whole_s": r2(stock_m[1], 2)})
    for w in (1, 2, 3):
        m = med([RUN, "-np", str(w + 1), mm, n, bs])
        ratio = f"{m[0] / stock_m[0]:.2f}" if stock_m else "-"
        print(f"| ours, {w} worker{'s' if w > 1 else ''} | {m[0]:.3f} s | {ratio} | {m[1]:.2f} s |")
        mm_rows.append({"runtime": f"ours, {w} worker{'s' if w > 1 else ''}", "workers": w, "compute_s": r2(m[0], 3),
                        "ratio_to_stock": float(ratio) if stock_m else None, "whole_s": r2(m[1], 2)})
    parts["matmul"] = {"n": int(n), "bs": int(bs), "tasks": (int(n) // int(bs)) ** 3, "runs": runs, "rows": mm_rows}
    print()

    # 3b. Matmul with tiny blocks (issue 9, item 2): thousands of short regions, 3 workers
    #     against the stock plugin, alternating runs.
    tn, tbs = ("512", "32") if QUICK else ("1024", "32")
    stock_t, ours_t = [], []
    for _ in range(runs):
        out, _ = run_stock([mm, tn, tbs])
        if out is not None:
            assert "result correct" in out, out
            stock_t.append(t_of(out))
        out = sh([RUN, "-np", "4", mm, tn, tbs])
        assert "result correct" in out, out
        ours_t.append(t_of(out))
    st, ou = median_or_none(stock_t), statistics.median(ours_t)
    print(f"## Matmul with tiny blocks, N={tn} BS={tbs} ({(int(tn) // int(tbs)) ** 3} regions), 3 workers, median of {runs} alternating runs\n")
    print("| stock x86_64 plugin | ours, 3 workers | ratio | target (issue 9, item 2) |")
    print("|---|---|---|---|")
    print(f"| {fmt(st, '.3f', ' s')} | {ou:.3f} s | {fmt(ou / st if st else None, '.2f')} | <= 2: {'yes' if st and ou / st <= 2 else 'NO'} |\n")
    parts["matmul_tiny"] = {"n": int(tn), "bs": int(tbs), "regions": (int(tn) // int(tbs)) ** 3, "workers": 3, "runs": runs,
                            "stock_s": r2(st, 3), "ours_s": r2(ou, 3), "ratio": r2(ou / st, 2) if st else None, "target": 2,
                            "met": bool(st and ou / st <= 2)}

    # 4. Memory: resident memory of a worker holding 1 GiB; growth over alloc/delete cycles.
    held = 1024
    mem = probe_rss([RUN, "-np", "2", ob, "memory", str(held)], r"HOLDING (\d+)", 1)
    cycles = "2000" if QUICK else "10000"
    churn = probe_rss([RUN, "-np", "2", ob, "churn", cycles, "64"], r"CHURN (\d+)", 2)
    print("## Worker memory\n")
    if mem:
        h, rss = mem[0]
        print(f"- holding {h >> 20} MiB: worker RSS {rss / 2**20:.1f} MiB ({(rss - h) / h * 100:+.1f}% over the bytes held)")
    memory = {}
    if mem:
        memory.update(held_mib=h >> 20, worker_rss_mib=r2(rss / 2**20, 1), over_held_pct=r2((rss - h) / h * 100, 1))
    if len(churn) == 2:
        (c1, m1), (c2, m2) = churn
        print(f"- alloc/touch/free of 64 KiB: RSS after {c1} cycles {m1 / 2**20:.1f} MiB, after {c2} cycles {m2 / 2**20:.1f} MiB (growth {(m2 - m1) / 2**20:+.2f} MiB)")
        memory.update(churn_kib=64, churn=[{"cycles": c1, "rss_mib": r2(m1 / 2**20, 1)}, {"cycles": c2, "rss_mib": r2(m2 / 2**20, 1)}],
                      churn_growth_mib=r2((m2 - m1) / 2**20, 2))
    parts["worker_memory"] = memory
    # 5. Checkpoints of the matmul demo: pause per checkpoint against the interval, and flush
    #    throughput against a plain sequential write of the same number of bytes to the same
    #    directory, right after each run (twice; the faster one is the yardstick). The virtual
    #    disk here varies a lot from second to second, so this is repeated and the median
    #    round is reported.
    import json, shutil
    cn, cbs, interval = ("1536", "256", "0.5") if QUICK else ("3072", "256", "1")
    ck_rounds = 1 if QUICK else 3
    ck = tempfile.mkdtemp(prefix="ompcluster-bench-ckpt-", dir=os.getcwd())
    def plain_write(nbytes):
        path = os.path.join(ck, "plain-write.bin")
        chunk = os.urandom(1 << 20)
        t0 = time.time()
        with open(path, "wb") as f:
            for _ in range(max(1, nbytes >> 20)):
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        took = time.time() - t0
        os.remove(path)
        return max(1, nbytes >> 20) * (1 << 20) / took
    results = []
    for i in range(ck_rounds):
        rep = os.path.join(tmp, f"ckpt-report-{i}.json")
        sh([RUN, "-np", "4", mm, cn, cbs], env={"OMPCLUSTER_CP_INTERVAL": interval,
           "OMPCLUSTER_CP_PERSISTENT": os.path.join(ck, f"ckpt-{i}"), "OMPCLUSTER_REPORT": rep})
        r = json.load(open(rep))
        cbytes = r["checkpoint_bytes"]
        plain_bw = max(plain_write(cbytes), plain_write(cbytes))
        # The flush runs while the program computes on every core; the same plain write
        # while the same program computes (no checkpoints) is the like-for-like yardstick.
        loaded_bw = during_compute([RUN, "-np", "4", mm, cn, cbs], {}, "matmul", lambda: plain_write(cbytes)) or float("nan")
        flush_bw = cbytes / sum(r["checkpoint_flush_seconds"]) if r["checkpoint_flush_seconds"] else 0.0
        results.append((flush_bw / plain_bw, r, flush_bw, plain_bw, loaded_bw))
        shutil.rmtree(os.path.join(ck, f"ckpt-{i}"), ignore_errors=True)
    shutil.rmtree(ck, ignore_errors=True)
    print(f"\n## Checkpoints of matmul N={cn} BS={cbs} on 3 workers, OMPCLUSTER_CP_INTERVAL={interval} s, {ck_rounds} run(s)\n")
    print("| run | checkpoints | bytes saved | max pause | mean pause | max pause / interval (target <= 5%) | background save, total | flush throughput | plain write, idle machine | ratio (target >= 0.8) | plain write while matmul computes | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for i, (ratio, r, flush_bw, plain_bw, loaded_bw) in enumerate(results):
        pauses, saves = r["checkpoint_pauses_seconds"], r["checkpoint_save_seconds"]
        if not pauses:
            # A run shorter than the interval takes no checkpoint (likely with --quick).
            print(f"| {i + 1} | 0 | - | - | - | - | - | - | {plain_bw / 1e6:.0f} MB/s | - | {loaded_bw / 1e6:.0f} MB/s | - |")
            continue
        print(f"| {i + 1} | {r['checkpoints']} | {r['checkpoint_bytes'] / 2**20:.1f} MiB | {max(pauses) * 1e3:.1f} ms | {statistics.mean(pauses) * 1e3:.1f} ms "
              f"| {max(pauses) / float(interval) * 100:.1f}% | {sum(saves):.3f} s | {flush_bw / 1e6:.0f} MB/s | {plain_bw / 1e6:.0f} MB/s | {ratio:.2f} "
              f"| {loaded_bw / 1e6:.0f} MB/s | {flush_bw / loaded_bw:.2f} |")
    ck_runs = []
    for i, (ratio, r, flush_bw, plain_bw, loaded_bw) in enumerate(results):
        pauses, saves = r["checkpoint_pauses_seconds"], r["checkpoint_save_seconds"]
        ck_runs.append({"run": i + 1, "checkpoints": r["checkpoints"], "bytes_mib": r2(r["checkpoint_bytes"] / 2**20, 1),
                        "max_pause_ms": r2(max(pauses) * 1e3, 1) if pauses else None, "mean_pause_ms": r2(statistics.mean(pauses) * 1e3, 1) if pauses else None,
                        "max_pause_pct_of_interval": r2(max(pauses) / float(interval) * 100, 1) if pauses else None,
                        "save_s": r2(sum(saves), 3), "flush_mbps": round(flush_bw / 1e6), "plain_write_idle_mbps": round(plain_bw / 1e6),
                        "ratio_idle": r2(ratio, 2) if pauses else None,
                        "plain_write_loaded_mbps": round(loaded_bw / 1e6) if loaded_bw == loaded_bw else None,
                        "ratio_loaded": r2(flush_bw / loaded_bw, 2) if pauses and loaded_bw == loaded_bw else None,
                        "per_checkpoint_pause_ms_save_s_flush_s": [[r2(p * 1e3, 1), r2(sv, 3), r2(f, 3)] for p, sv, f in zip(
                            pauses, saves, r["checkpoint_flush_seconds"])]})
    took = [x for x in results if x[1]["checkpoint_pauses_seconds"]]
    parts["checkpoints"] = {"n": int(cn), "bs": int(cbs), "workers": 3, "interval_s": float(interval), "runs": ck_runs,
                            "largest_pause_pct": r2(max(max(x[1]["checkpoint_pauses_seconds"]) for x in took) / float(interval) * 100, 1) if took else None,
                            "median_ratio_idle": r2(statistics.median(x[0] for x in took), 2) if took else None,
                            "median_ratio_loaded": r2(statistics.median(x[2] / x[4] for x in took), 2) if took else None}
    if took:
        worst_pause = max(max(x[1]["checkpoint_pauses_seconds"]) for x in took) / float(interval)
        print(f"\nLargest pause of all runs: {worst_pause * 100:.1f}% of the interval; median flush ratio: {statistics.median(x[0] for x in took):.2f} "
              f"(idle plain write), {statistics.median(x[2] / x[4] for x in took):.2f} (plain write while matmul computes)")
    else:
        print(f"\nNo run took a checkpoint: the runs were shorter than the interval ({interval} s); run without --quick.")
    for i, (_, r, *_) in enumerate(results):
        print(f"\nRun {i + 1}, per checkpoint (pause ms / save s / flush s): " + ", ".join(
            f"{p * 1e3:.1f} / {sv:.3f} / {f:.3f}" for p, sv, f in zip(r["checkpoint_pauses_seconds"], r["checkpoint_save_seconds"], r["checkpoint_flush_seconds"])))
    print(f"\n## Stock plugin runs\n")
    print(f"stock runs retried after libomp's task_team assertion: {stock_retried['task_team']}; "
          f"retried after another failure: {stock_retried['other']}; "
          f"failed all {1 + STOCK_RETRIES} attempts (reported, not timed): {len(stock_failed)}")
    for cmd, why in stock_failed:
        print(f"- FAILED: `{cmd}` ({why})")
    print(f"\nLoad average after: {os.getloadavg()[0]:.2f}")
    if QUICK:
        print("bench: --quick: nothing written to bench/results", file=sys.stderr)
        return
    parts["stock_runs"] = {"retried_task_team": stock_retried["task_team"], "retried_other": stock_retried["other"],
                           "failed": [{"command": c, "why": w} for c, w in stock_failed]}
    plot.record("offload", "bench/run.py", "python3 bench/run.py", parts,
                [{"chart": "bandwidth", "parts": ["bandwidth", "small_updates"], "output": "bandwidth.svg"}], date=started)


if __name__ == "__main__":
    main()
