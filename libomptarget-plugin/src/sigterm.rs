//! Ending well on SIGTERM (what Slurm sends ahead of a time limit, and `scancel`): with
//! checkpoints on and `OMPCLUSTER_CP_ON_SIGTERM` not `0`, the head takes a final checkpoint,
//! with its log, before it leaves, so that `ompcluster-run --resume` loses nothing done before
//! the signal.
//!
//! Design note (signals and threads). The handler only writes one byte to a pipe (`write` is
//! async-signal-safe). A thread of the head reads it and takes the checkpoint, bounded by
//! [`GRACE`], then writes `signal 15` for the launcher and leaves with `_exit(143)`: the
//! program's other threads are still running, so no exit handler (libomptarget's teardown)
//! may run. Workers ignore SIGTERM meanwhile (mpirun and Slurm send it to every rank): they
//! end when they see the head gone, within the failure detector's timeout. The launcher
//! forwards a SIGTERM it receives to mpirun, and gives mpirun a kill timeout longer than the
//! grace (`--mca odls_base_sigkill_timeout`), so that mpirun does not SIGKILL the ranks one
//! second after its own SIGTERM.

use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

/// Longest the head spends on its final checkpoint after SIGTERM.
pub const GRACE: Duration = Duration::from_secs(20);

/// Write end of the pipe the handler writes to (-1: none).
static PIPE: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_sigterm(_sig: libc::c_int) {
    let fd = PIPE.load(Ordering::Relaxed);
    if fd >= 0 {
        let b = 1u8;
        // SAFETY: write is async-signal-safe; `b` is a valid byte; a full pipe drops it (one
        // byte is enough).
        unsafe { libc::write(fd, (&b as *const u8).cast(), 1) };
    }
}

/// On the head: on SIGTERM, run `final_checkpoint` (bounded by [`GRACE`]), then leave as if
/// killed by SIGTERM.
pub(crate) fn install_head(final_checkpoint: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 fills two descriptors, which are owned below.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fresh descriptors from pipe2, owned by nobody else.
    let (read, _write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), fds[1]) };
    PIPE.store(fds[1], Ordering::Release);
    std::thread::Builder::new().name("ompc-sigterm".into()).spawn(move || {
        let mut b = 0u8;
        use std::os::fd::AsRawFd;
        loop {
            // SAFETY: reading one byte into a valid buffer from our own descriptor.
            let n = unsafe { libc::read(read.as_raw_fd(), (&mut b as *mut u8).cast(), 1) };
            if n == 1 {
                break;
            }
            if n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return; // the pipe is gone: nothing will come
        }
        eprintln!("ompcluster: SIGTERM: taking a final checkpoint (at most {} s) before leaving", GRACE.as_secs());
        let (tx, rx) = std::sync::mpsc::channel();
        let started = std::time::Instant::now();
        let spawned = std::thread::Builder::new().name("ompc-final-ckpt".into()).spawn(move || {
            // A panic here only means no final checkpoint: the job still leaves.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(final_checkpoint));
            let _ = tx.send(());
        });
        let done = spawned.is_ok() && rx.recv_timeout(GRACE).is_ok();
        if done {
            eprintln!("ompcluster: SIGTERM: final checkpoint done in {:.3} s; leaving", started.elapsed().as_secs_f64());
        } else {
            eprintln!("ompcluster: SIGTERM: no final checkpoint within {} s; leaving (a resume starts from the last published one)", GRACE.as_secs());
        }
        crate::exit_status::write_signal(libc::SIGTERM);
        // Without running exit handlers (the program's threads still run: see the module's
        // note).
        crate::runtime::leave(128 + libc::SIGTERM);
    })?;
    set_action(on_sigterm as *const () as usize)
}

/// On a worker: ignore SIGTERM (the head decides when the job ends; see the module's note).
pub(crate) fn install_worker() -> std::io::Result<()> {
    set_action(libc::SIG_IGN)
}

fn set_action(handler: libc::sighandler_t) -> std::io::Result<()> {
    // SAFETY: a zeroed sigaction is valid; the handler is SIG_IGN or `on_sigterm`, which only
    // makes an async-signal-safe call.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(libc::SIGTERM, &sa, std::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
