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

use poll_backoff::Backoff;
use crate::protocol::{self, ProtocolError};
use mpi::ffi;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::time::{Duration, Instant};
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

/// How long an MPI error on a call addressed to a peer waits for the failure detector to
/// declare that peer dead (see [`Comm::peer_error`]): longer than the detector's default
/// timeout (3 s) by far.
const PEER_ERROR_WAIT: Duration = Duration::from_secs(60);

/// What a thread whose beat is its own (`watchdog::Beat::own`) does while it waits here.
const WAITING_ON_PEER: &str = "a message to or from another rank";

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

    /// An MPI call addressed to `peer` failed with `e`. Over TCP a peer's death shows as an
    /// error of the next call to it (a broken connection), sometimes before the failure
    /// detector has declared it dead: such an error is the peer's death if the detector
    /// declares it within [`PEER_ERROR_WAIT`]; any other error, or one whose peer stays
    /// alive, is returned as it is.
    fn peer_error(&self, e: CommError, peer: i32, live: &dyn Liveness) -> CommError {
        if !matches!(e, CommError::Mpi { .. }) {
            return e;
        }
        let deadline = Instant::now() + PEER_ERROR_WAIT;
        let mut backoff = Backoff::for_wait();
        watchdog::waiting(WAITING_ON_PEER, || {
            while Instant::now() < deadline {
                if live.is_dead(peer) {
                    return CommError::PeerDead(peer);
                }
                backoff.snooze();
            }
            e
        })
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
        // A wait on a peer, bounded by the failure detector: never a stall of the thread.
        watchdog::waiting(WAITING_ON_PEER, || loop {
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
            let failed = match check("MPI_Testall", code) {
                Ok(()) if flag != 0 => return Ok(()),
                Ok(()) => false,
                Err(e) => match self.peer_error(e, peer, live) {
                    CommError::PeerDead(_) => true,
                    e => return Err(e),
                },
            };
            if failed || (!backoff.spinning() && live.is_dead(peer)) {
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
        })
    }

    /// Send a serialised message on a request tag (not [`CONTROL_TAG`]: see
    /// [`Comm::send_event`]) and wait until its buffer is free. It travels as one framed
    /// message of at most [`INLINE_BYTES`] (what every receive is posted with), or as a header
    /// frame and then its body on the same tag (see [`Comm::test_recv`]).
    pub fn send_msg<T: serde::Serialize>(
        &self,
        dst: i32,
        tag: i32,
        msg: &T,
        live: &dyn Liveness,
    ) -> Result<(), CommError> {
        debug_assert_ne!(tag, CONTROL_TAG, "control messages go through send_event");
        self.send_framed(dst, tag, tag, msg, live)
    }

    /// Send an event on [`CONTROL_TAG`]. A body too large for one message travels on the
    /// event's own request tag: other threads' events to the same rank may come between the
    /// two messages on the control tag, never on that one.
    pub fn send_event(&self, dst: i32, env: &protocol::Envelope, live: &dyn Liveness) -> Result<(), CommError> {
        self.send_framed(dst, CONTROL_TAG, env.tag, env, live)
    }

    fn send_framed<T: serde::Serialize>(
        &self,
        dst: i32,
        tag: i32,
        body_tag: i32,
        msg: &T,
        live: &dyn Liveness,
    ) -> Result<(), CommError> {
        // (A fresh vector while the thread's storage is being torn down, as in exit handlers.)
        let mut bytes = SEND_BUF.try_with(|b| std::mem::take(&mut *b.borrow_mut())).unwrap_or_default();
        bytes.clear();
        bytes.push(FRAME_WHOLE);
        protocol::encode_into(msg, &mut bytes).map_err(|source| CommError::Protocol { rank: self.rank, source })?;
        let res = if bytes.len() <= INLINE_BYTES {
            // SAFETY: `bytes` lives until the send completed; on PeerDead it is leaked below.
            unsafe { self.send_one(dst, tag, bytes.as_ptr(), bytes.len(), live) }
        } else {
            let mut header = [0u8; LARGE_HEADER];
            header[0] = FRAME_LARGE;
            header[1..9].copy_from_slice(&(bytes.len() as u64 - 1).to_le_bytes());
            header[9..].copy_from_slice(&body_tag.to_le_bytes());
            // SAFETY: both buffers live until the sends completed; on PeerDead `bytes` is
            // leaked below, and the header's send had completed before the body's started.
            unsafe {
                self.send_one(dst, tag, header.as_ptr(), header.len(), live)
                    .and_then(|()| self.send_bytes(dst, body_tag, bytes.as_ptr().add(1), bytes.len() - 1, live))
            }
        };
        match res {
            // MPI may still read a buffer whose send was abandoned: never reuse or free it.
            Err(CommError::PeerDead(_)) => std::mem::forget(bytes),
            _ => {
                let _ = SEND_BUF.try_with(|b| *b.borrow_mut() = bytes);
            }
        }
        res
    }

    /// Send one message of `len` bytes at `ptr` and wait until it left.
    ///
    /// # Safety
    /// As for [`Comm::send_bytes`].
    unsafe fn send_one(&self, dst: i32, tag: i32, ptr: *const u8, len: usize, live: &dyn Liveness) -> Result<(), CommError> {
        let mut req = null_request();
        // SAFETY: the caller guarantees `ptr..ptr+len` is readable until the request completes.
        check("MPI_Isend", unsafe {
            ffi::MPI_Isend(ptr.cast_mut().cast(), len as c_int, ffi::RSMPI_UINT8_T, dst, tag, self.raw, &mut req)
        })
        .map_err(|e| self.peer_error(e, dst, live))?;
        self.sent.fetch_add(1, Ordering::Relaxed);
        self.wait_all(std::slice::from_mut(&mut req), dst, live, Backoff::for_wait())
    }

    /// Post a receive of one message from `src` on `tag`, into a buffer of [`INLINE_BYTES`]
    /// (see [`Comm::send_msg`]). A receive posted before its message arrives takes it straight
    /// from the transport; one that arrives first is held by MPI and copied once more.
    pub fn post_recv(&self, src: i32, tag: i32) -> Result<PostedRecv, CommError> {
        let mut buf = take_buffer();
        let mut req = null_request();
        // SAFETY: `buf` has INLINE_BYTES writable bytes; it is owned by the returned value,
        // which never frees it while the request may still write it (see its Drop).
        check("MPI_Irecv", unsafe {
            ffi::MPI_Irecv(buf.as_mut_ptr().cast(), INLINE_BYTES as c_int, ffi::RSMPI_UINT8_T, src, tag, self.raw, &mut req)
        })?;
        Ok(PostedRecv { req, buf: Some(buf), src })
    }

    /// Test a posted receive once. When its message is there, return it (receiving the body
    /// first if it was a header frame: that wait gives up if the sender dies); the receive is
    /// then spent, and a new one must be posted for the next message.
    pub fn test_recv(&self, p: &mut PostedRecv, live: &dyn Liveness) -> Result<Option<Message>, CommError> {
        let Some(buf) = p.buf.as_ref() else {
            return Err(CommError::Protocol { rank: p.src, source: ProtocolError::Invalid("receive tested after it completed".into()) });
        };
        let mut flag: c_int = 0;
        // SAFETY: MPI_Status is plain old data; zeroed is a valid initial value.
        let mut status: ffi::MPI_Status = unsafe { std::mem::zeroed() };
        // SAFETY: the request was posted by `post_recv` into `buf`, which `p` still owns.
        check("MPI_Test", unsafe { ffi::MPI_Test(&mut p.req, &mut flag, &mut status) }).map_err(|e| self.peer_error(e, p.src, live))?;
        if flag == 0 {
            return Ok(None);
        }
        self.received.fetch_add(1, Ordering::Relaxed);
        let mut count: c_int = 0;
        // SAFETY: `status` was filled by the completed receive.
        check("MPI_Get_count", unsafe { ffi::MPI_Get_count(&status, ffi::RSMPI_UINT8_T, &mut count) })?;
        let count = (count.max(0) as usize).min(buf.len());
        let bad = |what: &str| CommError::Protocol { rank: p.src, source: ProtocolError::Malformed(what.into()) };
        let buf = p.buf.take().expect("checked above");
        match buf.first().filter(|_| count > 0) {
            Some(&FRAME_WHOLE) => Ok(Some(Message { bytes: Payload::Pooled(buf), start: 1, end: count })),
            Some(&FRAME_LARGE) if count == LARGE_HEADER => {
                let len = u64::from_le_bytes(buf[1..9].try_into().expect("8 bytes"));
                let body_tag = i32::from_le_bytes(buf[9..LARGE_HEADER].try_into().expect("4 bytes"));
                give_buffer(buf);
                if len > protocol::MAX_CONTROL_BYTES {
                    return Err(bad("message longer than the control limit"));
                }
                if body_tag < FIRST_REQUEST_TAG || body_tag > self.tag_ub {
                    return Err(bad("message body on a tag that is no request's"));
                }
                let mut body = vec![0u8; len as usize];
                // SAFETY: `body` has `len` writable bytes; leaked if the sender died (MPI may
                // still write them).
                if let Err(e) = unsafe { self.recv_bytes(p.src, body_tag, body.as_mut_ptr(), body.len(), live) } {
                    std::mem::forget(body);
                    return Err(e);
                }
                let end = body.len();
                Ok(Some(Message { bytes: Payload::Owned(body), start: 0, end }))
            }
            _ => {
                give_buffer(buf);
                Err(bad("unknown message frame"))
            }
        }
    }

    /// Wait for a posted receive's message, giving up if its sender is declared dead.
    pub fn wait_recv(&self, p: PostedRecv, live: &dyn Liveness) -> Result<Message, CommError> {
        self.wait_recv_with(p, live, Backoff::for_wait())
    }

    /// [`Comm::wait_recv`] with the given back-off (see [`Backoff::patient`]).
    pub fn wait_recv_with(&self, mut p: PostedRecv, live: &dyn Liveness, mut backoff: Backoff) -> Result<Message, CommError> {
        watchdog::waiting(WAITING_ON_PEER, || loop {
            if let Some(m) = self.test_recv(&mut p, live)? {
                return Ok(m);
            }
            if !backoff.spinning() && live.is_dead(p.src) {
                return Err(CommError::PeerDead(p.src));
            }
            backoff.snooze();
        })
    }

    /// Wait for one message from `src` on `tag` and decode it.
    pub fn recv_msg<T: for<'de> serde::Deserialize<'de>>(
        &self,
        src: i32,
        tag: i32,
        live: &dyn Liveness,
    ) -> Result<T, CommError> {
        let m = self.wait_recv(self.post_recv(src, tag)?, live)?;
        protocol::decode(&m).map_err(|source| CommError::Protocol { rank: src, source })
    }

    /// [`Comm::recv_msg`] for background work: waits with [`Backoff::patient`].
    pub fn recv_msg_patient<T: for<'de> serde::Deserialize<'de>>(&self, src: i32, tag: i32, live: &dyn Liveness) -> Result<T, CommError> {
        let m = self.wait_recv_with(self.post_recv(src, tag)?, live, Backoff::patient())?;
        protocol::decode(&m).map_err(|source| CommError::Protocol { rank: src, source })
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
            check(dir.call(), code).map_err(|e| self.peer_error(e, peer, live))?;
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

/// Largest message a receive takes in one piece (see [`Comm::send_msg`]): nearly every event
/// and reply fits; a larger one costs a second message.
pub const INLINE_BYTES: usize = 4096;
/// First byte of a message that holds all of it (the encoded message follows).
const FRAME_WHOLE: u8 = 1;
/// First byte of a header frame: the length of the body that follows, as a u64, then the tag
/// it follows on, as an i32 (little-endian both).
const FRAME_LARGE: u8 = 2;
/// Size of a header frame.
const LARGE_HEADER: usize = 13;

thread_local! {
    /// The encoding buffer of this thread's sends (a send completes before it returns).
    static SEND_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    /// Receive buffers of INLINE_BYTES, kept for reuse.
    static POOL: std::cell::RefCell<Vec<Box<[u8]>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Buffers kept per thread for reuse.
const POOL_SIZE: usize = 8;

fn take_buffer() -> Box<[u8]> {
    POOL.try_with(|p| p.borrow_mut().pop()).ok().flatten().unwrap_or_else(|| vec![0u8; INLINE_BYTES].into_boxed_slice())
}

fn give_buffer(b: Box<[u8]>) {
    // Ignored while the thread is being torn down (the buffer is then simply freed).
    let _ = POOL.try_with(|p| {
        let mut p = p.borrow_mut();
        if p.len() < POOL_SIZE {
            p.push(b);
        }
    });
}

/// A receive posted by [`Comm::post_recv`]. Dropped before its message came, it is
/// cancelled, and its buffer is never freed (MPI may still write into it).
#[derive(Debug)]
pub struct PostedRecv {
    req: ffi::MPI_Request,
    /// None once the message was taken.
    buf: Option<Box<[u8]>>,
    src: i32,
}

// SAFETY: an MPI request handle is an opaque pointer into the MPI library, which was
// initialised with MPI_THREAD_MULTIPLE: a request may be tested or cancelled from any thread.
// The buffer is owned by this value and only read once the request completed.
unsafe impl Send for PostedRecv {}

impl Drop for PostedRecv {
    fn drop(&mut self) {
        if let Some(buf) = self.buf.take() {
            // SAFETY: cancelling and freeing a request this value owns; its buffer is leaked,
            // since a receive that matched before the cancel may still be writing into it.
            unsafe {
                if self.req.0 != null_request().0 {
                    ffi::MPI_Cancel(&mut self.req);
                    ffi::MPI_Request_free(&mut self.req);
                }
            }
            std::mem::forget(buf);
        }
    }
}

#[derive(Debug)]
enum Payload {
    Pooled(Box<[u8]>),
    Owned(Vec<u8>),
}

/// A received message (its encoded bytes; see [`protocol::decode`]).
#[derive(Debug)]
pub struct Message {
    bytes: Payload,
    start: usize,
    end: usize,
}

impl std::ops::Deref for Message {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.bytes {
            Payload::Pooled(b) => &b[self.start..self.end],
            Payload::Owned(v) => &v[self.start..self.end],
        }
    }
}

impl Drop for Message {
    fn drop(&mut self) {
        if let Payload::Pooled(b) = std::mem::replace(&mut self.bytes, Payload::Owned(Vec::new())) {
            give_buffer(b);
        }
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
