//! One VeloC job per user and node, and the `veloc-backend` daemon that job owns.
//!
//! VeloC names what its clients and its engine share after the host and the user only
//! (`/dev/shm/veloc-ipc-*-<host>-<uid>` objects, or `/dev/shm/veloc-socket-<host>-<uid>`;
//! `/dev/shm/veloc-backend-ready-<uid>` for the async daemon), and an engine starting up
//! removes those objects. So two VeloC jobs of one user on one node would share one daemon
//! (the first job's, with the first job's configuration) or break each other's queues. The
//! store therefore lets one job at a time use VeloC on a node, and manages its daemon:
//!
//! * `<node dir>` is `/dev/shm/ompcluster-<uid>`, a directory private to the user (0700,
//!   checked: owner, mode, not a symbolic link);
//! * `veloc-init.lock`: held (exclusive `flock`) while a rank joins or leaves, so that the
//!   ranks of a node start their VeloC clients one at a time (in sync mode each starts an
//!   engine that first removes VeloC's IPC objects; one at a time, each keeps its own);
//! * `veloc-active.lock`: every rank of the job holds a shared `flock` on it while its
//!   store is open (the kernel drops it when the rank dies, however it dies);
//! * `veloc-job`: the job token of the job using VeloC on the node; a rank of another job
//!   finds the active lock held under another token and is refused;
//! * `veloc-backend.pid`: the daemon (pid and start time) the job started, in async mode.
//!   The first rank of a job on a node starts it (after checking that no daemon not started
//!   by ompcluster runs: it would serve the job with its own configuration); the last rank
//!   to leave stops it; a daemon left by a job whose ranks were all killed is stopped by the
//!   next job's first rank, or by `ompcluster-run` when the job ends ([`sweep`]).
//!
//! Design note (concurrency): all decisions are taken under `veloc-init.lock`, which ranks
//! hold for a bounded time (a rank stopped while holding it makes the others give up after
//! [`LOCK_WAIT`] with a message, rather than wait for ever).

#![cfg_attr(not(feature = "veloc"), allow(dead_code))]

use std::ffi::CStr;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::veloc_cfg::VelocMode;

/// How long a rank waits for another rank of its node to finish joining or leaving.
pub(crate) const LOCK_WAIT: Duration = Duration::from_secs(60);
/// How long the daemon gets to stop after SIGTERM.
const DAEMON_WAIT: Duration = Duration::from_secs(20);
/// How long one start of the daemon may take (it starts in milliseconds; it is tried twice).
const DAEMON_START: Duration = Duration::from_secs(10);

/// Where the node's files are.
#[derive(Clone, Debug)]
pub(crate) struct NodePaths {
    /// The user's private directory for these files.
    pub(crate) dir: PathBuf,
    /// VeloC's daemon pid file (`/dev/shm/veloc-backend-ready-<uid>`).
    pub(crate) ready_file: PathBuf,
    /// VeloC's IPC objects (`/dev/shm/veloc-ipc-*-<host>-<uid>`, `veloc-socket-*`): engines
    /// running in the ranks (sync mode) leave them behind; the last rank removes them.
    pub(crate) ipc_objects: Vec<PathBuf>,
}

impl NodePaths {
    /// The real locations, for this user.
    pub(crate) fn for_user() -> Self {
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        let mut host = [0u8; 256];
        // SAFETY: gethostname writes at most `host.len()` bytes into `host`.
        unsafe { libc::gethostname(host.as_mut_ptr().cast(), host.len()) };
        let host = CStr::from_bytes_until_nul(&host).map(|c| c.to_string_lossy().into_owned()).unwrap_or_default();
        let suffix = format!("{host}-{uid}");
        NodePaths {
            dir: PathBuf::from(format!("/dev/shm/ompcluster-{uid}")),
            ready_file: PathBuf::from(format!("/dev/shm/veloc-backend-ready-{uid}")),
            ipc_objects: ["veloc-ipc-buffer-", "sem.veloc-ipc-mutex-", "veloc-ipc-cond-", "veloc-socket-"]
                .iter()
                .map(|p| PathBuf::from(format!("/dev/shm/{p}{suffix}")))
                .collect(),
        }
    }
}

/// A process identified for good: pid and start time (clock ticks after boot), so that a
/// reused pid is never mistaken for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Proc {
    pub(crate) pid: u32,
    pub(crate) start: u64,
}

impl Proc {
    /// The process `pid` if it runs (not a zombie), with its command name.
    fn find(pid: u32) -> Option<(Proc, String)> {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (head, rest) = stat.rsplit_once(')')?;
        let comm = head.split_once('(')?.1.to_string();
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // After the command: state is field 3, start time field 22 (proc(5)).
        if fields.first() == Some(&"Z") || fields.first() == Some(&"X") {
            return None;
        }
        let start = fields.get(19)?.parse().ok()?;
        Some((Proc { pid, start }, comm))
    }

    fn alive(&self) -> bool {
        Proc::find(self.pid).is_some_and(|(p, _)| p == *self)
    }
}

/// This rank's membership in its job's use of VeloC on this node. Leaving (drop) releases
/// it; the last rank of the job on the node stops the daemon the job started.
#[derive(Debug)]
pub(crate) struct NodeSession {
    paths: NodePaths,
    active: File,
}

fn private_dir(dir: &Path) -> Result<(), String> {
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
    }
    let m = fs::symlink_metadata(dir).map_err(|e| format!("cannot inspect {}: {e}", dir.display()))?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if !m.is_dir() || m.uid() != me || m.mode() & 0o077 != 0 {
        return Err(format!(
            "{} is not a directory private to this user (owner {}, mode {:o}); remove it",
            dir.display(),
            m.uid(),
            m.mode() & 0o7777
        ));
    }
    Ok(())
}

fn open_file(path: &Path) -> Result<File, String> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))
}

/// `flock(op | LOCK_NB)`: whether it was granted.
fn try_flock(f: &File, op: libc::c_int) -> bool {
    // SAFETY: flock on a descriptor `f` owns; no memory is involved.
    unsafe { libc::flock(f.as_raw_fd(), op | libc::LOCK_NB) == 0 }
}

fn unlock(f: &File) {
    // SAFETY: as in `try_flock`.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_UN) };
}

/// The exclusive init lock, waited for at most `LOCK_WAIT`.
fn init_lock(paths: &NodePaths) -> Result<File, String> {
    let path = paths.dir.join("veloc-init.lock");
    let f = open_file(&path)?;
    let deadline = Instant::now() + LOCK_WAIT;
    while !try_flock(&f, libc::LOCK_EX) {
        if Instant::now() > deadline {
            return Err(format!(
                "another process held {} for {} s (a rank of this node stopped while starting VeloC?)",
                path.display(),
                LOCK_WAIT.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(f)
}

fn read_small(path: &Path) -> Option<String> {
    let mut s = String::new();
    File::open(path).ok()?.take(256).read_to_string(&mut s).ok()?;
    Some(s.trim().to_string())
}

fn write_small(path: &Path, text: &str) -> Result<(), String> {
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    f.write_all(text.as_bytes()).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// The daemon an ompcluster job started and recorded, if it still runs.
fn recorded_daemon(paths: &NodePaths) -> Option<Proc> {
    let text = read_small(&paths.dir.join("veloc-backend.pid"))?;
    let (pid, start) = text.split_once(' ')?;
    let p = Proc { pid: pid.parse().ok()?, start: start.parse().ok()? };
    p.alive().then_some(p)
}

/// The daemon VeloC's pid file names, if it runs and is a `veloc-backend`.
fn running_daemon(paths: &NodePaths) -> Option<Proc> {
    let bytes = fs::read(&paths.ready_file).ok()?;
    // VeloC writes the pid as a raw pid_t at offset 0.
    let pid = i32::from_ne_bytes(bytes.get(..4)?.try_into().ok()?);
    let (p, comm) = Proc::find(u32::try_from(pid).ok()?)?;
    (comm == "veloc-backend").then_some(p)
}

/// Stops `p` (SIGTERM: VeloC's daemon then removes its IPC objects and pid file), SIGKILL
/// if it has not ended after `DAEMON_WAIT`. SIGCONT follows SIGTERM: a stopped daemon would
/// otherwise keep it pending until SIGKILL.
fn stop(p: Proc) {
    for sig in [libc::SIGTERM, libc::SIGKILL] {
        if !p.alive() {
            return;
        }
        // SAFETY: signalling a process identified by pid and start time just now.
        unsafe {
            libc::kill(p.pid as libc::pid_t, sig);
            libc::kill(p.pid as libc::pid_t, libc::SIGCONT);
        }
        let deadline = Instant::now() + DAEMON_WAIT;
        while p.alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Whether a daemon of an earlier ompcluster job is still recorded; stops it and forgets it.
fn stop_leftover(paths: &NodePaths) {
    if let Some(p) = recorded_daemon(paths) {
        tracing::info!(pid = p.pid, "stopping the VeloC backend an earlier job left running");
        stop(p);
    }
    let _ = fs::remove_file(paths.dir.join("veloc-backend.pid"));
}

/// Finds `veloc-backend` as VeloC's client library will (`$VELOC_BIN/veloc-backend`, else
/// the `PATH`): the client runs it with `system()` and ends the process if that fails.
pub(crate) fn backend_binary() -> Result<PathBuf, String> {
    if let Some(d) = std::env::var_os("VELOC_BIN").filter(|v| !v.is_empty()) {
        let p = Path::new(&d).join("veloc-backend");
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("VELOC_BIN={} holds no veloc-backend", Path::new(&d).display()))
        };
    }
    std::env::var_os("PATH")
        .and_then(|path| std::env::split_paths(&path).map(|d| d.join("veloc-backend")).find(|p| p.is_file()))
        .ok_or_else(|| {
            "VeloC's async mode needs veloc-backend, found neither in $VELOC_BIN nor on the PATH: \
             set VELOC_BIN to the directory that holds it (ompcluster-run sets it from the VeloC \
             library the plugin was built with)"
                .to_string()
        })
}

/// Starts VeloC's daemon for `config_file` as VeloC's client would (`--disable-ec`), but
/// with no descriptor of this process open in it, and waits until it runs. A start that does
/// not finish `within` ([`DAEMON_START`]) is ended (the launcher and the daemon it forked) and
/// tried once more: VeloC's `start_main_loop` sets the flag its main thread waits for without
/// holding the mutex of that wait (`work_queue.cpp`), so a daemon can miss the wake-up and
/// never release its launcher. Seen once in CI (rank 1 of a job, async mode); the second
/// start is a new process and does not inherit the miss.
fn start_daemon(paths: &NodePaths, binary: &Path, config_file: &Path, within: Duration) -> Result<Proc, String> {
    match start_daemon_once(paths, binary, config_file, within) {
        Err(Start::Hung(first)) => {
            tracing::warn!("{first}; starting it once more");
            start_daemon_once(paths, binary, config_file, within).map_err(|e| match e {
                Start::Hung(second) => format!("{first}; and again: {second}"),
                Start::Failed(e) => e,
            })
        }
        other => other.map_err(|e| match e {
            Start::Hung(e) | Start::Failed(e) => e,
        }),
    }
}

/// Why a start of the daemon failed.
enum Start {
    /// It did not finish in time (its processes were ended).
    Hung(String),
    /// It failed in a way that another start would not change.
    Failed(String),
}

fn start_daemon_once(paths: &NodePaths, binary: &Path, config_file: &Path, within: Duration) -> Result<Proc, Start> {
    let mut cmd = Command::new(binary);
    cmd.arg(config_file).arg("--disable-ec").stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
    // SAFETY: between fork and exec only close_range (a system call, async-signal-safe) runs.
    // The daemon outlives this process: it must not keep this rank's MPI sockets and
    // lock files open (a peer would not see the rank's connections close when it dies).
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|e| Start::Failed(format!("cannot start {}: {e}", binary.display())))?;
    // The launcher process exits once the daemon it forked is ready.
    let deadline = Instant::now() + within;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                // The daemon is the launcher's child (in a session of its own): found while
                // the launcher still runs, ended with it, so that nothing of it outlives the
                // failed start.
                let launcher = child.id();
                let daemons = children_of(launcher);
                let waits: Vec<String> = daemons.iter().map(|&p| format!("pid {p}: {}", thread_waits(p))).collect();
                for &p in &daemons {
                    if let Some((d, _)) = Proc::find(p) {
                        stop_now(d);
                    }
                }
                let _ = child.kill();
                let _ = child.wait();
                let _ = fs::remove_file(&paths.ready_file);
                return Err(Start::Hung(format!(
                    "{} did not start within {} s (ended; the daemon it forked waited in: {})",
                    binary.display(),
                    within.as_secs_f64(),
                    if waits.is_empty() { "none found".to_string() } else { waits.join("; ") }
                )));
            }
        }
    };
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    if !status.success() {
        return Err(Start::Failed(format!(
            "{} {} failed ({status}): {}",
            binary.display(),
            config_file.display(),
            err.trim()
        )));
    }
    // The daemon writes its pid into VeloC's pid file right after releasing its launcher.
    loop {
        if let Some(p) = running_daemon(paths) {
            return Ok(p);
        }
        if Instant::now() > deadline {
            return Err(Start::Failed(format!(
                "{} reported success but no daemon is named in {}",
                binary.display(),
                paths.ready_file.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The processes whose parent is `pid` (from `/proc`).
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(dir) = fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| {
            fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|s| s.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok()))
                == Some(pid)
        })
        .collect()
}

/// Where each thread of `pid` waits in the kernel (`/proc/<pid>/task/*/wchan`), for messages.
fn thread_waits(pid: u32) -> String {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/task")) else { return "gone".into() };
    let mut waits: Vec<String> = dir
        .filter_map(|e| {
            let tid = e.ok()?.file_name();
            let wchan = fs::read_to_string(format!("/proc/{pid}/task/{}/wchan", tid.to_str()?)).ok()?;
            Some(if wchan.is_empty() || wchan == "0" { "running".to_string() } else { wchan })
        })
        .collect();
    waits.sort();
    format!("threads in {}", waits.join(", "))
}

/// Ends `p` at once (SIGKILL): a daemon that never finished starting has nothing to save.
/// Returns once it has ended (or after `DAEMON_WAIT`): a signal is only delivered when the
/// process next runs, and on a busy node that may be after the failed start has been retried.
fn stop_now(p: Proc) {
    if p.alive() {
        // SAFETY: signalling a process identified by pid and start time just now.
        unsafe { libc::kill(p.pid as libc::pid_t, libc::SIGKILL) };
    }
    let deadline = Instant::now() + DAEMON_WAIT;
    while p.alive() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
}

impl NodeSession {
    /// Joins (or, for the first rank of the job on this node, opens) the job's use of VeloC
    /// on this node, then runs `init_client` (VeloC's client initialisation) before any
    /// other rank of the node may start its own. In `VelocMode::Backend`, the first rank
    /// starts the daemon for `config_file`.
    pub(crate) fn join(
        paths: NodePaths,
        job: u64,
        mode: VelocMode,
        config_file: &Path,
        init_client: impl FnOnce() -> Result<(), String>,
    ) -> Result<NodeSession, String> {
        private_dir(&paths.dir)?;
        let init = init_lock(&paths)?;
        let active = open_file(&paths.dir.join("veloc-active.lock"))?;
        let job_file = paths.dir.join("veloc-job");
        if try_flock(&active, libc::LOCK_EX) {
            // No job uses VeloC on this node: this rank opens it for its job.
            stop_leftover(&paths);
            if let Some(p) = running_daemon(&paths) {
                unlock(&active);
                return Err(format!(
                    "a VeloC backend not started by ompcluster runs on this node (pid {}, named in {}); \
                     it would serve this job with its own configuration: stop it first (kill {})",
                    p.pid,
                    paths.ready_file.display(),
                    p.pid
                ));
            }
            // What a daemon or engine killed outright (SIGKILL: no clean-up) left behind: a
            // fresh daemon would wait on its stale IPC mutex, and the pid file names nobody.
            remove_ipc_objects(&paths);
            let _ = fs::remove_file(&paths.ready_file);
            let opened = (|| {
                write_small(&job_file, &job.to_string())?;
                if mode == VelocMode::Backend {
                    let p = start_daemon(&paths, &backend_binary()?, config_file, DAEMON_START)?;
                    write_small(&paths.dir.join("veloc-backend.pid"), &format!("{} {}", p.pid, p.start))?;
                }
                Ok(())
            })();
            if let Err(e) = opened {
                stop_leftover(&paths);
                let _ = fs::remove_file(&job_file);
                unlock(&active);
                return Err(e);
            }
            // Downgrade to shared: the other ranks of the job join.
            if !try_flock(&active, libc::LOCK_SH) {
                unlock(&active);
                return Err("cannot downgrade the VeloC node lock".into());
            }
        } else {
            let owner = read_small(&job_file).unwrap_or_default();
            if owner != job.to_string() || !try_flock(&active, libc::LOCK_SH) {
                return Err(format!(
                    "another job of this user uses VeloC on this node (see {}); VeloC serves one job per \
                     user and node (its daemon and IPC objects in /dev/shm are named after the user and \
                     host only): wait for it to end",
                    paths.dir.display()
                ));
            }
        }
        let session = NodeSession { paths, active };
        // Still under the init lock: this rank's client starts alone.
        let started = init_client();
        drop(init);
        started.map(|()| session)
    }
}

/// No rank of any job uses VeloC on the node any more (the caller holds the active lock
/// exclusively): stop the job's daemon, remove VeloC's IPC objects and the job token.
fn close_node(paths: &NodePaths) {
    stop_leftover(paths);
    remove_ipc_objects(paths);
    let _ = fs::remove_file(paths.dir.join("veloc-job"));
}

/// Removes VeloC's IPC objects of this user and host (files this user owns only). The caller
/// holds the active lock exclusively: no engine or daemon of an ompcluster job uses them.
fn remove_ipc_objects(paths: &NodePaths) {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    for p in &paths.ipc_objects {
        if fs::symlink_metadata(p).is_ok_and(|m| m.is_file() && m.uid() == me) {
            let _ = fs::remove_file(p);
        }
    }
}

impl Drop for NodeSession {
    fn drop(&mut self) {
        // Bounded: without the lock, leave without stopping anything (a later job or the
        // launcher's sweep stops the daemon).
        let init = init_lock(&self.paths).ok();
        unlock(&self.active);
        if init.is_some() && try_flock(&self.active, libc::LOCK_EX) {
            // The last rank of the job on this node.
            close_node(&self.paths);
            unlock(&self.active);
        }
    }
}

/// After a job: stops a VeloC daemon an ompcluster job started on this node if no rank of
/// any job uses VeloC here any more (its ranks were all killed before they could stop it).
/// Returns the pid stopped.
pub fn sweep() -> Option<u32> {
    sweep_at(&NodePaths::for_user())
}

pub(crate) fn sweep_at(paths: &NodePaths) -> Option<u32> {
    if !paths.dir.is_dir() {
        return None;
    }
    private_dir(&paths.dir).ok()?;
    let _init = init_lock(paths).ok()?;
    let active = open_file(&paths.dir.join("veloc-active.lock")).ok()?;
    if !try_flock(&active, libc::LOCK_EX) {
        return None; // a job is running
    }
    let stopped = recorded_daemon(paths).map(|p| p.pid);
    close_node(paths);
    unlock(&active);
    stopped
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(t: &tempfile::TempDir) -> NodePaths {
        NodePaths { dir: t.path().join("node"), ready_file: t.path().join("ready"), ipc_objects: vec![t.path().join("ipc")] }
    }

    #[test]
    fn a_start_that_hangs_is_ended_whole_and_tried_once_more() {
        let t = tempfile::tempdir().unwrap();
        let p = paths(&t);
        // A launcher that forks a child which never releases it, as VeloC's daemon does when
        // it misses its own start-up wake-up; it records each start and its child's pid.
        let bin = t.path().join("veloc-backend");
        fs::write(&bin, "#!/bin/sh\nsleep 1000 &\necho $! >> \"$(dirname \"$0\")/started\"\nwait\n").unwrap();
        fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
        let e = start_daemon(&p, &bin, &t.path().join("cfg"), Duration::from_millis(500)).unwrap_err();
        assert!(e.contains("did not start within 0.5 s") && e.contains("and again"), "{e}");
        assert!(e.contains("threads in"), "where the daemon waited: {e}");
        let started: Vec<u32> =
            fs::read_to_string(t.path().join("started")).unwrap().lines().map(|l| l.parse().unwrap()).collect();
        assert_eq!(started.len(), 2, "started twice");
        for pid in started {
            assert!(Proc::find(pid).is_none(), "the daemon {pid} of a failed start outlived it");
        }
    }

    #[test]
    fn one_job_per_node_ranks_of_it_join() {
        let t = tempfile::tempdir().unwrap();
        let p = paths(&t);
        let cfg = t.path().join("cfg");
        let mut order = Vec::new();
        let a = NodeSession::join(p.clone(), 7, VelocMode::InProcess, &cfg, || {
            order.push("a");
            Ok(())
        })
        .unwrap();
        let b = NodeSession::join(p.clone(), 7, VelocMode::InProcess, &cfg, || {
            order.push("b");
            Ok(())
        })
        .unwrap();
        assert_eq!(order, ["a", "b"]);
        let e = NodeSession::join(p.clone(), 8, VelocMode::InProcess, &cfg, || Ok(())).unwrap_err();
        assert!(e.contains("another job of this user uses VeloC"), "{e}");
        drop(a);
        // Job 7 still has a rank on the node.
        assert!(NodeSession::join(p.clone(), 8, VelocMode::InProcess, &cfg, || Ok(())).is_err());
        drop(b);
        let c = NodeSession::join(p.clone(), 8, VelocMode::InProcess, &cfg, || Ok(())).unwrap();
        fs::write(&p.ipc_objects[0], b"").unwrap();
        drop(c);
        assert!(!p.dir.join("veloc-job").exists());
        assert!(!p.ipc_objects[0].exists(), "the last rank removes VeloC's IPC objects");
    }

    #[test]
    fn a_failed_client_start_releases_the_node() {
        let t = tempfile::tempdir().unwrap();
        let p = paths(&t);
        let cfg = t.path().join("cfg");
        let e = NodeSession::join(p.clone(), 1, VelocMode::InProcess, &cfg, || Err("boom".into())).unwrap_err();
        assert_eq!(e, "boom");
        NodeSession::join(p, 2, VelocMode::InProcess, &cfg, || Ok(())).unwrap();
    }

    #[test]
    fn a_shared_node_directory_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let p = paths(&t);
        fs::DirBuilder::new().mode(0o755).create(&p.dir).unwrap();
        let e = NodeSession::join(p, 1, VelocMode::InProcess, &t.path().join("cfg"), || Ok(())).unwrap_err();
        assert!(e.contains("not a directory private to this user"), "{e}");
    }

    #[test]
    fn a_foreign_daemon_is_refused_and_a_recorded_one_is_stopped() {
        let t = tempfile::tempdir().unwrap();
        let p = paths(&t);
        private_dir(&p.dir).unwrap();
        // A process named veloc-backend: a copy of `sleep` under that name.
        let bin = t.path().join("veloc-backend");
        fs::copy("/bin/sleep", &bin).unwrap();
        let mut child = Command::new(&bin).arg("30").spawn().unwrap();
        let pid = child.id();
        fs::write(&p.ready_file, (pid as i32).to_ne_bytes()).unwrap();
        let cfg = t.path().join("cfg");
        let e = NodeSession::join(p.clone(), 1, VelocMode::InProcess, &cfg, || Ok(())).unwrap_err();
        assert!(e.contains(&format!("pid {pid}")), "{e}");
        // Recorded by an earlier job of ours: stopped by the sweep.
        let (me, _) = Proc::find(pid).unwrap();
        write_small(&p.dir.join("veloc-backend.pid"), &format!("{} {}", me.pid, me.start)).unwrap();
        assert_eq!(sweep_at(&p), Some(pid));
        let _ = child.wait();
        assert!(Proc::find(pid).is_none());
        assert_eq!(sweep_at(&p), None);
        NodeSession::join(p, 1, VelocMode::InProcess, &cfg, || Ok(())).unwrap();
    }
}
