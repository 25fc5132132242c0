#!/usr/bin/env python3
"""SOLLVE V&V's Fortran target tests, built by flang-19, under two runtimes (issue 37):

  stock19: LLVM 19's own runtime (libomptarget 19 with its host plugin, libomp 19), from
           Debian's libomp5-19 and libomp-19-dev unpacked with `dpkg -x` into a private
           directory (installing them would remove LLVM 16's OpenMP runtime), with the
           project's x86-64 device runtime (libompcluster_devrtl.so) on the device link:
           flang-19's x86 device code calls entry points only GPU runtimes define;
  ours:    the same sources built with `ompcluster-fortran` (LLVM 16's libomptarget, the
           same device runtime) and run with `ompcluster-run -np 3 --` (2 workers).

A test that flang-19 cannot compile (or link) is listed as such and not counted. A run
passes when it exits 0 and prints SOLLVE's "Test passed on the device"; "passed on the
host" (no offloading) is reported apart. The SOLLVE sources are read from --src (a checkout,
or a git directory, exported with `git archive`) or cloned from GitHub into the cache; they
are never copied into this repository.

Python 3 standard library only. See docs/conformance.md.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import glob
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOLLVE_URL = "https://github.com/SOLLVE/sollve_vv.git"
TARGET_RE = re.compile(r"^\s*!\$omp\s+target\b", re.IGNORECASE | re.MULTILINE)
FLANG = "flang-new-19"


def sh(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, errors="replace", **kw)


def sources(args) -> str:
    """A directory holding SOLLVE's tree (tests/, ompvv/)."""
    dest = os.path.join(args.cache, "sollve_vv")
    if os.path.isdir(os.path.join(dest, "ompvv")):
        return dest
    os.makedirs(args.cache, exist_ok=True)
    src = args.src
    if src and os.path.isdir(os.path.join(src, "ompvv")):
        return src
    if src:  # a git directory without a work tree: export its HEAD
        os.makedirs(dest, exist_ok=True)
        archive = subprocess.Popen(["git", "--git-dir", src, "archive", "HEAD"], stdout=subprocess.PIPE)
        subprocess.run(["tar", "-x", "-C", dest], stdin=archive.stdout, check=True)
        if archive.wait() != 0:
            sys.exit(f"cannot export {src} with git archive")
        return dest
    r = sh(["git", "clone", "--depth", "1", SOLLVE_URL, dest])
    if r.returncode != 0:
        sys.exit(f"cannot clone {SOLLVE_URL}: {r.stderr.strip()} (give --src DIR)")
    return dest


def llvm19_lib(args) -> str:
    """LLVM 19's runtime, unpacked (never installed) if it is not there yet."""
    lib = args.llvm19
    if os.path.isfile(os.path.join(lib, "libomptarget.so.19.1")):
        return lib
    root = os.path.join(args.cache, "llvm19")
    lib = os.path.join(root, "usr", "lib", "llvm-19", "lib")
    if os.path.isfile(os.path.join(lib, "libomptarget.so.19.1")):
        return lib
    debs = os.path.join(root, "debs")
    os.makedirs(debs, exist_ok=True)
    r = sh(["apt-get", "download", "libomp5-19", "libomp-19-dev"], cwd=debs)
    if r.returncode != 0:
        sys.exit(f"apt-get download libomp5-19 libomp-19-dev failed: {r.stderr.strip()}")
    for deb in glob.glob(os.path.join(debs, "*.deb")):
        subprocess.run(["dpkg", "-x", deb, root], check=True)
    return lib


def target_tests(src: str, filters) -> list[str]:
    out = []
    for path in sorted(glob.glob(os.path.join(src, "tests", "**", "*.F90"), recursive=True)):
        rel = os.path.relpath(path, os.path.join(src, "tests"))
        if filters and not any(f in rel for f in filters):
            continue
        with open(path, errors="replace") as f:
            if TARGET_RE.search(f.read()):
                out.append(rel)
    return out


def first_error(text: str) -> str:
    """The first line saying what went wrong, without source locations and paths."""
    def clean(line: str) -> str:
        line = re.sub(r'loc\("[^"]*":\d+:\d+\):\s*', "", line)
        line = re.sub(r"[^\s:\"(]*/", "", line)
        line = re.sub(r"^error:\s*", "", line.strip())
        return line[:160]
    lines = [l for l in text.splitlines() if l.strip()]
    for line in lines:  # a front end's located message says most
        if re.search(r":\d+:\d+: error: ", line):
            return clean(re.sub(r"^.*?:\d+:\d+: error: ", "", line))
    for line in lines:
        low = line.lower()
        if ("error" in low or "not yet implemented" in low or "not yet supported" in low or "failed" in low) and "ieee arithmetic" not in low:
            return clean(line)
    return clean(lines[-1]) if lines else ""


def run_limited(cmd, env, cwd, timeout):
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, out
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        return None, out


def one(test: str, config: str, ctx) -> dict:
    src = os.path.join(ctx["src"], "tests", test)
    build = os.path.join(ctx["cache"], "build", config, os.path.dirname(test))
    os.makedirs(build, exist_ok=True)
    exe = os.path.join(build, os.path.basename(test) + ".exe")
    inc = ["-I", os.path.join(ctx["src"], "ompvv")]
    bin_dir = ctx["bin"]
    if config == "ours":
        compile_cmd = [os.path.join(bin_dir, "ompcluster-fortran"), "-O2", *inc, src, "-o", exe]
        env = dict(os.environ)
    else:
        lib = ctx["llvm19"]
        compile_cmd = [FLANG, "-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu", "-O2", *inc, src, "-o", exe,
                       f"-L{lib}", f"-Wl,-rpath,{lib}", f"-L{bin_dir}", f"-Wl,-rpath,{bin_dir}",
                       "-Wl,--device-linker=x86_64-pc-linux-gnu=-lompcluster_devrtl"]
        env = dict(os.environ)
    for k in list(env):
        if k.startswith("OMPCLUSTER_") and config != "ours":
            del env[k]
    res = {"test": test, "config": config, "compile": shlex.join(compile_cmd)}
    failed = exe + ".no-compile"
    if ctx["reuse"] and os.path.exists(failed):
        res.update(result="NO-COMPILE", why=open(failed).read().strip())
        return res
    if not (ctx["reuse"] and os.path.exists(exe)):
        r = sh(compile_cmd, cwd=build, env=env)
        if r.returncode != 0:
            why = first_error(r.stderr + r.stdout)
            with open(failed, "w") as f:
                f.write(why + "\n")
            res.update(result="NO-COMPILE", why=why)
            return res
        if os.path.exists(failed):
            os.remove(failed)
    if config == "ours":
        run_cmd = shlex.split(ctx["ours_run"]) + [exe]
    else:
        run_cmd = [exe]
        env["LD_LIBRARY_PATH"] = ctx["llvm19"] + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    code, out = run_limited(run_cmd, env, build, ctx["timeout"])
    res["run"] = shlex.join(run_cmd)
    res["tail"] = out.splitlines()[-15:]
    if code is None:
        res["result"] = "TIMEOUT"
    elif code == 0 and "passed on the device" in out:
        res["result"] = "PASS"
    elif code == 0 and "passed on the host" in out:
        res["result"] = "PASS-HOST"
    elif code == 0 and "[OMPVV_RESULT" not in out:
        res["result"] = "PASS"  # a test without SOLLVE's report (offloading_success.F90): its exit status
    else:
        res["result"] = "FAIL"
        res["why"] = f"exit {code}: " + first_error(out)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cache_home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    ap.add_argument("--src", help="SOLLVE V&V checkout or git directory (default: clone from GitHub)")
    ap.add_argument("--cache", default=os.path.join(cache_home, "ompcluster-sollve"))
    ap.add_argument("--llvm19", default=os.path.join(REPO, ".llvm19", "usr", "lib", "llvm-19", "lib"),
                    help="LLVM 19's lib directory (libomptarget.so.19.1); unpacked into the cache if missing")
    ap.add_argument("--only", choices=["ours", "stock19"])
    ap.add_argument("--filter", action="append", default=[])
    ap.add_argument("-j", type=int, default=2, help="tests compiled and run at once (default 2)")
    ap.add_argument("--timeout", type=int, default=120)
    ap.add_argument("--ours-run", default=os.environ.get("OURS_RUN", os.path.join(REPO, "target", "release", "ompcluster-run") + " -np 3 --"))
    ap.add_argument("--out", help="results directory (default <cache>/results)")
    ap.add_argument("--reuse", action="store_true", help="keep the executables (and compile failures) of an earlier run")
    args = ap.parse_args()
    bin_dir = os.path.join(REPO, "target", "release")
    for need in ["ompcluster-fortran", "ompcluster-run", "libompcluster_devrtl.so"]:
        if not os.path.exists(os.path.join(bin_dir, need)):
            print(f"{os.path.join(bin_dir, need)} is missing: run cargo build --release", file=sys.stderr)
            return 2
    if not shutil.which(FLANG):
        print(f"{FLANG} not found: scripts/setup.sh installs flang-19", file=sys.stderr)
        return 2
    src = sources(args)
    configs = [args.only] if args.only else ["stock19", "ours"]
    ctx = {"src": src, "cache": args.cache, "bin": bin_dir, "timeout": args.timeout, "ours_run": args.ours_run, "reuse": args.reuse,
           "llvm19": llvm19_lib(args) if "stock19" in configs else ""}
    tests = target_tests(src, args.filter)
    commit = sh(["git", "-C", src, "log", "-1", "--format=%h %cs"]).stdout.strip()
    if not commit and args.src:
        commit = sh(["git", "--git-dir", args.src, "log", "-1", "--format=%h %cs"]).stdout.strip()
    commit = commit or "(no git metadata)"
    print(f"SOLLVE V&V at {commit}: {len(tests)} Fortran tests with a target construct; configurations {configs}")
    results: dict[tuple[str, str], dict] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.j)) as pool:
        # Ours one at a time (each run is a 3-rank MPI job): the stock runs go -j wide.
        futs = {pool.submit(one, t, "stock19", ctx): (t, "stock19") for t in tests if "stock19" in configs}
        for f in concurrent.futures.as_completed(futs):
            results[futs[f]] = f.result()
    if "ours" in configs:
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            for r in pool.map(lambda t: one(t, "ours", ctx), tests):
                results[(r["test"], "ours")] = r
    out_dir = args.out or os.path.join(args.cache, "results")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "sollve_fortran.json"), "w") as f:
        json.dump([results[k] for k in sorted(results)], f, indent=1)
    lines = [f"SOLLVE V&V at {commit}", "", "| test | stock LLVM 19 + device-rtl | ours (2 workers) |", "|---|---|---|"]
    counts = {c: {} for c in configs}
    for t in tests:
        row = [t]
        for c in ["stock19", "ours"]:
            r = results.get((t, c))
            cell = r["result"] if r else "-"
            if r:
                counts[c][cell] = counts[c].get(cell, 0) + 1
            row.append(cell)
        lines.append("| " + " | ".join(row) + " |")
    summary = "; ".join(f"{c}: " + ", ".join(f"{n} {k}" for k, n in sorted(v.items())) for c, v in counts.items())
    passed = ("PASS", "PASS-HOST")
    regressions = [t for t in tests if results.get((t, "stock19"), {}).get("result") in passed and results.get((t, "ours"), {}).get("result") not in (None, *passed)]
    lines.append("")
    lines.append(f"{summary}; pass under stock 19, not under ours: {regressions}")
    details = ["", "### Why (first error line of each test that did not pass)", ""]
    for (t, c), r in sorted(results.items()):
        if r["result"] not in ("PASS",):
            details.append(f"- `{t}` [{c}] {r['result']}: {r.get('why', '')}")
    with open(os.path.join(out_dir, "sollve_fortran.md"), "w") as f:
        f.write("\n".join(lines + details) + "\n")
    print("\n".join(lines))
    print(f"(details: {os.path.join(out_dir, 'sollve_fortran.md')})")
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
