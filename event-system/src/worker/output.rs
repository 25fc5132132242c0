//! A worker's standard output and standard error, captured so that what a region prints
//! reaches the user through the head, in program order (with the region's EXECUTE reply),
//! instead of whenever mpirun forwards the worker's streams.
//!
//! The descriptor (1 or 2) becomes the write end of a pipe; a reader thread drains the pipe
//! into a buffer (so a region printing more than the pipe holds never blocks). [`Capture::take`]
//! flushes the C stream and waits until the pipe is empty under the buffer's lock: the reader
//! reads and appends under that same lock, so an empty pipe then means every byte written so
//! far is in the buffer. Concurrent regions on one worker share the buffer; whichever finishes
//! first takes what both printed, which keeps each line whole and in order.
//!
//! Standard error also carries the worker's own messages, printed outside any region: while no
//! region runs ([`Capture::region`] counts them), the reader passes what it reads straight to
//! the original descriptor, and [`flush_stderr`] does so before the worker leaves, so that a
//! dying worker's last words are not lost in the buffer.

use parking_lot::Mutex;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// The capture of fd 1 or fd 2.
pub(crate) struct Capture {
    fd: RawFd,
    read_fd: RawFd,
    /// The worker's original descriptor (mpirun's stream), for what is left at exit and, for
    /// fd 2, what is printed while no region runs.
    orig_fd: RawFd,
    buf: Mutex<Vec<u8>>,
    stop: AtomicBool,
    /// Regions running (fd 2 only: while none does, what is read goes straight out).
    regions: AtomicUsize,
}

/// The capture of fd 2, for [`flush_stderr`].
static STDERR: OnceLock<Arc<Capture>> = OnceLock::new();

/// Before a worker leaves (however: `exit`, `_exit`, `abort`): what its standard error holds
/// goes to the original one. Safe to call when nothing is captured.
pub fn flush_stderr() {
    if let Some(c) = STDERR.get() {
        let rest = c.collect();
        write_all(c.orig_fd, &rest);
    }
}

/// Counts a region as running on a capture of fd 2 while it lives.
pub(crate) struct InRegion<'a>(&'a Capture);

impl Drop for InRegion<'_> {
    fn drop(&mut self) {
        self.0.regions.fetch_sub(1, Ordering::AcqRel);
    }
}

fn last_os_error<T>() -> std::io::Result<T> {
    Err(std::io::Error::last_os_error())
}

impl Capture {
    /// Redirect `fd` (1 or 2) into a pipe and start draining it.
    pub(crate) fn start(fd: RawFd) -> std::io::Result<Arc<Capture>> {
        debug_assert!(fd == 1 || fd == 2);
        let mut fds = [0 as RawFd; 2];
        // SAFETY: `fds` has room for the two descriptors pipe2 writes.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return last_os_error();
        }
        let (r, w) = (fds[0], fds[1]);
        // SAFETY: plain descriptor operations on descriptors this function owns (and on `fd`,
        // which it deliberately replaces); C stdio is flushed first so nothing buffered for the
        // old fd 1 is lost.
        let orig = unsafe {
            libc::fcntl(w, libc::F_SETPIPE_SZ, 1 << 20); // best effort: fewer reader wake-ups
            libc::fcntl(r, libc::F_SETFL, libc::O_NONBLOCK);
            libc::fflush(std::ptr::null_mut());
            let orig = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3);
            if orig < 0 || libc::dup2(w, fd) < 0 {
                return last_os_error();
            }
            libc::close(w);
            orig
        };
        let cap = Arc::new(Capture {
            fd,
            read_fd: r,
            orig_fd: orig,
            buf: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            regions: AtomicUsize::new(0),
        });
        let c2 = cap.clone();
        std::thread::Builder::new().name(if fd == 1 { "ompc-stdout" } else { "ompc-stderr" }.into()).spawn(move || c2.drain_loop())?;
        if fd == 2 {
            let _ = STDERR.set(cap.clone());
        }
        Ok(cap)
    }

    /// A region runs while the result lives: what it prints waits for its reply.
    pub(crate) fn region(&self) -> InRegion<'_> {
        self.regions.fetch_add(1, Ordering::AcqRel);
        InRegion(self)
    }

    fn read_available(&self, buf: &mut Vec<u8>) {
        let mut chunk = [0u8; 64 << 10];
        loop {
            // SAFETY: reading into a local buffer of the stated size from our pipe's read end.
            let n = unsafe { libc::read(self.read_fd, chunk.as_mut_ptr().cast(), chunk.len()) };
            if n <= 0 {
                return;
            }
            buf.extend_from_slice(&chunk[..n as usize]);
        }
    }

    fn drain_loop(&self) {
        while !self.stop.load(Ordering::Acquire) {
            let mut pfd = libc::pollfd { fd: self.read_fd, events: libc::POLLIN, revents: 0 };
            // SAFETY: one valid pollfd; a timeout keeps the loop able to see `stop`.
            let ready = unsafe { libc::poll(&mut pfd, 1, 100) };
            let mut b = self.buf.lock();
            if ready > 0 {
                self.read_available(&mut b);
            }
            if self.fd == 2 && !b.is_empty() && self.regions.load(Ordering::Acquire) == 0 {
                // Printed outside any region (the worker's own words), or by a region whose
                // reply did not take it (it failed): now.
                write_all(self.orig_fd, &std::mem::take(&mut *b));
            }
        }
    }

    fn pipe_empty(&self) -> bool {
        let mut n: libc::c_int = 0;
        // SAFETY: FIONREAD writes one int.
        unsafe { libc::ioctl(self.read_fd, libc::FIONREAD, &mut n) == 0 && n == 0 }
    }

    /// Everything printed so far (C `stdout` flushed first): what a region printed, at the end
    /// of its EXECUTE. Flushing `stdout` alone costs a lock and a check when nothing is buffered;
    /// `fflush(NULL)`, which walks every open stream under libc's global list lock, took a
    /// measurable part of an empty region.
    pub(crate) fn take(&self) -> Vec<u8> {
        extern "C" {
            static stdout: *mut libc::FILE;
            static stderr: *mut libc::FILE;
        }
        // SAFETY: glibc's `stdout` and `stderr` are initialised before any code of ours runs
        // and never reassigned by the runtime; flushing a valid stream is always allowed.
        unsafe { libc::fflush(if self.fd == 1 { stdout } else { stderr }) };
        self.collect()
    }

    /// What is in the pipe and the buffer, once the pipe is empty.
    fn collect(&self) -> Vec<u8> {
        loop {
            let mut b = self.buf.lock();
            if self.pipe_empty() {
                return std::mem::take(&mut *b);
            }
            self.read_available(&mut b);
            drop(b);
            std::thread::sleep(Duration::from_micros(20));
        }
    }

    /// At exit: write what nobody collected to the original descriptor, put that descriptor
    /// back (what the worker prints while it leaves goes straight out), stop the reader.
    pub(crate) fn finish(&self) {
        // SAFETY: flushing all C streams (any of them may be fd 1 or 2) is always allowed.
        unsafe { libc::fflush(std::ptr::null_mut()) };
        let mut b = self.buf.lock();
        loop {
            self.read_available(&mut b);
            if self.pipe_empty() {
                break;
            }
        }
        write_all(self.orig_fd, &std::mem::take(&mut *b));
        // SAFETY: `orig_fd` is the descriptor `start` saved; dup2 replaces `fd` atomically, so
        // a concurrent write lands either in the pipe (read below) or in the original.
        unsafe { libc::dup2(self.orig_fd, self.fd) };
        self.read_available(&mut b);
        write_all(self.orig_fd, &std::mem::take(&mut *b));
        drop(b);
        self.stop.store(true, Ordering::Release);
    }
}

/// Write all of `bytes` to `fd` (retrying short writes; errors end it quietly: there is
/// nowhere better to report them).
pub fn write_all(fd: RawFd, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: writing from a valid slice.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n <= 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        bytes = &bytes[n as usize..];
    }
}
