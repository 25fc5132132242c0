//! Non-blocking point-to-point transport on a private duplicate of a communicator.
//!
//! Design note (concurrency): MPI is initialised with `MPI_THREAD_MULTIPLE`, so any thread may
//! post, test and cancel its own requests on the shared communicator. Each in-flight request
//! of the head owns a tag from [`TagAllocator`] (unique among requests in flight, since tags
//! wrap only after 2^30 requests), so the replies and the bulk data of concurrent requests
//! never match each other's receives. Messages between a pair of ranks on one tag are not
//! overtaken (MPI's ordering rule), which is what keeps fragments in order.
//!
//! Every wait here is a test loop with back-off that also asks a [`Liveness`] oracle whether the
//! peer is dead, and gives up with [`CommError::PeerDead`] if so: no wait can block forever on
//! a dead rank once the failure detector has declared it.

use crate::backoff::Backoff;
use crate::protocol::{self, ProtocolError};
use mpi::ffi;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use thiserror::Error;

/// Tag of control messages (head -> worker events).
pub const CONTROL_TAG: i32 = 1;
/// First tag handed out to requests.
pub const FIRST_REQUEST_TAG: i32 = 64;

/// Who is alive, as far as the failure detector knows.
pub trait Liveness: Send + Sync {
    /// Has `rank` been declared dead?
    fn is_dead(&self, rank: i32) -> bool;
}

impl<T: Liveness + ?Sized> Liveness for std::sync::Arc<T> {
    fn is_dead(&self, rank: i32) -> bool {
        (**self).is_dead(rank)
    }
}

/// Liveness that never forgets a death: a rank once declared dead (by the failure detector
/// behind it, or fenced here because a peer reported it dead) stays dead for the rest of the
/// run, even if the detector later re-admits it (a frozen process that woke up): nothing it
/// sends is waited for again.
#[derive(Debug)]
pub struct Fenced<L> {
    inner: L,
    dead: Vec<std::sync::atomic::AtomicBool>,
}

impl<L: Liveness> Fenced<L> {
    /// Over `inner`, for ranks `0..size`.
    pub fn new(inner: L, size: usize) -> Self {
        Fenced { inner, dead: (0..size).map(|_| std::sync::atomic::AtomicBool::new(false)).collect() }
    }

    /// Declare `rank` dead for good. Returns true if it was not dead before.
    pub fn fence(&self, rank: i32) -> bool {
        match self.dead.get(rank as usize) {
            Some(d) => !d.swap(true, Ordering::AcqRel),
            None => false,
        }
    }

    /// Every rank dead so far.
    pub fn dead_ranks(&self) -> std::collections::BTreeSet<i32> {
        (0..self.dead.len() as i32).filter(|&r| self.is_dead(r)).collect()
    }
}

impl<L: Liveness> Liveness for Fenced<L> {
    fn is_dead(&self, rank: i32) -> bool {
        let Some(d) = self.dead.get(rank as usize) else { return false };
        if d.load(Ordering::Acquire) {
            return true;
        }
        if self.inner.is_dead(rank) {
            d.store(true, Ordering::Release);
            return true;
        }
        false
    }
}

/// The oracle used when no failure detector runs: nobody is ever declared dead (a dead rank
/// then ends the whole job through the MPI launcher).
#[derive(Debug, Default, Clone, Copy)]
pub struct NeverDead;

impl Liveness for NeverDead {
    fn is_dead(&self, _rank: i32) -> bool {
        false
    }
}

/// Transport failures.
#[derive(Debug, Error)]
pub enum CommError {
    /// The peer was declared dead while we waited for it.
    #[error("rank {0} is dead")]
    PeerDead(i32),
    /// An MPI call returned an error code.
    #[error("MPI error {code} in {call}")]
    Mpi {
        /// The function.
        call: &'static str,
        /// Its return code.
        code: c_int,
    },
    /// A message from a peer could not be decoded.
    #[error("bad message from rank {rank}: {source}")]
    Protocol {
        /// Sender.
        rank: i32,
        /// What was wrong.
        #[source]
        source: ProtocolError,
    },
}

fn null_request() -> ffi::MPI_Request {
    // SAFETY: reading an immutable constant exported by the MPI shim library.
    unsafe { ffi::RSMPI_REQUEST_NULL }
}

fn check(call: &'static str, code: c_int) -> Result<(), CommError> {
    if code == 0 {
        Ok(())
    } else {
        Err(CommError::Mpi { call, code })
    }
}

/// Hands out request tags, wrapping within `[FIRST_REQUEST_TAG, tag_ub]`.
#[derive(Debug)]
pub struct TagAllocator {
    next: AtomicI32,
    upper: i32,
}

impl TagAllocator {
    /// Tags up to `upper` (the communicator's `MPI_TAG_UB`), capped at 2^30.
    pub fn new(upper: i32) -> Self {
        TagAllocator { next: AtomicI32::new(FIRST_REQUEST_TAG), upper: upper.min(1 << 30) }
    }

    /// A fresh tag.
    pub fn next(&self) -> i32 {
        let span = self.upper - FIRST_REQUEST_TAG;
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        FIRST_REQUEST_TAG + (n - FIRST_REQUEST_TAG).rem_euclid(span)
    }
}

/// A duplicated communicator, usable from any thread.
#[derive(Debug)]
pub struct Comm {
    raw: ffi::MPI_Comm,
    rank: i32,
    size: i32,
    tag_ub: i32,
    fragment: usize,
    /// MPI messages this process sent and received on it (control messages and data
    /// fragments), for the run report.
    sent: AtomicU64,
    received: AtomicU64,
}

// SAFETY: an MPI communicator handle is an opaque pointer into the MPI library; with
// MPI_THREAD_MULTIPLE (which `Comm::duplicate_world` requires the caller to have initialised)
// the MPI standard allows concurrent calls on the same communicator from several threads.
unsafe impl Send for Comm {}
// SAFETY: as above; `Comm` has no interior mutability of its own.
unsafe impl Sync for Comm {}

impl Comm {
    /// Duplicate `MPI_COMM_WORLD` (collective over all ranks) with errors returned, not fatal.
    /// `fragment` is the largest piece a bulk transfer is split into.
    ///
    /// MPI must be initialised with `MPI_THREAD_MULTIPLE`.
    pub fn duplicate_world(fragment: usize) -> Result<Self, CommError> {
        let mut raw = ffi::MPI_Comm(std::ptr::null_mut());
        let (mut rank, mut size) = (0, 0);
        let mut tag_ub = 32767;
        // SAFETY: MPI is initialised (caller's contract); all out-pointers point to live locals.
        unsafe {
            check("MPI_Comm_dup", ffi::MPI_Comm_dup(ffi::RSMPI_COMM_WORLD, &mut raw))?;
            check(
                "MPI_Comm_set_errhandler",
                ffi::MPI_Comm_set_errhandler(raw, ffi::RSMPI_ERRORS_RETURN),
            )?;
            check("MPI_Comm_rank", ffi::MPI_Comm_rank(raw, &mut rank))?;
            check("MPI_Comm_size", ffi::MPI_Comm_size(raw, &mut size))?;
            let mut value: *mut c_int = std::ptr::null_mut();
            let mut flag: c_int = 0;
            check(
                "MPI_Comm_get_attr",
                ffi::MPI_Comm_get_attr(
                    ffi::RSMPI_COMM_WORLD,
                    ffi::MPI_TAG_UB as c_int,
                    (&mut value as *mut *mut c_int).cast::<c_void>(),
                    &mut flag,
                ),
            )?;
            if flag != 0 && !value.is_null() {
                tag_ub = *value;
            }
        }
        Ok(Comm { raw, rank, size, tag_ub, fragment: fragment.max(1), sent: AtomicU64::new(0), received: AtomicU64::new(0) })
    }

    /// This rank.
    pub fn rank(&self) -> i32 {
        self.rank
    }

    /// Number of ranks.
    pub fn size(&self) -> i32 {
        self.size
    }

    /// Largest tag usable on this communicator.
    pub fn tag_ub(&self) -> i32 {
        self.tag_ub
    }

    /// MPI messages sent and received on this communicator so far, by this process.
    pub fn messages(&self) -> (u64, u64) {
        (self.sent.load(Ordering::Relaxed), self.received.load(Ordering::Relaxed))
    }

    /// Bulk transfers are split into pieces of at most this many bytes.
    pub fn fragment(&self) -> usize {
        self.fragment
    }

    /// Wait for all `reqs` to complete, giving up if `peer` is declared dead.
    fn wait_all(
        &self,
        reqs: &mut [ffi::MPI_Request],
        peer: i32,
        live: &dyn Liveness,
        mut backoff: Backoff,
    ) -> Result<(), CommError> {
        if reqs.is_empty() {
            return Ok(());
        }
        loop {
            let mut flag: c_int = 0;
            // SAFETY: `reqs` holds requests started by this module whose buffers the callers
            // keep alive until this function returns (or leak on PeerDead, see below).
            let code = unsafe {
                ffi::MPI_Testall(
                    reqs.len() as c_int,
                    reqs.as_mut_ptr(),
                    &mut flag,
                    ffi::RSMPI_STATUSES_IGNORE,
                )
            };
            check("MPI_Testall", code)?;
            if flag != 0 {
                return Ok(());
            }
            if !backoff.spinning() && live.is_dead(peer) {
                for r in reqs.iter_mut() {
                    // SAFETY: cancelling and freeing requests we own; completed ones are
                    // already MPI_REQUEST_NULL, which both calls skip.
                    unsafe {
                        if r.0 != null_request().0 {
                            ffi::MPI_Cancel(r);
                            ffi::MPI_Request_free(r);
                        }
                    }
                }
                return Err(CommError::PeerDead(peer));
            }
            backoff.snooze();
        }
    }

    /// Send a serialised message and wait until its buffer is free.
    pub fn send_msg<T: serde::Serialize>(
        &self,
        dst: i32,
        tag: i32,
        msg: &T,
        live: &dyn Liveness,
    ) -> Result<(), CommError> {
        let bytes = protocol::encode(msg).map_err(|source| CommError::Protocol { rank: self.rank, source })?;
        // SAFETY: `bytes` lives until `send_bytes` returns; on PeerDead it is leaked so that
        // MPI can never write or read freed memory.
        let res = unsafe { self.send_bytes(dst, tag, bytes.as_ptr(), bytes.len(), live) };
        if let Err(CommError::PeerDead(_)) = res {
            std::mem::forget(bytes);
        }
        res
    }

    /// Probe once for a message from `src` (or any source if `None`) on `tag`; if one is
    /// there, receive it whole.
    pub fn try_recv_raw(&self, src: Option<i32>, tag: i32) -> Result<Option<(i32, Vec<u8>)>, CommError> {
        let mut flag: c_int = 0;
        let mut msg = ffi::MPI_Message(std::ptr::null_mut());
        // SAFETY: MPI_Status is plain old data; zeroed is a valid initial value.
        let mut status: ffi::MPI_Status = unsafe { std::mem::zeroed() };
        let source = src.unwrap_or(
            // SAFETY: reading an immutable constant exported by the MPI shim.
            unsafe { ffi::RSMPI_ANY_SOURCE },
        );
        // SAFETY: out-pointers point to live locals.
        check("MPI_Improbe", unsafe {
            ffi::MPI_Improbe(source, tag, self.raw, &mut flag, &mut msg, &mut status)
        })?;
        if flag == 0 {
            return Ok(None);
        }
        let mut count: c_int = 0;
        // SAFETY: `status` was filled by the matched probe.
        check("MPI_Get_count", unsafe { ffi::MPI_Get_count(&status, ffi::RSMPI_UINT8_T, &mut count) })?;
        let mut buf = vec![0u8; count.max(0) as usize];
        // SAFETY: `buf` has exactly `count` bytes; the matched message is received once.
        check("MPI_Mrecv", unsafe {
            ffi::MPI_Mrecv(buf.as_mut_ptr().cast(), count, ffi::RSMPI_UINT8_T, &mut msg, ffi::RSMPI_STATUS_IGNORE)
        })?;
        self.received.fetch_add(1, Ordering::Relaxed);
        Ok(Some((status.MPI_SOURCE, buf)))
    }

    /// Wait for one message from `src` on `tag` and decode it.
    pub fn recv_msg<T: for<'de> serde::Deserialize<'de>>(
        &self,
        src: i32,
        tag: i32,
        live: &dyn Liveness,
    ) -> Result<T, CommError> {
        let mut backoff = Backoff::for_wait();
        loop {
            if let Some((_, bytes)) = self.try_recv_raw(Some(src), tag)? {
                return protocol::decode(&bytes).map_err(|source| CommError::Protocol { rank: src, source });
            }
            if !backoff.spinning() && live.is_dead(src) {
                return Err(CommError::PeerDead(src));
            }
            backoff.snooze();
        }
    }

    fn pieces(&self, len: usize) -> impl Iterator<Item = (usize, usize)> + '_ {
        (0..len).step_by(self.fragment).map(move |off| (off, (len - off).min(self.fragment)))
    }

    /// Send `len` bytes at `ptr` to `dst` on `tag`, in fragments, and wait for completion.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be readable and stay valid and unmodified until this returns; if it
    /// returns `PeerDead` MPI may still read it later, so the caller must keep it valid for the
    /// rest of the process (device memory is; heap buffers must be leaked).
    pub unsafe fn send_bytes(
        &self,
        dst: i32,
        tag: i32,
        ptr: *const u8,
        len: usize,
        live: &dyn Liveness,
    ) -> Result<(), CommError> {
        // SAFETY: forwarded contract.
        unsafe { self.send_bytes_during(dst, tag, ptr, len, live, || ()) }
    }

    /// [`Comm::send_bytes`], running `during` on this thread while the data travels (after
    /// the sends are posted, before waiting for them): work that only reads the same bytes,
    /// such as scanning them, then costs no extra time.
    ///
    /// # Safety
    /// As for [`Comm::send_bytes`]; `during` must not write the range.
    pub unsafe fn send_bytes_during<R>(
        &self,
        dst: i32,
        tag: i32,
        ptr: *const u8,
        len: usize,
        live: &dyn Liveness,
        during: impl FnOnce() -> R,
    ) -> Result<R, CommError> {
        // SAFETY: forwarded contract; a send only reads through the pointer.
        unsafe { self.transfer(Direction::Send, dst, tag, ptr.cast_mut(), len, live, during) }
    }

    /// Receive `len` bytes from `src` on `tag` into `ptr`, in the fragments `send_bytes` uses.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be writable and not otherwise accessed until this returns; on
    /// `PeerDead` the same caveat as [`Comm::send_bytes`] applies (requests are cancelled).
    pub unsafe fn recv_bytes(
        &self,
        src: i32,
        tag: i32,
        ptr: *mut u8,
        len: usize,
        live: &dyn Liveness,
    ) -> Result<(), CommError> {
        // SAFETY: forwarded contract.
        unsafe { self.transfer(Direction::Recv, src, tag, ptr, len, live, || ()) }
    }

    /// Post one request per fragment (one empty message for `len == 0`, so both sides agree),
    /// run `during`, and wait for all of them.
    ///
    /// # Safety
    /// As for `send_bytes` (Send) or `recv_bytes` (Recv).
    #[allow(clippy::too_many_arguments)]
    unsafe fn transfer<R>(
        &self,
        dir: Direction,
        peer: i32,
        tag: i32,
        ptr: *mut u8,
        len: usize,
        live: &dyn Liveness,
        during: impl FnOnce() -> R,
    ) -> Result<R, CommError> {
        let mut reqs = Vec::with_capacity(len / self.fragment + 1);
        let pieces: Vec<(usize, usize)> = if len == 0 { vec![(0, 0)] } else { self.pieces(len).collect() };
        for (off, n) in pieces {
            let mut req = null_request();
            // SAFETY: the caller guarantees the range is readable (Send) or writable and
            // exclusive (Recv) until the requests complete; `off + n <= len`.
            let code = unsafe {
                let p = ptr.add(off).cast();
                match dir {
                    Direction::Send => ffi::MPI_Isend(p, n as c_int, ffi::RSMPI_UINT8_T, peer, tag, self.raw, &mut req),
                    Direction::Recv => ffi::MPI_Irecv(p, n as c_int, ffi::RSMPI_UINT8_T, peer, tag, self.raw, &mut req),
                }
            };
            check(dir.call(), code)?;
            reqs.push(req);
        }
        match dir {
            Direction::Send => &self.sent,
            Direction::Recv => &self.received,
        }
        .fetch_add(reqs.len() as u64, Ordering::Relaxed);
        let r = during();
        self.wait_all(&mut reqs, peer, live, Backoff::for_transfer())?;
        Ok(r)
    }
}

#[derive(Debug, Clone, Copy)]
enum Direction {
    Send,
    Recv,
}

impl Direction {
    fn call(self) -> &'static str {
        match self {
            Direction::Send => "MPI_Isend",
            Direction::Recv => "MPI_Irecv",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_wrap_inside_the_range() {
        let t = TagAllocator::new(FIRST_REQUEST_TAG + 3);
        let got: Vec<i32> = (0..7).map(|_| t.next()).collect();
        assert_eq!(got, vec![64, 65, 66, 64, 65, 66, 64]);
        let big = TagAllocator::new(i32::MAX);
        assert_eq!(big.next(), FIRST_REQUEST_TAG);
    }
}
