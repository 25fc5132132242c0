//! The head's exit status for the launcher (`OMPCLUSTER_EXIT_STATUS_FILE`): "started" once the
//! cluster device runs on the head, then the program's exit status (or the signal it died of),
//! with the dead ranks the head could not reach. The runtime, the SIGTERM handler and the
//! crash handler write it; this module owns the file and what goes into it.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::OnceLock;

/// Where the head writes its exit status (`OMPCLUSTER_EXIT_STATUS_FILE`, set by the launcher:
/// in its recovery mode mpirun exits 0 whatever rank 0 did).
static STATUS_FILE: OnceLock<std::path::PathBuf> = OnceLock::new();

/// The status the program is exiting with (the head), for a bounded finalize.
static EXIT_STATUS: AtomicI32 = AtomicI32::new(0);

extern "C" {
    /// glibc: call `func(status, arg)` at `exit`, with the status `exit` was given.
    fn on_exit(func: extern "C" fn(libc::c_int, *mut libc::c_void), arg: *mut libc::c_void) -> libc::c_int;
}

extern "C" fn record_exit_status(status: libc::c_int, _arg: *mut libc::c_void) {
    EXIT_STATUS.store(status, Ordering::Release);
    let _ = std::panic::catch_unwind(|| write(status));
}

extern "C" fn note_exit_status(status: libc::c_int, _arg: *mut libc::c_void) {
    EXIT_STATUS.store(status, Ordering::Release);
}

/// Have the exit status noted at `exit` (see `runtime::device_in_use` for why this handler is
/// registered late).
pub(crate) fn note_at_exit() {
    // SAFETY: registering a handler that only stores a number; glibc calls it once, from
    // `exit`, with the exit status.
    unsafe { on_exit(note_exit_status, std::ptr::null_mut()) };
}

/// The status the program is exiting with, as `exit` gave it (0 before that).
pub(crate) fn noted() -> i32 {
    EXIT_STATUS.load(Ordering::Acquire)
}

/// Tell the launcher how the program ended (the head only).
pub(crate) fn write(status: i32) {
    if let Some(p) = STATUS_FILE.get() {
        // A second line names the dead ranks the head could not kill (frozen on another host):
        // the launcher need not wait for the job to end by itself (see `Cluster::shutdown`, which returns them).
        let unreachable = UNREACHABLE.lock().iter().map(|r| r.to_string()).collect::<Vec<_>>().join(" ");
        let text = if unreachable.is_empty() { format!("{status}\n") } else { format!("{status}\nunreachable {unreachable}\n") };
        let _ = std::fs::write(p, text);
    }
}

/// Tell the launcher that the job did not start (the head's start-up watchdog, `startup.rs`):
/// the program's status is `status`, and `ranks` are lost or may still be stuck (a line
/// `unreachable R...`: the launcher does not wait for them), the cause a line `startup`.
/// `report` (rank 0's lines) goes to `startup-report` beside it, for the launcher to print:
/// mpirun, itself stuck, may never pass on what rank 0 prints. Returns whether both were
/// written.
pub(crate) fn write_startup_failure(status: i32, ranks: &[i32], report: &str) -> bool {
    let Some(p) = std::env::var_os("OMPCLUSTER_EXIT_STATUS_FILE").filter(|p| !p.is_empty()) else { return false };
    let p = std::path::PathBuf::from(p);
    let Some(dir) = p.parent() else { return false };
    let ranks = ranks.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(" ");
    // The report first: the launcher reads it once it sees the status.
    std::fs::write(dir.join("startup-report"), report).is_ok() && std::fs::write(&p, format!("{status}\nunreachable {ranks}\nstartup\n")).is_ok()
}

/// Tell the launcher that the program ended by signal `sig` (the head only).
pub(crate) fn write_signal(sig: i32) {
    if let Some(p) = STATUS_FILE.get() {
        let _ = std::fs::write(p, format!("signal {sig}\n"));
    }
}

/// Dead ranks that may still be processes on other hosts, which the head cannot kill.
static UNREACHABLE: parking_lot::Mutex<Vec<i32>> = parking_lot::Mutex::new(Vec::new());

/// The workers are stopped; `ranks` are dead and out of the head's reach (for the status file).
pub(crate) fn note_unreachable(ranks: Vec<i32>) {
    *UNREACHABLE.lock() = ranks;
}

/// On the head: remember the program's exit status, and have it written where the launcher
/// reads it (if it asked).
pub(crate) fn keep() {
    if let Some(p) = std::env::var_os("OMPCLUSTER_EXIT_STATUS_FILE").filter(|p| !p.is_empty()) {
        // "started" until the exit status replaces it: the launcher learns that the cluster
        // device started on the head at all (if the plugin did not load, libomptarget runs
        // every region on each rank's own host, and nothing writes here).
        let _ = std::fs::write(&p, "started\n");
        if let Err(e) = crate::crash_status::install(std::path::Path::new(&p)) {
            eprintln!("ompcluster: cannot watch for the program's crash ({e}): a crash is reported as a plain failure");
        }
        let _ = STATUS_FILE.set(p.into());
    }
    // SAFETY: registering a handler that only stores a number and writes a small file;
    // glibc calls it once, from `exit`, with the exit status.
    unsafe { on_exit(record_exit_status, std::ptr::null_mut()) };
}
