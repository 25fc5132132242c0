//! The head's crash, told to the launcher. With fault tolerance on, mpirun runs in its recovery
//! mode and exits 0 whatever rank 0 did, so the launcher learns how the program ended from the
//! status file (`exit_status::keep`). A program that dies of a signal (libomptarget's
//! `abort` after a failed `present` check, a SIGSEGV in host code) never reaches `exit`: these
//! handlers write `signal N` there first, then hand the signal on to the handler they replaced
//! (Open MPI's, which prints a backtrace, or the default), and the launcher dies of the same
//! signal, as the program run alone would have.
//!
//! Only async-signal-safe calls in the handler: `ftruncate`, `pwrite`, `sigaction`, `raise`.

use std::ffi::c_int;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::OnceLock;

const SIGNALS: [c_int; 5] = [libc::SIGABRT, libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE];

/// The status file, open for writing (-1: none).
static FD: AtomicI32 = AtomicI32::new(-1);
/// The actions replaced, in the order of `SIGNALS`.
static OLD: OnceLock<[libc::sigaction; SIGNALS.len()]> = OnceLock::new();

/// Write `signal N` into the status file at `path` if the head dies of a fatal signal. Call
/// once, after MPI is initialised (Open MPI installs its own handlers there, which these hand
/// the signal on to).
pub(crate) fn install(path: &std::path::Path) -> std::io::Result<()> {
    use std::os::fd::IntoRawFd;
    let file = std::fs::OpenOptions::new().write(true).open(path)?;
    FD.store(file.into_raw_fd(), Ordering::Release);
    // SAFETY: zeroed sigaction structs are valid "no action" values, filled in by sigaction.
    let mut old: [libc::sigaction; SIGNALS.len()] = unsafe { std::mem::zeroed() };
    for (i, &sig) in SIGNALS.iter().enumerate() {
        // SAFETY: reading the current action into a valid struct.
        unsafe { libc::sigaction(sig, std::ptr::null(), &mut old[i]) };
    }
    if OLD.set(old).is_err() {
        return Ok(()); // installed already
    }
    for &sig in &SIGNALS {
        // SAFETY: installing a handler that only makes async-signal-safe calls (see
        // `on_crash`); its struct is fully initialised below.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_crash as *const () as usize;
            act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut act.sa_mask);
            libc::sigaction(sig, &act, std::ptr::null_mut());
        }
    }
    Ok(())
}

extern "C" fn on_crash(sig: c_int, _info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    let fd = FD.load(Ordering::Acquire);
    if fd >= 0 {
        let mut buf = *b"signal 000\n";
        let n = sig.clamp(0, 999) as u32;
        buf[7] = b'0' + (n / 100 % 10) as u8;
        buf[8] = b'0' + (n / 10 % 10) as u8;
        buf[9] = b'0' + (n % 10) as u8;
        // SAFETY: async-signal-safe calls on a descriptor this process opened; `buf` is local.
        unsafe {
            libc::ftruncate(fd, 0);
            libc::pwrite(fd, buf.as_ptr().cast(), buf.len(), 0);
        }
    }
    // Hand it on: restore what was there and raise it again (it is delivered once this
    // handler returns; a fault's instruction then runs again under that action).
    if let (Some(old), Some(i)) = (OLD.get(), SIGNALS.iter().position(|&s| s == sig)) {
        // SAFETY: restoring an action read by `install`; raise is async-signal-safe.
        unsafe {
            libc::sigaction(sig, &old[i], std::ptr::null_mut());
            libc::raise(sig);
        }
    }
}
