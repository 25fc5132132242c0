//! Harness for the end-to-end tests: compile the OpenMP offloading programs of `programs/`
//! with clang-16 (once per test binary run), run them with `ompcluster-run` under a hard
//! timeout, and read the run report (`OMPCLUSTER_REPORT`).
//!
//! Runs are serialized through a global lock (the machine may have two cores and every run
//! starts N MPI processes); compilations of different programs may proceed in parallel.

use std::collections::HashMap;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Default hard limit for one run.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// Flags every program is compiled with.
pub const OFFLOAD_FLAGS: &[&str] = &["-O2", "-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu"];

/// `<target>/release` (or whichever profile directory holds the test executable): the test
/// executable lives in `<target>/<profile>/deps/`.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("cannot locate the test executable");
    let deps = exe.parent().expect("test executable has no directory");
    deps.parent().expect("test executable is not in <target>/<profile>/deps").to_path_buf()
}

/// The launcher, `<target>/release/ompcluster-run` (or `$OMPCLUSTER_RUN_BIN`). Panics if it
/// is not built.
pub fn launcher() -> PathBuf {
    if let Some(p) = std::env::var_os("OMPCLUSTER_RUN_BIN") {
        return PathBuf::from(p);
    }
    let mut p = profile_dir().join("ompcluster-run");
    if !p.is_file() {
        // Tests built in debug still use the release launcher and plugin.
        let target = profile_dir().parent().map(Path::to_path_buf).unwrap_or_default();
        p = target.join("release").join("ompcluster-run");
    }
    assert!(
        p.is_file(),
        "{} is missing: build it first with cargo build --release -p libomptarget-plugin",
        p.display()
    );
    let plugin = p.with_file_name("libompcluster_plugin.so");
    assert!(
        plugin.is_file(),
        "{} is missing: build it first with cargo build --release -p libomptarget-plugin",
        plugin.display()
    );
    p
}

/// The source directory of the test programs.
pub fn programs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("programs")
}

fn pid_alive(pid: i32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Where this test binary run puts its executables: `<target>/tmp/ompcluster-tests-<pid>`.
/// Directories left by earlier runs whose process is gone are removed.
pub fn work_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = profile_dir().parent().map(|t| t.join("tmp")).unwrap_or_else(std::env::temp_dir);
        std::fs::create_dir_all(&base).expect("cannot create the tests' work directory");
        if let Ok(entries) = std::fs::read_dir(&base) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if let Some(pid) = name.strip_prefix("ompcluster-tests-").and_then(|p| p.parse::<i32>().ok()) {
                    if pid != std::process::id() as i32 && !pid_alive(pid) {
                        let _ = std::fs::remove_dir_all(e.path());
                    }
                }
            }
        }
        let dir = base.join(format!("ompcluster-tests-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("cannot create the tests' work directory");
        dir
    })
}

type Slot = Arc<OnceLock<Result<PathBuf, String>>>;

/// Compile `programs/<src>` (C with clang-16, C++ with clang++-16) for offloading; each program
/// is compiled once per test binary run. Panics with the compiler's output if it fails.
pub fn compile(src: &str) -> PathBuf {
    compile_with(src, "clang", OFFLOAD_FLAGS)
}

/// Compile `programs/<src>` with gcc, without offloading (for the launcher's error path).
pub fn compile_plain(src: &str) -> PathBuf {
    compile_with(src, "gcc", &["-O2"])
}

fn compile_with(src: &str, kind: &str, flags: &[&str]) -> PathBuf {
    cached(format!("{kind}:{src}"), || {
        let path = programs_dir().join(src);
        if !path.is_file() {
            return Err(format!("no such program {}", path.display()));
        }
        let compiler = match (kind, is_cxx(&path)) {
            ("gcc", false) => "gcc",
            ("gcc", true) => "g++",
            (_, false) => "clang-16",
            (_, true) => "clang++-16",
        };
        let stem = path.file_stem().unwrap().to_string_lossy();
        let out = work_dir().join(if kind == "gcc" { format!("{stem}-plain") } else { stem.into_owned() });
        let o = Command::new(compiler)
            .args(flags)
            .arg(&path)
            .arg("-o")
            .arg(&out)
            .output()
            .map_err(|e| format!("cannot run {compiler}: {e}"))?;
        if !o.status.success() {
            return Err(format!(
                "{compiler} {} failed ({}):\n{}{}",
                path.display(),
                o.status,
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        Ok(out)
    })
}

/// Whether `src` is C++ (by its extension).
fn is_cxx(src: &Path) -> bool {
    matches!(src.extension().and_then(|e| e.to_str()), Some("cpp" | "cc" | "cxx"))
}

/// A compiler, through the project's compile wrappers (`ompcluster-cc`, `ompcluster-cxx`,
/// `ompcluster-fortran`, beside the launcher).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Toolchain {
    /// clang-16 / clang++-16 (the wrappers' default).
    Clang16,
    /// clang-19 / clang++-19.
    Clang19,
    /// flang-new-19 (the Fortran wrapper's default).
    Flang19,
}

impl Toolchain {
    /// For file names: `clang16`, `clang19`, `flang19`.
    pub fn tag(self) -> &'static str {
        match self {
            Toolchain::Clang16 => "clang16",
            Toolchain::Clang19 => "clang19",
            Toolchain::Flang19 => "flang19",
        }
    }

    /// The wrapper for a source file and the variable naming its compiler, with its value.
    fn wrapper(self, src: &Path) -> (&'static str, &'static str, &'static str) {
        match (self, is_cxx(src)) {
            (Toolchain::Flang19, _) => ("ompcluster-fortran", "OMPCLUSTER_FC", "flang-new-19"),
            (Toolchain::Clang16, false) => ("ompcluster-cc", "OMPCLUSTER_CC", "clang-16"),
            (Toolchain::Clang16, true) => ("ompcluster-cxx", "OMPCLUSTER_CXX", "clang++-16"),
            (Toolchain::Clang19, false) => ("ompcluster-cc", "OMPCLUSTER_CC", "clang-19"),
            (Toolchain::Clang19, true) => ("ompcluster-cxx", "OMPCLUSTER_CXX", "clang++-19"),
        }
    }
}

/// Compile `path` with `tc` through the project's wrapper into the work directory as
/// `<stem>-<tag>` (once per test binary run; `extra` flags after the source). Panics with the
/// compiler's output if it fails (a missing compiler says so: `scripts/setup.sh` installs
/// clang-19 and flang-19).
pub fn compile_source_by(path: &Path, tc: Toolchain, extra: &[&str]) -> PathBuf {
    let key = format!("{}:{}:{}", tc.tag(), path.display(), extra.join(" "));
    let (wrapper, var, compiler) = tc.wrapper(path);
    let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
    let out = work_dir().join(format!("{stem}-{}", tc.tag()));
    let wrapper_path = launcher().with_file_name(wrapper);
    cached(key, move || {
        if !wrapper_path.exists() {
            return Err(format!("{} is missing: build it first with cargo build --release", wrapper_path.display()));
        }
        // In the work directory: flang writes its `.mod` files into the current one.
        let o = Command::new(&wrapper_path)
            .current_dir(work_dir())
            .env(var, compiler)
            .arg("-O2")
            .arg(path)
            .args(extra)
            .arg("-o")
            .arg(&out)
            .output()
            .map_err(|e| format!("cannot run {}: {e}", wrapper_path.display()))?;
        if !o.status.success() {
            return Err(format!(
                "{wrapper} ({var}={compiler}) {} failed ({}):\n{}{}",
                path.display(),
                o.status,
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ));
        }
        Ok(out)
    })
}

/// [`compile_source_by`] for `programs/<src>`.
pub fn compile_by(src: &str, tc: Toolchain) -> PathBuf {
    compile_source_by(&programs_dir().join(src), tc, &[])
}

/// The example `examples/<name>/<name>.c` compiled with `tc` (with `-lm`).
pub fn example_by(name: &str, tc: Toolchain) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../examples/{name}/{name}.c"));
    compile_source_by(&src, tc, &["-lm"])
}

/// Run `make` once per `key` for this test binary run (concurrent callers wait for the first).
fn cached(key: String, make: impl FnOnce() -> Result<PathBuf, String>) -> PathBuf {
    static CACHE: OnceLock<Mutex<HashMap<String, Slot>>> = OnceLock::new();
    let slot = {
        let mut m = CACHE.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
        m.entry(key).or_default().clone()
    };
    match slot.get_or_init(make) {
        Ok(p) => p.clone(),
        Err(e) => panic!("{e}"),
    }
}

/// Lock held while a job runs (one job at a time).
pub fn run_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// A running `ompcluster-run` job, started in its own process group, every process of it
/// marked by [`JOB_MARKER_VAR`]; killed with everything so marked when dropped.
///
/// Not in a session of its own: with the kernel's autogroup scheduling (on by default), a new
/// session is a scheduling group of its own, and a job that keeps both cores busy then starved
/// the test's threads (in the group of the test binary, with the compiler runs of other tests)
/// for seconds: a kill meant for 0.7 s after the start landed at 5.4 s, after the job's end.
pub struct Job {
    child: Option<Child>,
    pid: i32,
    marker: String,
    started: Instant,
    out: Option<JoinHandle<Vec<u8>>>,
    err: Option<JoinHandle<Vec<u8>>>,
    _lock: Option<MutexGuard<'static, ()>>,
}

fn drain(mut r: impl Read + Send + 'static) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = r.read_to_end(&mut v);
        v
    })
}

/// Field `n` after the command name of /proc/PID/stat (0: state, 1: ppid, 2: pgrp, 3: session).
fn stat_field(pid: i32, n: usize) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces: fields follow the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(n)?.parse().ok()
}

/// Parent pid of `pid` (from /proc/PID/stat), if it exists.
pub fn ppid(pid: i32) -> Option<i32> {
    stat_field(pid, 1)
}

fn all_pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .map(|d| d.flatten().filter_map(|e| e.file_name().to_string_lossy().parse().ok()).collect())
        .unwrap_or_default()
}

/// The variable that marks every process of a job ([`Job::marker`]): the launcher, mpirun and
/// the ranks inherit it, orphaned or not (mpirun puts every rank in its own process group).
pub const JOB_MARKER_VAR: &str = "OMPC_TESTS_JOB";

/// Live processes (zombies included) whose environment has [`JOB_MARKER_VAR`] = `marker`.
pub fn job_members(marker: &str) -> Vec<i32> {
    all_pids().into_iter().filter(|&p| proc_env(p, JOB_MARKER_VAR).as_deref() == Some(marker)).collect()
}

/// The start-up stage a rank's progress file holds once its runtime started (the plugin's
/// `startup::Stage::Started`).
pub const STARTED_STAGE: u8 = 8;

/// All live descendants of `pid` (children, grandchildren, ...).
pub fn descendants(pid: i32) -> Vec<i32> {
    let all: Vec<(i32, i32)> = all_pids().into_iter().filter_map(|p| Some((p, ppid(p)?))).collect();
    let mut out = Vec::new();
    let mut frontier = vec![pid];
    while let Some(p) = frontier.pop() {
        for &(c, pp) in &all {
            if pp == p && !out.contains(&c) {
                out.push(c);
                frontier.push(c);
            }
        }
    }
    out
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rfind(')').map(|i| s[i + 2..].starts_with('Z') || s[i + 2..].starts_with('X')))
        .unwrap_or(true)
}

/// The value of `var` in the environment of process `pid`.
pub fn proc_env(pid: i32, var: &str) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|&b| b == 0).find_map(|kv| {
        let kv = String::from_utf8_lossy(kv);
        kv.strip_prefix(var).and_then(|r| r.strip_prefix('=')).map(str::to_owned)
    })
}

/// Where libomp registers process `pid` of this user (`__kmp_register_library_startup`):
/// removed as libomp shuts down, left by a process that is killed.
pub fn libomp_registration(pid: i32) -> PathBuf {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    PathBuf::from(format!("/dev/shm/__KMP_REGISTERED_LIB_{pid}_{uid}"))
}

/// The executable of process `pid`.
pub fn proc_exe(pid: i32) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/exe")).ok()
}

impl Job {
    /// Start `ompcluster-run -np <np> <prog> <args>` with `envs` added to a copy of this
    /// process's environment from which every inherited `OMPCLUSTER_*` variable was removed.
    /// Holds the global run lock until the job is waited for or dropped.
    pub fn spawn(np: u32, prog: &Path, args: &[&str], envs: &[(&str, &str)]) -> Job {
        let lock = run_lock();
        Self::start(np, &[], prog, args, envs, Some(lock))
    }

    /// Like [`Job::spawn`], with options for the launcher (`--hostfile`, `--mpirun-arg=...`).
    pub fn spawn_with(np: u32, options: &[String], prog: &Path, args: &[&str], envs: &[(&str, &str)]) -> Job {
        let lock = run_lock();
        Self::start(np, options, prog, args, envs, Some(lock))
    }

    /// Like [`Job::spawn`], without taking the run lock: a second job started while a job of
    /// the same test runs (that job holds the lock).
    pub fn spawn_beside(np: u32, prog: &Path, args: &[&str], envs: &[(&str, &str)]) -> Job {
        Self::start(np, &[], prog, args, envs, None)
    }

    fn start(np: u32, options: &[String], prog: &Path, args: &[&str], envs: &[(&str, &str)], lock: Option<MutexGuard<'static, ()>>) -> Job {
        let launcher = launcher();
        let mut cmd = Command::new(&launcher);
        cmd.arg("-np").arg(np.to_string()).args(options).arg(prog).args(args);
        // The test's own settings only; but the MPI launcher, and the plugin (to run a test
        // against another build: a new test must fail on the build before it).
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("OMPCLUSTER_") && k != "OMPCLUSTER_MPIRUN" && k != "OMPCLUSTER_PLUGIN" {
                cmd.env_remove(k);
            }
        }
        cmd.envs(envs.iter().copied());
        static JOBS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let marker = format!("{}-{}", std::process::id(), JOBS.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        cmd.env(JOB_MARKER_VAR, &marker);
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        // SAFETY: setpgid is async-signal-safe and touches no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setpgid(0, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {}: {e}", launcher.display()));
        let out = drain(child.stdout.take().unwrap());
        let err = drain(child.stderr.take().unwrap());
        Job {
            pid: child.id() as i32,
            marker,
            child: Some(child),
            started: Instant::now(),
            out: Some(out),
            err: Some(err),
            _lock: lock,
        }
    }

    /// The launcher's pid (also its process group id).
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The value of [`JOB_MARKER_VAR`] in this job's processes.
    pub fn marker(&self) -> &str {
        &self.marker
    }

    /// Time since the job started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// The MPI ranks of this job that run `prog`: (rank, pid) pairs sorted by rank.
    pub fn ranks(&self, prog: &Path) -> Vec<(u32, i32)> {
        let want = std::fs::canonicalize(prog).unwrap_or_else(|_| prog.to_path_buf());
        let mut v: Vec<(u32, i32)> = descendants(self.pid)
            .into_iter()
            .filter(|&p| proc_exe(p).as_deref() == Some(want.as_path()))
            .filter_map(|p| Some((proc_env(p, "OMPI_COMM_WORLD_RANK")?.parse().ok()?, p)))
            .collect();
        v.sort();
        v
    }

    /// The job's ranks running `prog` once each of the `n` finished the runtime's start-up
    /// (MPI's start, the collectives, the failure detector): from then on a fault is the
    /// detector's to notice, so faults timed from here hit the program's own run whatever the
    /// start-up took (a loaded machine takes seconds over `MPI_Init`). Each rank records its
    /// start-up stage in a progress file beside the launcher's status file (the plugin's
    /// `startup.rs`: "PID STAGE", [`STARTED_STAGE`] once done). Returns the ranks found if the
    /// job ended first; panics after `timeout`.
    pub fn started_ranks(&mut self, prog: &Path, n: usize, timeout: Duration) -> Vec<(u32, i32)> {
        let t0 = Instant::now();
        loop {
            let ranks = self.ranks(prog);
            let started = |&(rank, pid): &(u32, i32)| {
                let Some(status) = proc_env(pid, "OMPCLUSTER_EXIT_STATUS_FILE") else { return false };
                let file = Path::new(&status).with_file_name(format!("rank-{rank}"));
                std::fs::read_to_string(file).ok().and_then(|t| t.split_whitespace().nth(1)?.parse::<u8>().ok()) == Some(STARTED_STAGE)
            };
            if ranks.len() == n && ranks.iter().all(started) {
                return ranks;
            }
            if self.wait_timeout(Duration::ZERO).is_some() {
                return ranks;
            }
            assert!(t0.elapsed() < timeout, "the {n} ranks did not finish their start-up within {timeout:?}: {ranks:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Wait until the job ends; `None` if it is still running after `timeout`.
    pub fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        let child = self.child.as_mut().expect("job already waited for");
        loop {
            if let Some(st) = child.try_wait().expect("cannot wait for the launcher") {
                return Some(st);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kill the launcher and everything it started (its descendants and every process marked
    /// as this job's) with SIGKILL, and remove the libomp registrations in `/dev/shm` of the
    /// ranks killed (the launcher, killed too, cannot).
    pub fn kill(&mut self) {
        let mut killed = Vec::new();
        for _ in 0..3 {
            let mut procs = descendants(self.pid);
            procs.extend(job_members(&self.marker).into_iter().filter(|&p| p != self.pid));
            procs.sort_unstable();
            procs.dedup();
            // Zombies need no killing (and in a container whose init does not reap, they stay).
            procs.retain(|&p| !is_zombie(p));
            for &p in &procs {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe { libc::kill(p, libc::SIGKILL) };
            }
            // SAFETY: as above; a negative pid names the process group we created.
            unsafe { libc::kill(-self.pid, libc::SIGKILL) };
            if procs.is_empty() {
                break;
            }
            killed.extend(procs);
            std::thread::sleep(Duration::from_millis(20));
        }
        // Once reaped (a moment: their parents died with them), no process has their pids.
        let deadline = Instant::now() + Duration::from_secs(2);
        while killed.iter().any(|p| Path::new(&format!("/proc/{p}")).exists()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        for p in killed.into_iter().filter(|p| !Path::new(&format!("/proc/{p}")).exists()) {
            let _ = std::fs::remove_file(libomp_registration(p));
        }
    }

    /// The threads' stacks of the job's processes (its ranks, and any daemon they started),
    /// taken with gdb before a hung job is killed, so that a hang seen once (in CI, say) can be
    /// diagnosed. Bounded: gdb gets 30 s per process; without gdb, says so.
    fn stacks(&self) -> String {
        let mut procs = descendants(self.pid);
        procs.extend(job_members(&self.marker));
        procs.sort_unstable();
        procs.dedup();
        procs.retain(|&p| !is_zombie(p));
        let mut out = String::new();
        for p in procs {
            let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
            let rank = proc_env(p, "OMPI_COMM_WORLD_RANK").map(|r| format!(" rank {r}")).unwrap_or_default();
            out += &format!("=== pid {p} ({}){rank}\n", comm.trim());
            if !matches!(comm.trim(), "mpirun" | "prterun" | "orterun" | "ompcluster-run") {
                match Command::new("timeout")
                    .args(["30", "gdb", "-p", &p.to_string(), "-batch", "-nx", "-ex", "thread apply all bt 30"])
                    .stdin(Stdio::null())
                    .output()
                {
                    Ok(o) => {
                        let text = String::from_utf8_lossy(&o.stdout);
                        let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("Thread") || l.starts_with('#')).take(400).collect();
                        if lines.is_empty() {
                            out += "(gdb printed no stack)\n";
                        }
                        for l in lines {
                            out += l;
                            out.push('\n');
                        }
                    }
                    Err(e) => out += &format!("(no stacks: cannot run gdb: {e})\n"),
                }
            }
        }
        out
    }

    fn collect(&mut self, status: ExitStatus) -> Output {
        // Output pipes may still be held by orphaned grandchildren: don't block on them.
        let join = |h: Option<JoinHandle<Vec<u8>>>| -> Vec<u8> {
            let h = match h {
                Some(h) => h,
                None => return Vec::new(),
            };
            let deadline = Instant::now() + Duration::from_secs(5);
            while !h.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            if h.is_finished() {
                h.join().unwrap_or_default()
            } else {
                b"<output still held open by a leftover process>".to_vec()
            }
        };
        let stdout = join(self.out.take());
        let stderr = join(self.err.take());
        self.child = None;
        self._lock = None;
        Output { status, stdout, stderr }
    }

    /// Wait at most `timeout` for the job; on timeout kill it and panic "timed out" with what
    /// it printed.
    pub fn wait(mut self, timeout: Duration) -> Output {
        match self.wait_timeout(timeout) {
            Some(st) => {
                // A process of the job that outlives its launcher (a moment later) is a bug of
                // the runtime: killed here, and the test that left it fails.
                let alive = || job_members(&self.marker).into_iter().filter(|&p| !is_zombie(p)).collect::<Vec<_>>();
                let t0 = Instant::now();
                while !alive().is_empty() && t0.elapsed() < Duration::from_secs(3) {
                    std::thread::sleep(Duration::from_millis(50));
                }
                let left: Vec<String> = alive()
                    .into_iter()
                    .map(|p| {
                        let name = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
                        let rank = proc_env(p, "OMPI_COMM_WORLD_RANK").map(|r| format!(" rank {r}")).unwrap_or_default();
                        format!("pid {p} ({}{rank})", name.trim())
                    })
                    .collect();
                if !left.is_empty() {
                    self.kill();
                }
                let o = self.collect(st);
                assert!(
                    left.is_empty(),
                    "processes of the job outlived its launcher by 3 s: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
                    left.join(", "),
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                );
                o
            }
            None => {
                let stacks = self.stacks();
                self.kill();
                let st = self.child.as_mut().unwrap().wait().expect("cannot reap the launcher");
                let o = self.collect(st);
                panic!(
                    "timed out after {:?}: the job was killed\n--- stdout ---\n{}\n--- stderr ---\n{}\n--- where its processes were ---\n{}",
                    timeout,
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr),
                    stacks
                );
            }
        }
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            self.kill();
            let _ = c.wait();
        }
    }
}

/// Run `ompcluster-run -np <np> <prog> <args>` with `envs` under [`DEFAULT_TIMEOUT`].
pub fn run(np: u32, prog: &Path, args: &[&str], envs: &[(&str, &str)]) -> Output {
    run_timeout(np, prog, args, envs, DEFAULT_TIMEOUT)
}

/// [`run`] with an explicit timeout.
pub fn run_timeout(np: u32, prog: &Path, args: &[&str], envs: &[(&str, &str)], timeout: Duration) -> Output {
    Job::spawn(np, prog, args, envs).wait(timeout)
}

/// The run report written by the plugin (`OMPCLUSTER_REPORT`): the plugin's own types.
pub use run_report::Report;

/// Run with `OMPCLUSTER_REPORT` pointing to a fresh file and return the output and the report
/// (panics with the output if the job wrote no readable report).
pub fn run_with_report(np: u32, prog: &Path, args: &[&str], envs: &[(&str, &str)]) -> (Output, Report) {
    let dir = tempfile::tempdir_in(work_dir()).expect("cannot create a temporary directory");
    let path = dir.path().join("report.json");
    let path_s = path.to_string_lossy().into_owned();
    let mut all: Vec<(&str, &str)> = envs.to_vec();
    all.push(("OMPCLUSTER_REPORT", &path_s));
    let out = run(np, prog, args, &all);
    match Report::read(&path) {
        Ok(r) => (out, r),
        Err(e) => panic!("{e}\n{}", describe(&out)),
    }
}

/// The exit status, stdout and stderr of a run, for assertion messages.
pub fn describe(o: &Output) -> String {
    format!(
        "status: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Stdout as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Stderr as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Assert that a run exited 0 and printed a line containing `PASS`.
#[track_caller]
pub fn assert_pass(o: &Output) {
    let passed = stdout(o).lines().any(|l| l.contains("PASS"));
    assert!(o.status.success() && passed, "expected exit 0 and PASS\n{}", describe(o));
}

/// The `-np` values every program is run with: 1, 2 and 3 workers.
pub const NPS: [u32; 3] = [2, 3, 4];

/// Compile `src` and run it with 1, 2 and 3 workers, asserting exit 0 and PASS each time
/// (all three runs are made; the panic lists every failed one).
#[track_caller]
pub fn check_program(src: &str, args: &[&str], envs: &[(&str, &str)]) {
    check_runs(src, args, &NPS.map(|np| (np, envs.to_vec())));
}

/// [`check_program`], then again with 2 and 3 workers under the round-robin scheduler, which
/// puts consecutive regions on different workers (so data moves worker -> worker).
#[track_caller]
pub fn check_program_both(src: &str, args: &[&str]) {
    let rr = ("OMPCLUSTER_SCHEDULER", "roundrobin");
    let mut runs: Vec<(u32, Vec<(&str, &str)>)> = NPS.iter().map(|&np| (np, vec![])).collect();
    runs.push((3, vec![rr]));
    runs.push((4, vec![rr]));
    check_runs(src, args, &runs);
}

#[track_caller]
fn check_runs(src: &str, args: &[&str], runs: &[(u32, Vec<(&str, &str)>)]) {
    let prog = compile(src);
    let mut failed = Vec::new();
    for (np, envs) in runs {
        let o = run(*np, &prog, args, envs);
        let passed = stdout(&o).lines().any(|l| l.contains("PASS"));
        if !(o.status.success() && passed) {
            failed.push(format!("=== {src} -np {np} {envs:?}: expected exit 0 and PASS\n{}", describe(&o)));
        }
    }
    assert!(failed.is_empty(), "{} of {} runs failed\n{}", failed.len(), runs.len(), failed.join("\n"));
}

/// The checkpoint store the checkpoint tests use, from `OMPCLUSTER_TEST_STORE`: `embedded`
/// (the default), `veloc-sync` or `veloc-async` (these need the plugin built with the VeloC
/// store: `scripts/test-veloc.sh` builds it and runs the checkpoint tests with each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TestStore {
    /// The embedded store.
    Embedded,
    /// The VeloC store, with `mode = sync` or `mode = async`.
    Veloc(&'static str),
}

/// See [`TestStore`]. Panics on an unknown value.
pub fn test_store() -> TestStore {
    match std::env::var("OMPCLUSTER_TEST_STORE").as_deref() {
        Err(_) | Ok("") | Ok("embedded") => TestStore::Embedded,
        Ok("veloc-sync") => TestStore::Veloc("sync"),
        Ok("veloc-async") => TestStore::Veloc("async"),
        Ok(v) => panic!("OMPCLUSTER_TEST_STORE={v}: expected embedded, veloc-sync or veloc-async"),
    }
}

/// The scratch directory the checkpoint settings of [`ckpt_env`] use for `dir`.
pub fn ckpt_scratch(dir: &Path) -> PathBuf {
    dir.with_extension("scratch")
}

/// Settings that checkpoint into the persistent directory `dir` every `interval` seconds,
/// with scratch in [`ckpt_scratch`]`(dir)`, through the store under test (for VeloC, a
/// configuration file naming both is written into the work directory).
pub fn ckpt_env(dir: &Path, interval: &str) -> Vec<(String, String)> {
    let mut e = vec![("OMPCLUSTER_CP_INTERVAL".to_string(), interval.to_string())];
    match test_store() {
        TestStore::Embedded => {
            e.push(("OMPCLUSTER_CP_PERSISTENT".into(), dir.display().to_string()));
            e.push(("OMPCLUSTER_CP_SCRATCH".into(), ckpt_scratch(dir).display().to_string()));
        }
        TestStore::Veloc(mode) => {
            let cfg = veloc_config(&ckpt_scratch(dir), dir, mode);
            e.push(("OMPCLUSTER_CP_USEVELOC".into(), "1".into()));
            e.push(("OMPCLUSTER_CP_EXECCFG".into(), cfg.display().to_string()));
        }
    }
    e
}

/// Writes a VeloC configuration with these directories and mode into the work directory.
pub fn veloc_config(scratch: &Path, persistent: &Path, mode: &str) -> PathBuf {
    let f = tempfile::Builder::new()
        .prefix("veloc-")
        .suffix(".cfg")
        .tempfile_in(work_dir())
        .expect("a VeloC configuration file");
    std::fs::write(
        f.path(),
        format!("scratch = {}\npersistent = {}\nmode = {mode}\n", scratch.display(), persistent.display()),
    )
    .expect("write the VeloC configuration");
    let (_, path) = f.keep().expect("keep the VeloC configuration");
    path
}

/// `(String, String)` settings as the `(&str, &str)` pairs [`Job::spawn`] takes.
pub fn env_refs(v: &[(String, String)]) -> Vec<(&str, &str)> {
    v.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect()
}

/// The matmul example (`examples/matmul/matmul.c`), compiled once per test binary run.
pub fn matmul_example() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| compile_example("matmul"))
}

/// The Cholesky example (`examples/cholesky/cholesky.c`), compiled once per test binary run.
pub fn cholesky_example() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| compile_example("cholesky"))
}

fn compile_example(name: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../examples/{name}/{name}.c"));
    let out = work_dir().join(name);
    let o = Command::new("clang-16").args(OFFLOAD_FLAGS).arg(&src).args(["-lm", "-o"]).arg(&out).output().expect("run clang-16");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    out
}

/// xorshift64*: reproducible moments from a seed ([`test_seed`]).
pub struct Rng(pub u64);

impl Rng {
    /// The next number.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [lo, hi).
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo)
    }
}

/// The seed of a test's random moments: `OMPC_TEST_SEED` if set, else drawn from the clock.
/// Printed with the variable that replays it, so that a failing moment can be run again.
pub fn test_seed(test: &str) -> u64 {
    let seed = std::env::var("OMPC_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        t.as_secs() ^ u64::from(t.subsec_nanos())
    });
    eprintln!("{test}: seed {seed} (OMPC_TEST_SEED={seed} replays it)");
    seed
}
