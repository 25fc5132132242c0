#!/usr/bin/env python3
"""Conformance runner: LLVM 16's own libomptarget tests under the stock x86_64
plugin and under ours (issue 2, item 11).

It takes openmp/libomptarget/test/{offloading,mapping,api,env} from the Debian
source package llvm-toolchain-16 (fetched with `apt-get source` into a cache
directory outside the repository, never committed), interprets each test's lit
directives the way openmp/libomptarget/test/lit.cfg does for the
x86_64-pc-linux-gnu target, runs every test twice

  stock: the RUN lines as lit would run them, with /usr/lib/llvm-16/lib in
         front of LD_LIBRARY_PATH (on Debian 12 libomptarget 16 finds its stock
         x86_64 plugin only there; without it omp_get_num_devices() is 0 and
         every region runs on the host); a probe checks that it offloads;
  ours:  the same, with every %libomptarget-run-* command prefixed by OURS_RUN
         (default `<repo>/target/release/ompcluster-run -np 3 --`: 1 head and
         2 workers), without that LD_LIBRARY_PATH (the launcher puts its own
         plugin on it),

checks output with FileCheck-16 exactly as the RUN lines pipe it, and prints a
table of both results. Exit status: 0 when no test that passes under the stock
plugin fails under ours, 1 when one does (a regression), 2 on a setup error.

Python 3 standard library only. See docs/conformance.md.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import glob
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "llvm-toolchain-16"
TEST_SUBDIR = os.path.join("openmp", "libomptarget", "test")
DEFAULT_DIRS = ["offloading", "mapping", "api", "env"]
LLVM_PREFIX = "/usr/lib/llvm-16"
CURRENT_TARGET = "x86_64-pc-linux-gnu"
# LIBOMPTARGET_ALL_TARGETS, in the order of openmp/libomptarget/CMakeLists.txt
# (16.0.6); the order matters because lit applies substitutions in order.
ALL_TARGETS = [
    "aarch64-unknown-linux-gnu", "aarch64-unknown-linux-gnu-LTO",
    "amdgcn-amd-amdhsa", "amdgcn-amd-amdhsa-LTO",
    "powerpc64le-ibm-linux-gnu", "powerpc64le-ibm-linux-gnu-LTO",
    "powerpc64-ibm-linux-gnu", "powerpc64-ibm-linux-gnu-LTO",
    "x86_64-pc-linux-gnu", "x86_64-pc-linux-gnu-LTO",
    "nvptx64-nvidia-cuda", "nvptx64-nvidia-cuda-LTO",
    "nvptx64-nvidia-cuda-JIT-LTO",
]
# Packages that provide the tools (Debian 12).
TOOL_PACKAGES = ["clang-16", "clang-tools-16", "libomp-16-dev", "llvm-16-tools"]
# Environment variables lit passes through to tests (lit's TestingConfig plus
# what lit.cfg forwards), plus what an MPI launcher needs.
PASS_ENV = [
    "PATH", "HOME", "USER", "LOGNAME", "TERM", "TMPDIR", "TMP", "TEMP", "LANG",
    "LC_ALL", "LD_PRELOAD", "FILECHECK_OPTS", "SOURCE_DATE_EPOCH",
    "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "LIBOMPTARGET_DEBUG",
    "LIBOMPTARGET_NEXTGEN_PLUGINS", "OMP_TARGET_OFFLOAD",
]
PASS_ENV_PREFIXES = ["OMPCLUSTER_", "OMPI_", "PMIX_"]

OK_RESULTS = ("PASS", "XFAIL")
RESULT_ORDER = ["PASS", "XFAIL", "FAIL", "XPASS", "TIMEOUT", "UNSUPPORTED"]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def die(msg: str) -> "NoReturn":  # type: ignore[name-defined]
    log(f"conformance: error: {msg}")
    sys.exit(2)


# --------------------------------------------------------------------------
# Tools and sources
# --------------------------------------------------------------------------

def apt_install(packages: list[str]) -> None:
    if os.geteuid() != 0:
        die(f"missing packages {packages}; install them: apt-get install {' '.join(packages)}")
    log(f"conformance: apt-get install {' '.join(packages)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    r = subprocess.run(["apt-get", "install", "-y", "-q", *packages], env=env)
    if r.returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], env=env)
        r = subprocess.run(["apt-get", "install", "-y", "-q", *packages], env=env)
        if r.returncode != 0:
            die(f"apt-get install {' '.join(packages)} failed")


def find_tools() -> dict[str, str]:
    def which(*names: str) -> str | None:
        for n in names:
            p = shutil.which(n) if "/" not in n else (n if os.access(n, os.X_OK) else None)
            if p:
                return p
        return None

    wanted = {
        "clang": ("clang-16", f"{LLVM_PREFIX}/bin/clang"),
        "clangxx": ("clang++-16", f"{LLVM_PREFIX}/bin/clang++"),
        "filecheck": ("FileCheck-16", f"{LLVM_PREFIX}/bin/FileCheck"),
        "not": ("not-16", f"{LLVM_PREFIX}/bin/not"),
        "packager": ("clang-offload-packager-16", f"{LLVM_PREFIX}/bin/clang-offload-packager"),
    }
    tools = {k: which(*v) for k, v in wanted.items()}
    omp_ok = os.path.exists(f"{LLVM_PREFIX}/lib/libomptarget.so")
    if not all(tools.values()) or not omp_ok:
        apt_install(TOOL_PACKAGES)
        tools = {k: which(*v) for k, v in wanted.items()}
        if not all(tools.values()):
            die(f"tools still missing after install: {[k for k, v in tools.items() if not v]}")
    return tools  # type: ignore[return-value]


def has_deb_src() -> bool:
    files = glob.glob("/etc/apt/sources.list") + glob.glob("/etc/apt/sources.list.d/*.list")
    for f in files:
        try:
            for line in open(f, encoding="utf-8", errors="replace"):
                if line.strip().startswith("deb-src"):
                    return True
        except OSError:
            pass
    for f in glob.glob("/etc/apt/sources.list.d/*.sources"):
        try:
            text = open(f, encoding="utf-8", errors="replace").read()
        except OSError:
            continue
        for stanza in re.split(r"\n\s*\n", text):
            if re.search(r"^Enabled:\s*no\s*$", stanza, re.M | re.I):
                continue
            m = re.search(r"^Types:(.*)$", stanza, re.M)
            if m and "deb-src" in m.group(1).split():
                return True
    return False


def add_deb_src() -> None:
    """Derive deb-src entries from the machine's own apt sources (no host names
    are written anywhere but /etc/apt)."""
    if os.geteuid() != 0:
        die("apt has no deb-src entry and we are not root: add one (copy your "
            "'deb' sources as 'deb-src') or pass --src DIR")
    out_stanzas: list[str] = []
    for f in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        if os.path.basename(f).startswith("ompcluster-conformance"):
            continue
        text = open(f, encoding="utf-8", errors="replace").read()
        for stanza in re.split(r"\n\s*\n", text):
            if not stanza.strip() or re.search(r"^Enabled:\s*no\s*$", stanza, re.M | re.I):
                continue
            m = re.search(r"^Types:(.*)$", stanza, re.M)
            if not m or "deb" not in m.group(1).split():
                continue
            # Only Debian's own archive carries llvm-toolchain-16 sources;
            # keep stanzas whose Signed-By is a Debian archive keyring.
            if "Signed-By" in stanza and "debian-archive-keyring" not in stanza:
                continue
            out_stanzas.append(re.sub(r"^Types:.*$", "Types: deb-src", stanza.strip(), flags=re.M))
    lines: list[str] = []
    for f in glob.glob("/etc/apt/sources.list") + sorted(glob.glob("/etc/apt/sources.list.d/*.list")):
        if os.path.basename(f).startswith("ompcluster-conformance"):
            continue
        try:
            for line in open(f, encoding="utf-8", errors="replace"):
                s = line.strip()
                if s.startswith("deb ") and ("debian" in s):
                    lines.append("deb-src " + s[4:])
        except OSError:
            pass
    if out_stanzas:
        path = "/etc/apt/sources.list.d/ompcluster-conformance-src.sources"
        with open(path, "w", encoding="utf-8") as fh:
            fh.write("# Added by ompcluster conformance/run.py: source packages for apt-get source\n")
            fh.write("\n\n".join(out_stanzas) + "\n")
    elif lines:
        path = "/etc/apt/sources.list.d/ompcluster-conformance-src.list"
        with open(path, "w", encoding="utf-8") as fh:
            fh.write("# Added by ompcluster conformance/run.py: source packages for apt-get source\n")
            fh.write("\n".join(lines) + "\n")
    else:
        die("found no Debian 'deb' source to derive a 'deb-src' entry from; pass --src DIR")
    log(f"conformance: added deb-src entries in {path}; running apt-get update")
    subprocess.run(["apt-get", "update", "-q"], check=False)


def find_test_root(path: str) -> str | None:
    """Accept the test dir itself, an LLVM source root, or a dir containing one."""
    cands = [path, os.path.join(path, TEST_SUBDIR)]
    cands += sorted(glob.glob(os.path.join(path, "*", TEST_SUBDIR)))
    for c in cands:
        if os.path.isfile(os.path.join(c, "lit.cfg")) and os.path.isdir(os.path.join(c, "offloading")):
            return os.path.abspath(c)
    return None


def fetch_sources(cache: str) -> str:
    srcdir = os.path.join(cache, "src")
    root = find_test_root(srcdir)
    if root:
        return root
    os.makedirs(srcdir, exist_ok=True)
    if not shutil.which("dpkg-source"):
        apt_install(["dpkg-dev"])
    if not has_deb_src():
        add_deb_src()
    log(f"conformance: apt-get source --download-only {PACKAGE} (into {srcdir})")
    r = subprocess.run(["apt-get", "source", "--download-only", PACKAGE], cwd=srcdir)
    if r.returncode != 0:
        subprocess.run(["apt-get", "update", "-q"], check=False)
        r = subprocess.run(["apt-get", "source", "--download-only", PACKAGE], cwd=srcdir)
        if r.returncode != 0:
            die("apt-get source failed")
    origs = sorted(glob.glob(os.path.join(srcdir, f"{PACKAGE}_*.orig.tar.*")))
    if not origs:
        die(f"no {PACKAGE}_*.orig.tar.* in {srcdir} after apt-get source")
    log(f"conformance: extracting */{TEST_SUBDIR}/* from {os.path.basename(origs[-1])}")
    r = subprocess.run(["tar", "-xf", origs[-1], "--wildcards", f"*/{TEST_SUBDIR}/*"], cwd=srcdir)
    if r.returncode != 0:
        die("tar extraction failed")
    root = find_test_root(srcdir)
    if not root:
        die(f"extracted sources but found no {TEST_SUBDIR}/lit.cfg under {srcdir}")
    apply_debian_patches(srcdir, os.path.dirname(os.path.dirname(os.path.dirname(root))))
    return root


def apply_debian_patches(srcdir: str, llvm_root: str) -> None:
    """Apply the Debian patches that touch the test subtree (none in 16.0.6-15)."""
    debs = sorted(glob.glob(os.path.join(srcdir, f"{PACKAGE}_*.debian.tar.*")))
    if not debs:
        return
    ddir = os.path.join(srcdir, "debian-pkg")
    os.makedirs(ddir, exist_ok=True)
    if subprocess.run(["tar", "-xf", debs[-1], "-C", ddir]).returncode != 0:
        return
    series = os.path.join(ddir, "debian", "patches", "series")
    if not os.path.exists(series):
        return
    for line in open(series, encoding="utf-8", errors="replace"):
        name = line.split("#", 1)[0].strip()
        if not name:
            continue
        p = os.path.join(ddir, "debian", "patches", name.split()[0])
        try:
            text = open(p, encoding="utf-8", errors="replace").read()
        except OSError:
            continue
        if f"{TEST_SUBDIR}/" in text:
            r = subprocess.run(["patch", "-p1", "-N", "-s", "-i", p], cwd=llvm_root,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            log(f"conformance: Debian patch {name}: {'applied' if r.returncode == 0 else 'did not apply fully'}")


# --------------------------------------------------------------------------
# lit emulation
# --------------------------------------------------------------------------

KEYWORD_RE = re.compile(r"(?<![A-Za-z0-9_-])(RUN|XFAIL|REQUIRES|UNSUPPORTED|END)(:|\.)(.*)$")


class Test:
    def __init__(self, root: str, rel: str):
        self.root = root
        self.rel = rel
        self.path = os.path.join(root, rel)
        self.run: list[str] = []
        self.requires: list[str] = []
        self.unsupported: list[str] = []
        self.xfail: list[str] = []
        self.parse()

    def parse(self) -> None:
        """lit's parseIntegratedTestScript, reduced to the keywords used here."""
        text = open(self.path, encoding="utf-8", errors="replace").read()
        for line in text.splitlines():
            m = KEYWORD_RE.search(line)
            if not m:
                continue
            kw, sep, rest = m.group(1), m.group(2), m.group(3)
            if kw == "END" and sep == ".":
                break
            if sep != ":":
                continue
            rest = rest.rstrip()
            if kw == "RUN":
                rest = rest.strip()
                if self.run and self.run[-1].endswith("\\"):
                    self.run[-1] = self.run[-1][:-1] + rest
                else:
                    self.run.append(rest)
            elif kw == "REQUIRES":
                self.requires += [e.strip() for e in rest.split(",") if e.strip()]
            elif kw == "UNSUPPORTED":
                self.unsupported += [e.strip() for e in rest.split(",") if e.strip()]
            elif kw == "XFAIL":
                self.xfail += [e.strip() for e in rest.split(",") if e.strip()]


class BoolExpr:
    """lit's BooleanExpression: identifiers, true/false, !, &&, ||, parens."""

    TOKEN = re.compile(r"\s*(\(|\)|&&|\|\||!|[-+=._a-zA-Z0-9*]+)\s*")

    def __init__(self, expr: str, features: set[str]):
        self.toks: list[str] = []
        pos = 0
        while pos < len(expr):
            m = self.TOKEN.match(expr, pos)
            if not m:
                raise ValueError(f"bad expression {expr!r}")
            self.toks.append(m.group(1))
            pos = m.end()
        self.i = 0
        self.features = features

    @staticmethod
    def evaluate(expr: str, features: set[str]) -> bool:
        p = BoolExpr(expr, features)
        v = p.or_()
        if p.i != len(p.toks):
            raise ValueError(f"trailing tokens in {expr!r}")
        return v

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def or_(self) -> bool:
        v = self.and_()
        while self.peek() == "||":
            self.i += 1
            v = self.and_() or v
        return v

    def and_(self) -> bool:
        v = self.not_()
        while self.peek() == "&&":
            self.i += 1
            v = self.not_() and v
        return v

    def not_(self) -> bool:
        if self.peek() == "!":
            self.i += 1
            return not self.not_()
        return self.atom()

    def atom(self) -> bool:
        t = self.peek()
        self.i += 1
        if t == "(":
            v = self.or_()
            if self.peek() != ")":
                raise ValueError("missing )")
            self.i += 1
            return v
        if t is None or t in (")", "&&", "||"):
            raise ValueError("expected identifier")
        if t == "true":
            return True
        if t == "false":
            return False
        return t in self.features


def lit_features(clang: str) -> set[str]:
    """available_features as lit.cfg sets them for x86_64-pc-linux-gnu."""
    out = subprocess.run([clang, "-dumpversion"], capture_output=True, text=True).stdout.strip()
    ver = out or "16.0.6"
    parts = ver.split(".")
    feats = {"clang", f"clang-{parts[0]}", f"clang-{'.'.join(parts[:2])}", f"clang-{ver}"}
    feats.add(CURRENT_TARGET)
    # lit.cfg: every target but nvptx < sm_70 and amdgcn supports USM.
    feats.add("unified_shared_memory")
    # 'libomptarget-debug' only with LIBOMPTARGET_ENABLE_DEBUG, which Debian's
    # release build does not set.
    return feats


def lit_substitutions(tools: dict[str, str], test_root: str, run_prefix: str | None) -> list[tuple[str, str]]:
    """config.substitutions of lit.cfg for CURRENT_TARGET, in lit's order.

    run_prefix: None for the stock run; else a command to put in front of the
    test binary in %libomptarget-run-* (ours)."""
    fc = tools["filecheck"]
    lib = f"{LLVM_PREFIX}/lib"
    omp_inc = glob.glob(f"{LLVM_PREFIX}/lib/clang/*/include")
    omp_inc_dir = omp_inc[0] if omp_inc else f"{LLVM_PREFIX}/include"
    flags = f" -I {test_root} -I {omp_inc_dir} -L {lib} -L {lib} "
    flags += " -fno-openmp-implicit-rpath"
    flags += f" -Wl,-rpath,{lib} -Wl,-rpath,{lib} -Wl,-rpath,{lib}"
    subs: list[tuple[str, str]] = []
    a = subs.append
    for t in ALL_TARGETS:
        if t == CURRENT_TARGET:
            for g in ["compilexx-run-and-check", "compile-run-and-check", "compilexx-and-run",
                      "compile-and-run", "compilexx", "compile", "compileoptxx-run-and-check",
                      "compileopt-run-and-check", "compileoptxx-and-run", "compileopt-and-run",
                      "compileoptxx", "compileopt", "run", "run-fail"]:
                a((f"%libomptarget-{g}-generic", f"%libomptarget-{g}-{t}"))
            a(("%clangxx-generic", f"%clangxx-{t}"))
            a(("%clang-generic", f"%clang-{t}"))
            a(("%fcheck-generic", f"{fc} %s"))
            a((f"%libomptarget-compilexx-run-and-check-{t}", f"%libomptarget-compilexx-and-run-{t} | {fc} %s"))
            a((f"%libomptarget-compile-run-and-check-{t}", f"%libomptarget-compile-and-run-{t} | {fc} %s"))
            a((f"%libomptarget-compilexx-and-run-{t}", f"%libomptarget-compilexx-{t} && %libomptarget-run-{t}"))
            a((f"%libomptarget-compile-and-run-{t}", f"%libomptarget-compile-{t} && %libomptarget-run-{t}"))
            a((f"%libomptarget-compilexx-{t}", f"%clangxx-{t} %s -o %t"))
            a((f"%libomptarget-compile-{t}", f"%clang-{t} %s -o %t"))
            a((f"%libomptarget-compileoptxx-run-and-check-{t}", f"%libomptarget-compileoptxx-and-run-{t} | {fc} %s"))
            a((f"%libomptarget-compileopt-run-and-check-{t}", f"%libomptarget-compileopt-and-run-{t} | {fc} %s"))
            a((f"%libomptarget-compileoptxx-and-run-{t}", f"%libomptarget-compileoptxx-{t} && %libomptarget-run-{t}"))
            a((f"%libomptarget-compileopt-and-run-{t}", f"%libomptarget-compileopt-{t} && %libomptarget-run-{t}"))
            a((f"%libomptarget-compileoptxx-{t}", f"%clangxx-{t} -O3 %s -o %t"))
            a((f"%libomptarget-compileopt-{t}", f"%clang-{t} -O3 %s -o %t"))
            run = "%t" if run_prefix is None else f"{run_prefix} %t"
            a((f"%libomptarget-run-{t}", run))
            a((f"%libomptarget-run-fail-{t}", f"%not --crash {run}"))
            a((f"%clangxx-{t}", f"%clangxx %openmp_flags %cuda_flags %flags -fopenmp-targets={t}"))
            a((f"%clang-{t}", f"%clang %openmp_flags %cuda_flags %flags -fopenmp-targets={t}"))
            a((f"%fcheck-{t}", f"{fc} %s"))
        else:
            for g in ["compile-run-and-check", "compilexx-run-and-check", "compile-and-run",
                      "compilexx-and-run", "compilexx", "compile", "compileopt-run-and-check",
                      "compileoptxx-run-and-check", "compileopt-and-run", "compileoptxx-and-run",
                      "compileoptxx", "compileopt", "run", "run-fail"]:
                a((f"%libomptarget-{g}-{t}", "echo ignored-command"))
            a((f"%clang-{t}", "echo ignored-command"))
            a((f"%clangxx-{t}", "echo ignored-command"))
            a((f"%fcheck-{t}", "echo ignored-command"))
    a(("%clangxx", tools["clangxx"]))
    a(("%clang", tools["clang"]))
    a(("%openmp_flags", "-fopenmp -pthread"))
    a(("%cuda_flags", ""))
    a(("%flags", flags))
    a(("%not", tools["not"]))
    return subs


def apply_subs(line: str, subs: list[tuple[str, str]]) -> str:
    for k, v in subs:
        line = line.replace(k, v)
    return line


# --------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------

def stock_env(env: dict[str, str]) -> dict[str, str]:
    """The 'stock' configuration's environment: env with /usr/lib/llvm-16/lib in front of
    LD_LIBRARY_PATH (the caller's LD_LIBRARY_PATH, if any, after it, as lit passes it on).
    On Debian 12 libomptarget 16 finds its stock plugins only through LD_LIBRARY_PATH (the
    test's -rpath does not reach the plugins it dlopens); without it there is no device and
    every region runs on the host. 'ours' does not get it: ompcluster-run puts its own plugin
    directory on LD_LIBRARY_PATH."""
    old = os.environ.get("LD_LIBRARY_PATH")
    return dict(env, LD_LIBRARY_PATH=f"{LLVM_PREFIX}/lib" + (f":{old}" if old else ""))


def test_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: os.environ[k] for k in PASS_ENV if k in os.environ}
    for k, v in os.environ.items():
        if any(k.startswith(p) for p in PASS_ENV_PREFIXES):
            env[k] = v
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    if extra:
        env.update(extra)
    return env


# Process groups of the tests running now (killed on Ctrl-C).
LIVE: set = set()


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_one(test: Test, mode: str, ctx: dict) -> dict:
    """Run one test in one mode; returns {result, seconds, log, commands}."""
    feats: set[str] = ctx["features"]
    res = {"result": None, "seconds": 0.0, "log": "", "commands": [], "trivial": False}
    try:
        if test.unsupported and any(BoolExpr.evaluate(e, feats) for e in test.unsupported):
            res["result"] = "UNSUPPORTED"
            res["log"] = f"UNSUPPORTED: {', '.join(test.unsupported)}"
            return res
        missing = [e for e in test.requires if not BoolExpr.evaluate(e, feats)]
        if missing:
            res["result"] = "UNSUPPORTED"
            res["log"] = f"REQUIRES not met: {', '.join(missing)}"
            return res
        xfail = any(e == "*" or BoolExpr.evaluate(e, feats) for e in test.xfail)
    except ValueError as e:
        res["result"] = "FAIL"
        res["log"] = f"bad lit directive: {e}"
        return res
    if not test.run:
        res["result"] = "FAIL"
        res["log"] = "no RUN lines"
        return res

    exec_dir = os.path.join(ctx["build"], mode, os.path.dirname(test.rel))
    tmp_dir = os.path.join(exec_dir, "Output")
    base = os.path.basename(test.rel)
    tmp_base = os.path.join(tmp_dir, base)
    os.makedirs(tmp_dir, exist_ok=True)
    for old in glob.glob(tmp_base + ".tmp*"):
        if os.path.isdir(old):
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.unlink(old)
    subs = list(ctx["subs"][mode])
    subs += [("%s", test.path), ("%S", os.path.dirname(test.path)), ("%p", os.path.dirname(test.path)),
             ("%{pathsep}", os.pathsep), ("%t", tmp_base + ".tmp"), ("%basename_t", base), ("%T", tmp_dir)]
    cmds = [apply_subs(c, subs) for c in test.run]
    res["commands"] = cmds
    res["trivial"] = all(c.strip().startswith("echo ignored-command") for c in cmds)
    # lit's internal shell: the RUN lines joined with &&, pipefail on; each
    # command and its exit status echoed to the log as lit does.
    script = "set -o pipefail\n"
    for c in cmds:
        script += f"printf '%s\\n' {shlex.quote('$ ' + c)} >&2\n"
        script += "{ " + c + "\n}\n"
        script += 'rc=$?; if [ $rc -ne 0 ]; then echo "[conformance] command exited $rc" >&2; exit $rc; fi\n'
    script_path = tmp_base + ".script"
    with open(script_path, "w", encoding="utf-8") as fh:
        fh.write(script)
    t0 = time.monotonic()
    out_path = tmp_base + ".out"
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(["bash", script_path], cwd=exec_dir, env=ctx["envs"][mode],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        LIVE.add(proc)
        try:
            rc = proc.wait(timeout=ctx["timeout"])
            timed_out = False
        except subprocess.TimeoutExpired:
            kill_group(proc)
            rc = -1
            timed_out = True
        # Reap anything the test left behind in its session (e.g. MPI ranks).
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        LIVE.discard(proc)
    res["seconds"] = round(time.monotonic() - t0, 2)
    with open(out_path, "rb") as fh:
        data = fh.read()
    res["log"] = data[-20000:].decode("utf-8", errors="replace")
    if timed_out:
        res["result"] = "TIMEOUT"
        res["log"] += f"\n[conformance] timed out after {ctx['timeout']} s\n"
    elif rc == 0:
        res["result"] = "XPASS" if xfail else "PASS"
    else:
        res["result"] = "XFAIL" if xfail else "FAIL"
    res["exit"] = rc
    if not ctx["keep"] and res["result"] in OK_RESULTS + ("UNSUPPORTED",):
        for f in glob.glob(tmp_base + ".*"):
            if os.path.isdir(f):
                shutil.rmtree(f, ignore_errors=True)
            else:
                try:
                    os.unlink(f)
                except OSError:
                    pass
    return res


def build_probe(tools: dict[str, str], d: str, code: str) -> tuple[str, str | None]:
    """Compile the probe program `code` in directory d (created): its path, and the compiler's
    error output if it failed."""
    os.makedirs(d, exist_ok=True)
    src = os.path.join(d, "probe.c")
    with open(src, "w") as fh:
        fh.write(code)
    exe = os.path.join(d, "probe")
    r = subprocess.run([tools["clang"], "-fopenmp", "-fopenmp-targets=" + CURRENT_TARGET, src, "-o", exe],
                       capture_output=True, text=True)
    return exe, (r.stderr[-2000:] if r.returncode != 0 else None)


def probe_ours(tools: dict[str, str], prefix: str, build: str, env: dict[str, str], timeout: int) -> dict:
    """Check that OURS_RUN actually puts a non-stock plugin under libomptarget."""
    d = os.path.join(build, "probe")
    exe, error = build_probe(tools, d, '#include <stdio.h>\n#include <omp.h>\nint main(void){int x=0;\n'
                             '#pragma omp target map(tofrom:x)\n{ x = 42; }\n'
                             'printf("probe x=%d devices=%d\\n", x, omp_get_num_devices()); return x!=42;}\n')
    info: dict = {"ok": False, "plugins": [], "output": ""}
    if error is not None:
        info["output"] = error
        return info
    e = dict(env, LD_DEBUG="files")
    out_path = os.path.join(d, "probe.out")
    with open(out_path, "wb") as out:
        p = subprocess.Popen(shlex.split(prefix) + [exe], stdin=subprocess.DEVNULL, stdout=out,
                             stderr=subprocess.STDOUT, env=e, cwd=d, start_new_session=True)
        LIVE.add(p)
        try:
            info["exit"] = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(p)
            info["exit"] = "timeout"
        finally:
            LIVE.discard(p)
    text = open(out_path, "rb").read().decode("utf-8", errors="replace")
    plugins = sorted(set(os.path.normpath(x) for x in
                         re.findall(r"calling init: (\S*/libomptarget\.rtl\.\S*|\S*/libompcluster\S*)", text)))
    info["plugins"] = plugins
    info["output"] = "\n".join(l for l in text.splitlines() if "probe x=" in l)[:2000]
    info["ok"] = any(not pl.startswith(LLVM_PREFIX) for pl in plugins) and "probe x=42" in text
    return info


def probe_stock(tools: dict[str, str], build: str, env: dict[str, str], timeout: int) -> dict:
    """Check that the 'stock' configuration really offloads to the stock x86_64 plugin: a
    one-region program run in the stock environment with LD_DEBUG=files must see devices
    (omp_get_num_devices() > 0), run its region off the initial device
    (omp_is_initial_device() == 0 inside it) and load libomptarget.rtl.x86_64*.so."""
    d = os.path.join(build, "probe-stock")
    exe, error = build_probe(tools, d, '#include <stdio.h>\n#include <omp.h>\nint main(void){int x=0, initial=-1;\n'
                             'int devices = omp_get_num_devices();\n'
                             '#pragma omp target map(tofrom:x, initial)\n{ x = 42; initial = omp_is_initial_device(); }\n'
                             'printf("probe x=%d devices=%d initial_device_in_region=%d\\n", x, devices, initial);\n'
                             'return x!=42;}\n')
    info: dict = {"ok": False, "plugins": [], "output": "", "devices": None, "initial_device_in_region": None,
                  "ld_library_path": env.get("LD_LIBRARY_PATH")}
    if error is not None:
        info["output"] = error
        return info
    try:
        p = subprocess.run([exe], stdin=subprocess.DEVNULL, capture_output=True, text=True, cwd=d,
                           env=dict(env, LD_DEBUG="files"), timeout=timeout)
        info["exit"] = p.returncode
        text = p.stdout + p.stderr
    except subprocess.TimeoutExpired:
        info["exit"] = "timeout"
        text = ""
    info["plugins"] = sorted(set(os.path.normpath(x) for x in re.findall(r"calling init: (\S*/libomptarget\.rtl\.\S*)", text)))
    m = re.search(r"probe x=(-?\d+) devices=(-?\d+) initial_device_in_region=(-?\d+)", text)
    info["output"] = m.group(0) if m else text[-2000:]
    if m:
        info["devices"], info["initial_device_in_region"] = int(m.group(2)), int(m.group(3))
    info["ok"] = (info.get("exit") == 0 and m is not None and m.group(1) == "42" and info["devices"] > 0
                  and info["initial_device_in_region"] == 0
                  and any(re.search(r"/libomptarget\.rtl\.x86_64[.a-z]*\.so", pl) for pl in info["plugins"]))
    return info


def stock_probe_text(probe: dict | None) -> str:
    if probe is None:
        return "stock probe not run"
    x86 = [os.path.basename(pl) for pl in probe["plugins"] if "x86_64" in pl]
    verdict = "offloads to the stock x86_64 plugin" if probe["ok"] else "DOES NOT OFFLOAD (host fallback)"
    return (f"stock probe: {verdict} (LD_LIBRARY_PATH={probe['ld_library_path']}; omp_get_num_devices()="
            f"{probe['devices']}, omp_is_initial_device() in a target region={probe['initial_device_in_region']}; "
            f"x86_64 plugin loaded: {', '.join(x86) or 'none'})")


# --------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------

def summarize(results: dict[str, dict[str, dict]], mode: str) -> dict:
    counts = {k: 0 for k in RESULT_ORDER}
    for r in results.values():
        if mode in r:
            counts[r[mode]["result"]] += 1
    passed = counts["PASS"] + counts["XFAIL"]
    failed = counts["FAIL"] + counts["XPASS"] + counts["TIMEOUT"]
    return {"passed": passed, "failed": failed, "unsupported": counts["UNSUPPORTED"],
            "applicable": passed + failed, "counts": counts}


def cell(r: dict | None) -> str:
    if r is None:
        return "-"
    s = r["result"]
    if s == "PASS" and r.get("trivial"):
        s = "PASS*"
    return s


def render(results: dict[str, dict[str, dict]], modes: list[str], stamp: dict,
           stock_probe: dict | None = None) -> tuple[str, str, list[str]]:
    names = sorted(results)
    w = max([len(n) for n in names] + [4])
    lines = [f"{'test':<{w}}  " + "  ".join(f"{m:<11}" for m in modes)]
    lines.append("-" * len(lines[0]))
    md = ["| test | " + " | ".join(modes) + " |", "|---|" + "---|" * len(modes)]
    for n in names:
        cells = [cell(results[n].get(m)) for m in modes]
        lines.append(f"{n:<{w}}  " + "  ".join(f"{c:<11}" for c in cells))
        md.append(f"| {n} | " + " | ".join(cells) + " |")
    regressions: list[str] = []
    if "stock" in modes and "ours" in modes:
        regressions = [n for n in names if results[n]["stock"]["result"] in OK_RESULTS
                       and results[n]["ours"]["result"] not in OK_RESULTS]
    parts = []
    for m in modes:
        s = summarize(results, m)
        extra = f", {s['counts']['TIMEOUT']} timed out" if s["counts"]["TIMEOUT"] else ""
        parts.append(f"{m}: {s['passed']} passed, {s['failed']} failed{extra} "
                     f"(of {s['applicable']} applicable; {s['unsupported']} unsupported)")
    summary = "; ".join(parts)
    if "stock" in modes and "ours" in modes:
        summary += f"; regressions (pass under stock, fail under ours): {regressions}"
    if "stock" in modes:
        summary += f"; {stock_probe_text(stock_probe)}"
    lines += ["", "PASS* = lit passes it, but every RUN line is for another target (nothing ran)", summary]
    md += ["", "PASS* = lit passes it, but every RUN line is for another target (nothing ran).", "",
           f"**Summary** ({stamp['date']}, commit {stamp['commit']}): {summary}"]
    return "\n".join(lines), "\n".join(md), regressions


def git_stamp() -> dict:
    def git(*a: str) -> str:
        try:
            return subprocess.run(["git", "-C", REPO, *a], capture_output=True, text=True).stdout.strip()
        except OSError:
            return ""
    return {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": git("rev-parse", "--short", "HEAD") or "unknown"}


def main() -> int:
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    default_cache = os.path.join(xdg, "ompcluster-conformance")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", default=default_cache, help=f"cache dir for sources and builds (default {default_cache})")
    ap.add_argument("--src", help="reuse LLVM sources: an llvm-project/llvm-toolchain-16 root or its openmp/libomptarget/test")
    ap.add_argument("--only", choices=["stock", "ours"], help="run only one of the two configurations")
    ap.add_argument("--filter", action="append", default=[], help="run only tests whose path contains SUBSTR (repeatable)")
    ap.add_argument("--dirs", default=",".join(DEFAULT_DIRS), help="test subdirectories (default %(default)s)")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="tests in parallel (default 2; the machines have 2 cores)")
    ap.add_argument("--ours-jobs", type=int, default=1,
                    help="'ours' runs in parallel (default 1: each is an MPI job of 3 ranks)")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per test and configuration (default 120)")
    ap.add_argument("--ours-run", default=os.environ.get("OURS_RUN"),
                    help="launcher prefix for 'ours' (env OURS_RUN; default "
                         "'<repo>/target/release/ompcluster-run -np 3 --')")
    ap.add_argument("--keep", action="store_true", help="keep build dirs of passing tests too")
    ap.add_argument("--out", help="where to write results.json and results.md (default <cache>/results)")
    ap.add_argument("-v", "--verbose", action="store_true", help="print the output of failing tests")
    ap.add_argument("--no-snapshot", action="store_true",
                    help="run OURS_RUN's launcher in place instead of a copy taken at the start")
    ap.add_argument("--skip-probe", action="store_true",
                    help="do not run the probes (that 'stock' offloads to the stock x86_64 plugin, and that "
                         "OURS_RUN loads a non-stock plugin)")
    args = ap.parse_args()

    cache = os.path.abspath(args.cache)
    os.makedirs(cache, exist_ok=True)
    tools = find_tools()
    if args.src:
        root = find_test_root(os.path.abspath(args.src))
        if not root:
            die(f"--src {args.src}: no {TEST_SUBDIR}/lit.cfg there")
    else:
        root = fetch_sources(cache)
    modes = ["stock", "ours"] if not args.only else [args.only]
    ours_run = args.ours_run or f"{REPO}/target/release/ompcluster-run -np 3 --"
    if "%" in ours_run:
        die("OURS_RUN must not contain '%'")
    if "ours" in modes:
        exe = shlex.split(ours_run)[0]
        if not (shutil.which(exe) or os.access(exe, os.X_OK)):
            if args.only == "ours":
                die(f"launcher {exe} not found (build it: cargo build --release)")
            die(f"launcher {exe} not found: build it (cargo build --release), set OURS_RUN, "
                f"or pass --only stock")

    tests: list[Test] = []
    for d in [x for x in args.dirs.split(",") if x]:
        base = os.path.join(root, d)
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(x for x in dirnames if x not in ("Inputs", "Output"))
            for f in sorted(filenames):
                if os.path.splitext(f)[1] in (".c", ".cpp", ".cc"):
                    rel = os.path.relpath(os.path.join(dirpath, f), root)
                    if not args.filter or any(s in rel for s in args.filter):
                        tests.append(Test(root, rel))
    if not tests:
        die("no tests selected")

    build = os.path.join(cache, "build")
    env = test_env()
    ctx = {"features": lit_features(tools["clang"]), "build": build, "timeout": args.timeout,
           "keep": args.keep, "envs": {"stock": stock_env(env), "ours": env},
           "subs": {"stock": lit_substitutions(tools, root, None),
                    "ours": lit_substitutions(tools, root, ours_run)}}
    stamp = git_stamp()
    watched = []
    snapshot_of = None
    if "ours" in modes:
        words = shlex.split(ours_run)
        exe = words[0] if "/" in words[0] else (shutil.which(words[0]) or words[0])
        plugin = os.path.join(os.path.dirname(exe), "libompcluster_plugin.so")
        if not args.no_snapshot and os.path.isfile(plugin):
            # Run copies, so a `cargo build` during the run cannot mix builds:
            # ompcluster-run takes the plugin beside its own executable.
            snap = os.path.join(cache, "ours-snapshot")
            shutil.rmtree(snap, ignore_errors=True)
            os.makedirs(snap)
            snapshot_of = {"launcher": exe, "plugin": plugin}
            for f in (exe, plugin):
                shutil.copy2(f, snap)
            exe = os.path.join(snap, os.path.basename(exe))
            plugin = os.path.join(snap, "libompcluster_plugin.so")
            ours_run = shlex.join([exe] + words[1:])
            ctx["subs"]["ours"] = lit_substitutions(tools, root, ours_run)
            log(f"conformance: running a snapshot of {snapshot_of['launcher']} and its plugin from {snap}")
        watched = [exe, plugin]

    def fingerprint() -> dict[str, str]:
        fp = {}
        for f in watched:
            try:
                st = os.stat(f)
                fp[f] = datetime.datetime.fromtimestamp(st.st_mtime, datetime.timezone.utc).strftime(
                    "%Y-%m-%d %H:%M:%S UTC") + f", {st.st_size} bytes"
            except OSError:
                fp[f] = "missing"
        return fp
    fp_start = fingerprint()
    stock_probe = None
    if "stock" in modes and not args.skip_probe:
        stock_probe = probe_stock(tools, build, ctx["envs"]["stock"], args.timeout)
        log(f"conformance: {stock_probe_text(stock_probe)}")
        if not stock_probe["ok"]:
            die("the 'stock' configuration does not offload to the stock x86_64 plugin, so its column would "
                f"be host fallback (probe exit {stock_probe.get('exit')}; plugins loaded: {stock_probe['plugins']}; "
                f"output: {stock_probe['output']!r}); --skip-probe runs anyway")
    probe = None
    if "ours" in modes and not args.skip_probe:
        probe = probe_ours(tools, ours_run, build, env, args.timeout)
        if probe["ok"]:
            log(f"conformance: ours probe: plugin(s) loaded: {probe['plugins']}")
        else:
            log(f"conformance: WARNING: the ours probe did not show a non-stock plugin running a target region "
                f"(plugins loaded: {probe['plugins']}; exit {probe.get('exit')}; output: {probe['output']!r})")
    log(f"conformance: {len(tests)} tests from {root}; modes {modes}; -j{args.jobs}; timeout {args.timeout}s")
    if "stock" in modes:
        log(f"conformance: stock runs with LD_LIBRARY_PATH={ctx['envs']['stock']['LD_LIBRARY_PATH']}")
    if "ours" in modes:
        log(f"conformance: OURS_RUN = {ours_run}")

    results: dict[str, dict[str, dict]] = {t.rel: {} for t in tests}
    ours_sem = threading.Semaphore(max(1, args.ours_jobs))
    lock = threading.Lock()
    done = [0]
    t_start = time.monotonic()

    def work(t: Test) -> None:
        for m in modes:
            if m == "ours":
                with ours_sem:
                    r = run_one(t, m, ctx)
            else:
                r = run_one(t, m, ctx)
            results[t.rel][m] = r
        with lock:
            done[0] += 1
            cells = "  ".join(f"{m}={results[t.rel][m]['result']}" for m in modes)
            secs = sum(results[t.rel][m]["seconds"] for m in modes)
            log(f"[{done[0]:3}/{len(tests)}] {t.rel}: {cells} ({secs:.1f}s)")

    ex = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs))
    try:
        for f in concurrent.futures.as_completed([ex.submit(work, t) for t in tests]):
            f.result()
    except KeyboardInterrupt:
        log("conformance: interrupted; killing the running tests")
        ex.shutdown(wait=False, cancel_futures=True)
        for p in list(LIVE):
            kill_group(p)
        os._exit(130)
    ex.shutdown()
    elapsed = time.monotonic() - t_start
    fp_end = fingerprint()
    rebuilt = [f for f in watched if fp_start.get(f) != fp_end.get(f)]
    if rebuilt:
        log(f"conformance: WARNING: {rebuilt} changed during the run: the 'ours' column mixes builds")

    table, md, regressions = render(results, modes, stamp, stock_probe)
    print(table)
    print(f"(runtime {elapsed:.0f} s)")
    if args.verbose:
        for n in sorted(results):
            for m in modes:
                r = results[n][m]
                if r["result"] not in OK_RESULTS + ("UNSUPPORTED",):
                    print(f"\n===== {n} [{m}] {r['result']} =====")
                    print("\n".join(r["commands"]))
                    print("-----")
                    print(r["log"][-4000:])

    out = os.path.abspath(args.out or os.path.join(cache, "results"))
    os.makedirs(out, exist_ok=True)
    payload = {"stamp": stamp, "runtime_s": round(elapsed), "source": root, "modes": modes,
               "ours_run": ours_run if "ours" in modes else None, "ours_probe": probe,
               "stock_ld_library_path": ctx["envs"]["stock"]["LD_LIBRARY_PATH"] if "stock" in modes else None,
               "stock_probe": stock_probe,
               "ours_binaries": {"snapshot_of": snapshot_of, "start": fp_start, "end": fp_end,
                                 "changed": rebuilt},
               "summary": {m: summarize(results, m) for m in modes}, "regressions": regressions,
               "tests": results}
    with open(os.path.join(out, "results.json"), "w", encoding="utf-8") as fh:
        json.dump(payload, fh, indent=1)
    with open(os.path.join(out, "results.md"), "w", encoding="utf-8") as fh:
        fh.write(md + f"\n\nRuntime: {elapsed:.0f} s; -j{args.jobs}; timeout {args.timeout} s.\n")
        if "stock" in modes:
            fh.write(f"\nstock: the RUN lines with `LD_LIBRARY_PATH={ctx['envs']['stock']['LD_LIBRARY_PATH']}`.\n")
            if stock_probe is not None:
                fh.write(f"\nProbe (a one-target-region program in the stock environment with LD_DEBUG=files): "
                         f"{stock_probe_text(stock_probe)}; output: {stock_probe['output']!r}\n")
        if "ours" in modes:
            fh.write(f"\nOURS_RUN: `{ours_run}`\n")
            if snapshot_of:
                fh.write(f"\nRan a copy of `{snapshot_of['launcher']}` and `{snapshot_of['plugin']}` "
                         f"taken at the start (times below are the copies' modification times).\n")
            for f in watched:
                fh.write(f"\n`{f}`: {fp_start.get(f)}" + (f" (CHANGED during the run: now {fp_end.get(f)})"
                                                          if f in rebuilt else "") + "\n")
            if probe is not None:
                fh.write(f"\nProbe (a one-target-region program under OURS_RUN with LD_DEBUG=files): "
                         f"{'non-stock plugin ran it' if probe['ok'] else 'NO non-stock plugin seen'}; "
                         f"plugins loaded: {probe['plugins']}; output: {probe['output']!r}\n")
        bad = [(n, m) for n in sorted(results) for m in modes
               if results[n][m]["result"] not in OK_RESULTS + ("UNSUPPORTED",)]
        if bad:
            fh.write("\n## Failures (last lines of output)\n")
            for n, m in bad:
                tail = "\n".join(results[n][m]["log"].rstrip().splitlines()[-12:])
                fh.write(f"\n### {n} [{m}] {results[n][m]['result']}\n\n```\n{tail}\n```\n")
    log(f"conformance: wrote {out}/results.json and {out}/results.md")
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
