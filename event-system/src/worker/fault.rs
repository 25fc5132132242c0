//! Faults in device code: a region that dereferences a bad pointer, divides by zero or calls
//! `abort()` must end the program with one clear message, not kill the worker (which recovery
//! would then take for a node failure and re-run the region on every survivor in turn).
//!
//! Design note (concurrency, signals). While a kernel runs, the thread running it is entered
//! in [`KERNELS`] (its thread id and the EXECUTE's tag). A handler for SIGSEGV, SIGBUS, SIGILL,
//! SIGFPE and SIGABRT decides with async-signal-safe steps only (`gettid`, atomics, `write`):
//! * a thread running a kernel, or a thread that is not the runtime's (libomp's team threads
//!   run the region's parallel parts) while some kernel runs: the fault is the region's. The
//!   handler writes (tag, signal, address) to a pipe and parks the thread for good; the
//!   reporter thread answers the EXECUTE with an error naming the fault, then ends the worker
//!   (after a grace period in which the head normally ends the job itself).
//! * anything else (the runtime's own threads outside kernels): the default action, as before.
//!
//! The handler takes no lock and allocates nothing. Thread ids of the runtime's own threads are
//! in [`RUNTIME`] (fixed arrays: no allocation in the handler).

use crate::comm::{Comm, Liveness};
use crate::protocol::Reply;
use crate::HEAD;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Signals a region's code can raise by faulting.
const SIGNALS: [i32; 5] = [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE, libc::SIGABRT];

/// Threads running a kernel: `tid << 32 | tag` (0: free slot).
static KERNELS: [AtomicU64; 128] = [const { AtomicU64::new(0) }; 128];

/// Thread ids of the runtime's own threads (0: free slot).
static RUNTIME: [AtomicI32; 1024] = [const { AtomicI32::new(0) }; 1024];

/// Write end of the pipe to the reporter thread (-1: not installed).
static PIPE: AtomicI32 = AtomicI32::new(-1);

/// How long the reporter waits, after answering, for the head to end the job before it ends
/// this worker itself.
const GRACE: Duration = Duration::from_secs(1);

fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions and is async-signal-safe.
    unsafe { libc::gettid() }
}

/// Install the handlers and start the reporter, which answers on `comm`. Called once per
/// worker, on the thread that becomes its first runtime thread.
pub(crate) fn install(comm: Arc<Comm>, live: Arc<dyn Liveness>) -> std::io::Result<()> {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` has room for the two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let read_fd = fds[0];
    std::thread::Builder::new().name("ompc-fault".into()).spawn(move || report(read_fd, &comm, live.as_ref()))?;
    PIPE.store(fds[1], Ordering::Release);
    for sig in SIGNALS {
        // SAFETY: a zeroed sigaction is valid; the handler is an `extern "C"` function of the
        // SA_SIGINFO signature that only does async-signal-safe things.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_fault as *const () as usize;
            // On the thread's alternate stack where it has one: a stack overflow leaves no room
            // on the thread's own stack.
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut sa.sa_mask);
            if libc::sigaction(sig, &sa, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    runtime_thread();
    Ok(())
}

/// Mark the calling thread as one of the runtime's own (its faults are the runtime's).
pub(crate) fn runtime_thread() {
    let tid = gettid();
    // Past 1024 runtime threads the rest count as foreign: a fault of theirs while a kernel
    // runs is taken for the region's (the worker stops either way).
    let _ = RUNTIME.iter().any(|s| s.compare_exchange(0, tid, Ordering::AcqRel, Ordering::Acquire).is_ok());
}

/// The calling runtime thread ends.
pub(crate) fn runtime_thread_ends() {
    let tid = gettid();
    for s in &RUNTIME {
        let _ = s.compare_exchange(tid, 0, Ordering::AcqRel, Ordering::Acquire);
    }
}

/// While alive, the calling thread runs the kernel of the EXECUTE with tag `tag`.
pub(crate) struct InKernel(Option<usize>);

impl InKernel {
    pub(crate) fn enter(tag: i32) -> Self {
        thread_local! {
            // gettid is a system call (glibc does not cache it), and this runs once per region.
            static TID: i32 = gettid();
        }
        let v = (u64::from(TID.with(|t| *t) as u32) << 32) | u64::from(tag as u32);
        InKernel(KERNELS.iter().position(|s| s.compare_exchange(0, v, Ordering::AcqRel, Ordering::Acquire).is_ok()))
    }
}

impl Drop for InKernel {
    fn drop(&mut self) {
        if let Some(i) = self.0 {
            KERNELS[i].store(0, Ordering::Release);
        }
    }
}

/// Whose fault is it: the tag of the region it belongs to, if any (see the module's note).
fn region_of(tid: i32) -> Option<i32> {
    let mut any = None;
    for s in &KERNELS {
        let v = s.load(Ordering::Acquire);
        if v == 0 {
            continue;
        }
        if (v >> 32) as i32 == tid {
            return Some(v as u32 as i32);
        }
        any.get_or_insert(v as u32 as i32);
    }
    if RUNTIME.iter().any(|s| s.load(Ordering::Acquire) == tid) {
        return None;
    }
    any
}

extern "C" fn on_fault(sig: i32, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    let fd = PIPE.load(Ordering::Acquire);
    let tag = if fd >= 0 { region_of(gettid()) } else { None };
    let Some(tag) = tag else {
        // Not a region's fault: the default action (the fault happens again on return; a
        // raised signal is raised again).
        // SAFETY: resetting a disposition and raising are async-signal-safe.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            if sig == libc::SIGABRT || (!info.is_null() && (*info).si_code <= 0) {
                libc::raise(sig);
            }
        }
        return;
    };
    // SAFETY: `info` is the kernel's siginfo for this signal (SA_SIGINFO).
    let addr = if info.is_null() { 0 } else { (unsafe { (*info).si_addr() }) as u64 };
    let mut msg = [0u8; 16];
    msg[..4].copy_from_slice(&tag.to_le_bytes());
    msg[4..8].copy_from_slice(&sig.to_le_bytes());
    msg[8..].copy_from_slice(&addr.to_le_bytes());
    // SAFETY: write of a local buffer to a pipe is async-signal-safe; 16 bytes are written
    // atomically (less than PIPE_BUF).
    unsafe { libc::write(fd, msg.as_ptr().cast(), msg.len()) };
    loop {
        // SAFETY: pause is async-signal-safe; this thread never returns into the faulting code.
        unsafe { libc::pause() };
    }
}

/// The reporter: answer each faulting region's EXECUTE, then end this worker.
fn report(fd: i32, comm: &Comm, live: &dyn Liveness) {
    let mut msg = [0u8; 16];
    loop {
        // SAFETY: reading into a local buffer from our own pipe.
        let n = unsafe { libc::read(fd, msg.as_mut_ptr().cast(), msg.len()) };
        if n != msg.len() as isize {
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        let tag = i32::from_le_bytes(msg[..4].try_into().expect("4 bytes"));
        let sig = i32::from_le_bytes(msg[4..8].try_into().expect("4 bytes"));
        let addr = u64::from_le_bytes(msg[8..].try_into().expect("8 bytes"));
        let what = match sig {
            libc::SIGSEGV => format!("SIGSEGV, an invalid memory access at {addr:#x}"),
            libc::SIGBUS => format!("SIGBUS, a bus error at {addr:#x}"),
            libc::SIGILL => format!("SIGILL, an illegal instruction at {addr:#x}"),
            libc::SIGFPE => format!("SIGFPE, an arithmetic error (such as an integer division by zero) at {addr:#x}"),
            libc::SIGABRT => "SIGABRT: it called abort() or failed an assertion".to_string(),
            s => format!("signal {s}"),
        };
        let reply = Reply::Error(format!(
            "the target region crashed in device code on this worker ({what}); the program's region is at fault, not the worker, so it is not run again elsewhere"
        ));
        if let Err(e) = comm.send_msg(HEAD, tag, &reply, live) {
            eprintln!("ompcluster worker {}: a region crashed ({what}) and the head could not be told: {e}", comm.rank());
        }
        std::thread::sleep(GRACE);
        eprintln!("ompcluster worker {}: stopping after a crash in device code ({what})", comm.rank());
        super::output::flush_stderr();
        // SAFETY: flushing C streams, then leaving at once: a thread of this process is parked
        // in the middle of the crashed region.
        unsafe {
            libc::fflush(std::ptr::null_mut());
            libc::_exit(70)
        }
    }
}
