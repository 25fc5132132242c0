#!/usr/bin/env python3
"""What a region costs, ours against the stock x86_64 plugin (issue 24's table).

  python3 bench/region_costs.py [--rounds N] [--quick] [--metg]

Cases (bench/region_costs.c times its own offloaded part, after a warm-up region):
  resident 4K / 64K / 1M / 16M   one host thread, synchronous regions adding 1 to every
                                 element of a buffer kept on the device (-np 2)
  readbig                        a region reading a 16 MiB resident buffer, writing 4 KiB (-np 2)
  threads                        4 host threads, each on its own 1.6 MB resident buffer (-np 4)
  matmul 1024/32                 examples/matmul, 32x32 blocks mapped per region (32,768
                                 regions, -np 4; the program's own time)
With --metg, bench/taskbench.py --quick for the stock plugin and ours on 3 workers.

The floor of exact write detection (columns "one read pass" and "floor"): `region_costs floor BYTES
REPS` runs the resident cases' kernel on the host, with no offloading, followed by one pass
reading every word it wrote, and times both. Telling what a kernel changed (which bytes, and the
device pointers they hold) reads the pages it wrote at least once; a kernel that rewrites its
buffer whole writes every page, so that pass is the least any exact detection adds to it, and
floor = stock + read pass is the least a plugin that detects writes exactly can reach, even
with nothing else to do (no message, no bookkeeping). For 4 host threads the pass is taken per
region on one thread, and counted twice: four regions, one per thread, share 2 cores for each
region's time of the case (an estimate: it assumes the stock run keeps both cores busy).
The read pass is built for AVX2 where the processor has it, and its fastest run counts.

Configurations, alternated within each round so that the machine's drift hits all alike:
  stock   the binary run with /usr/lib/llvm-16/lib first on LD_LIBRARY_PATH (the stock
          x86_64 plugin in process; the program refuses to run without a device)
  pages   ompcluster-run, OMPCLUSTER_WRITE_DETECTION=pages (written pages tracked)
  hash    ompcluster-run, OMPCLUSTER_WRITE_DETECTION=hash (every reachable buffer hashed)
Each number is the median over the rounds; ratios are against stock in the same rounds.
Writes bench/results/region_costs.json unless --quick.
"""
import argparse, json, os, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = os.path.join(ROOT, "target/release/ompcluster-run")

CASES = [
    # name, program, args, ranks
    ("resident 4 KiB", "rc", ["resident", "4096", "20000"], 2),
    ("resident 64 KiB", "rc", ["resident", "65536", "10000"], 2),
    ("resident 1 MiB", "rc", ["resident", "1048576", "1500"], 2),
    ("resident 16 MiB", "rc", ["resident", "16777216", "100"], 2),
    ("read 16 MiB, write 4 KiB", "rc", ["readbig", "200"], 2),
    ("4 host threads, 1.6 MB each", "rc", ["threads", "1600000", "1500"], 4),
    ("matmul 1024/32 (per run)", "matmul", ["1024", "32"], 4),
]
QUICK = {"resident 4 KiB": ["resident", "4096", "4000"], "resident 64 KiB": ["resident", "65536", "2000"],
         "resident 1 MiB": ["resident", "1048576", "300"], "resident 16 MiB": ["resident", "16777216", "30"],
         "read 16 MiB, write 4 KiB": ["readbig", "50"], "4 host threads, 1.6 MB each": ["threads", "1600000", "300"],
         "matmul 1024/32 (per run)": ["512", "32"]}
CONFIGS = ["stock", "pages", "hash"]


def build(tmp):
    progs = {}
    for name, src, extra in [("rc", "bench/region_costs.c", []), ("matmul", "examples/matmul/matmul.c", ["-lm"])]:
        out = os.path.join(tmp, name)
        subprocess.run(["clang-16", "-O2", "-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu", os.path.join(ROOT, src), "-o", out] + extra, check=True)
        progs[name] = out
    return progs


def run_once(config, prog, args, np):
    env = dict(os.environ)
    if config == "stock":
        env["LD_LIBRARY_PATH"] = "/usr/lib/llvm-16/lib" + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
        cmd = [prog] + args
    else:
        env["OMPCLUSTER_WRITE_DETECTION"] = config
        cmd = [RUN, "-np", str(np), prog] + args
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"{config} {' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    for line in p.stdout.splitlines():
        if line.startswith("us_per_region "):
            return float(line.split()[1])
        if line.startswith("matmul ") and "result correct" in line:
            # "matmul N=.. BS=.. tasks=..: 0.355 s, max error 0: result correct" -> seconds
            return float(line.split(": ")[1].split()[0])
    raise RuntimeError(f"{config}: no time in the output:\n{p.stdout}")


# case: (BYTES, REPS of `floor`, read passes per region of the case's time)
FLOOR = {"resident 4 KiB": ("4096", "2000", 1), "resident 64 KiB": ("65536", "2000", 1), "resident 1 MiB": ("1048576", "400", 1),
         "resident 16 MiB": ("16777216", "40", 1), "4 host threads, 1.6 MB each": ("1600000", "400", 2)}


def read_pass(prog, size, reps):
    """The host kernel's and the read pass's time, us (medians of REPS)."""
    p = subprocess.run([prog, "floor", size, reps], capture_output=True, text=True, timeout=120, check=True)
    f = p.stdout.split()
    return float(f[1]), float(f[3])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="fewer regions, nothing written")
    ap.add_argument("--metg", action="store_true", help="also run bench/taskbench.py --quick (stock and 3 workers)")
    a = ap.parse_args()
    started = time.time()
    times = {}
    with tempfile.TemporaryDirectory() as tmp:
        progs = build(tmp)
        for r in range(a.rounds):
            for name, prog, args, np in CASES:
                args = QUICK[name] if a.quick else args
                order = CONFIGS[r % 3:] + CONFIGS[:r % 3]
                for c in order:
                    t = run_once(c, progs[prog], args, np)
                    times.setdefault(name, {}).setdefault(c, []).append(t)
                    print(f"round {r + 1}: {name:30} {c:6} {t:10.3f}", file=sys.stderr)
                if name in FLOOR:
                    size, reps, passes = FLOOR[name]
                    k, rd = read_pass(progs[prog], size, reps)
                    rd *= passes
                    times[name].setdefault("host kernel", []).append(k)
                    times[name].setdefault("read pass", []).append(rd)
                    print(f"round {r + 1}: {name:30} host kernel {k:.3f} us, read pass {rd:.3f} us", file=sys.stderr)
    rows = []
    print(f"# Region costs, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))}, `python3 bench/region_costs.py {' '.join(sys.argv[1:])}`\n")
    print("| case | unit | stock | ours, pages | ratio | ours, hashing | ratio | one read pass | floor of exact detection |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, *_ in CASES:
        # The read pass is a lower bound: its fastest round (each round's is already its
        # fastest repetition); everything else, the median of the rounds.
        med = {c: (min(v) if c == "read pass" else statistics.median(v)) for c, v in times[name].items()}
        unit = "s per run" if name.startswith("matmul") else "us per region"
        rows.append({"case": name, "unit": unit, "median": med, "runs": times[name]})
        floor = "| |"
        if "read pass" in med:
            floor = f"| {med['read pass']:.3f} | {(med['stock'] + med['read pass']) / med['stock']:.2f}x |"
        print(f"| {name} | {unit} | {med['stock']:.3f} | {med['pages']:.3f} | {med['pages'] / med['stock']:.2f}x | {med['hash']:.3f} | {med['hash'] / med['stock']:.2f}x {floor}")
    if a.metg:
        p = subprocess.run([sys.executable, os.path.join(ROOT, "bench/taskbench.py"), "--quick", "--configs", "stock,ours-3w"], capture_output=True, text=True)
        print("\n" + p.stdout)
        rows.append({"case": "metg", "report": p.stdout})
    if not a.quick:
        with open(os.path.join(ROOT, "bench/results/region_costs.json"), "w") as f:
            json.dump({"started": started, "rounds": a.rounds, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
