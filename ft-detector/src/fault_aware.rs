//! Fault-aware MPI: waits, tests, probes, sends, receives and barriers that return an
//! error instead of blocking forever when the peer (or, for collectives, any member) is
//! declared dead by the detector; and the survivors' communicator shrink.
//!
//! Every wait is a loop of non-blocking tests with exponential back-off (sleeping, never
//! spinning: four ranks may share two cores). Peers are ranks of the communicator the
//! detector was started on; pass requests on that communicator (or on one with the same
//! rank numbering, such as a duplicate).
//!
//! When a peer dies, a request cannot be completed or dropped (rsmpi panics when an
//! incomplete request is dropped), so it is handed back in [`PeerDead`]. Requests whose
//! buffers live forever (`'static`, e.g. leaked or owned here) can be released with
//! [`abandon`]. The owned-buffer helpers ([`send_or_dead`], [`recv_or_dead`]) do that
//! themselves: on a failure they free the request and leak the buffer, which MPI may still
//! touch if the "dead" peer was only stalled.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::os::raw::c_int;
use std::time::Duration;

use mpi::ffi;
use mpi::point_to_point::{Source, Status};
use mpi::raw::FromRaw;
use mpi::request::{Request, Scope, StaticScope};
use mpi::topology::{Communicator, SimpleCommunicator};
use thiserror::Error;

use crate::detector::RawComm;
use crate::{Detector, ProcState};

pub use poll_backoff::Backoff;

/// The back-off between tests of a request: sleeps from 10 us doubling up to 2 ms, never
/// spinning (four ranks may share two cores).
pub fn default_backoff() -> Backoff {
    Backoff::sleeping(Duration::from_micros(10), Duration::from_millis(2))
}

/// A peer (or a member of a collective) was declared dead before the operation completed.
/// `request` gives the still-active request back (or `()` for helpers that released it).
pub struct PeerDead<R = ()> {
    /// The dead rank.
    pub rank: i32,
    /// The incomplete request.
    pub request: R,
}

impl<R> fmt::Debug for PeerDead<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerDead")
            .field("rank", &self.rank)
            .finish_non_exhaustive()
    }
}
impl<R> fmt::Display for PeerDead<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rank {} was declared dead before the operation completed",
            self.rank
        )
    }
}
impl<R> std::error::Error for PeerDead<R> {}

impl<R> PeerDead<R> {
    /// Drop the request part (after releasing it, e.g. with [`abandon`]).
    pub fn without_request(self) -> (PeerDead, R) {
        (
            PeerDead {
                rank: self.rank,
                request: (),
            },
            self.request,
        )
    }
}

/// Result of [`test_or_dead`].
#[derive(Debug)]
pub enum TestOutcome<R> {
    /// The request completed.
    Complete(Status),
    /// Still in progress; here it is back.
    Pending(R),
    /// The peer is dead; the request is still active.
    PeerDead(PeerDead<R>),
}

fn first_dead(det: &Detector, members: &[i32]) -> Option<i32> {
    members
        .iter()
        .copied()
        .find(|&m| det.state(m) == ProcState::Dead)
}

/// Test `req` once: complete, pending, or its peer is dead.
pub fn test_or_dead<'a, D: ?Sized, S: Scope<'a>>(
    det: &Detector,
    req: Request<'a, D, S>,
    peer: i32,
) -> TestOutcome<Request<'a, D, S>> {
    match req.test() {
        Ok(st) => TestOutcome::Complete(st),
        Err(req) => {
            if det.state(peer) == ProcState::Dead {
                TestOutcome::PeerDead(PeerDead {
                    rank: peer,
                    request: req,
                })
            } else {
                TestOutcome::Pending(req)
            }
        }
    }
}

/// Wait for `req` (a point-to-point request with `peer`) with the default back-off;
/// returns `Err` as soon as the detector reports `peer` dead.
pub fn wait_or_dead<'a, D: ?Sized, S: Scope<'a>>(
    det: &Detector,
    req: Request<'a, D, S>,
    peer: i32,
) -> Result<Status, PeerDead<Request<'a, D, S>>> {
    wait_members_or_dead(det, req, &[peer], default_backoff())
}

/// Wait for a collective request (e.g. `immediate_barrier`, `immediate_broadcast_into`);
/// returns `Err` as soon as any of `members` (all ranks of the detector if `None`) is dead.
pub fn wait_collective_or_dead<'a, D: ?Sized, S: Scope<'a>>(
    det: &Detector,
    req: Request<'a, D, S>,
    members: Option<&[i32]>,
) -> Result<Status, PeerDead<Request<'a, D, S>>> {
    let all: Vec<i32>;
    let m = match members {
        Some(m) => m,
        None => {
            all = (0..det.size() as i32).collect();
            &all
        }
    };
    wait_members_or_dead(det, req, m, default_backoff())
}

/// The general form: wait for `req` while none of `members` is dead, with `backoff`.
pub fn wait_members_or_dead<'a, D: ?Sized, S: Scope<'a>>(
    det: &Detector,
    mut req: Request<'a, D, S>,
    members: &[i32],
    mut backoff: Backoff,
) -> Result<Status, PeerDead<Request<'a, D, S>>> {
    loop {
        match req.test() {
            Ok(st) => return Ok(st),
            Err(r) => req = r,
        }
        if let Some(d) = first_dead(det, members) {
            return Err(PeerDead {
                rank: d,
                request: req,
            });
        }
        backoff.snooze();
    }
}

/// Release an active request whose buffer lives forever. The operation may still complete
/// in the background (if the peer was only stalled); its result is lost.
pub fn abandon<D: ?Sized>(req: Request<'static, D, StaticScope>) {
    // SAFETY: the buffer is 'static so it outlives whatever MPI still does with it;
    // MPI_Request_free on an active request is allowed by the standard.
    unsafe {
        let (mut raw, _, _) = req.into_raw();
        ffi::MPI_Request_free(&mut raw);
    }
}

/// Fault-aware probe: wait until a message with `tag` from `peer` is available, or `peer`
/// is dead.
pub fn probe_or_dead(
    det: &Detector,
    comm: &impl Communicator,
    peer: i32,
    tag: i32,
) -> Result<Status, PeerDead> {
    let mut pacer = default_backoff();
    loop {
        if let Some(st) = comm.process_at_rank(peer).immediate_probe_with_tag(tag) {
            return Ok(st);
        }
        if det.state(peer) == ProcState::Dead {
            return Err(PeerDead {
                rank: peer,
                request: (),
            });
        }
        pacer.snooze();
    }
}

fn wait_raw(
    det: &Detector,
    req: &mut ffi::MPI_Request,
    peers: &[i32],
    pacer: &mut Backoff,
) -> Result<ffi::MPI_Status, i32> {
    loop {
        let mut flag: c_int = 0;
        // SAFETY: zeroed MPI_Status is a valid out-parameter.
        let mut st: ffi::MPI_Status = unsafe { std::mem::zeroed() };
        // SAFETY: `req` is an active request created by the caller.
        unsafe { ffi::MPI_Test(req, &mut flag, &mut st) };
        if flag != 0 {
            return Ok(st);
        }
        if let Some(d) = first_dead(det, peers) {
            return Err(d);
        }
        pacer.snooze();
    }
}

/// Fault-aware send of an owned buffer to `peer` on `comm`. Returns when the send is
/// complete, or `Err` once `peer` is declared dead (the request is then released and the
/// buffer leaked).
pub fn send_or_dead(
    det: &Detector,
    comm: &impl Communicator,
    peer: i32,
    tag: i32,
    data: Vec<u8>,
) -> Result<(), PeerDead> {
    let mut req: ffi::MPI_Request = unsafe { ffi::RSMPI_REQUEST_NULL };
    // SAFETY: `data` stays alive until the request completes or is leaked below.
    unsafe {
        ffi::MPI_Isend(
            data.as_ptr() as *const _,
            data.len() as c_int,
            ffi::RSMPI_UINT8_T,
            peer,
            tag,
            comm.as_raw(),
            &mut req,
        )
    };
    let mut pacer = default_backoff();
    match wait_raw(det, &mut req, &[peer], &mut pacer) {
        Ok(_) => Ok(()),
        Err(d) => {
            // SAFETY: active request freed; buffer leaked so it outlives any MPI access.
            unsafe { ffi::MPI_Request_free(&mut req) };
            std::mem::forget(data);
            Err(PeerDead {
                rank: d,
                request: (),
            })
        }
    }
}

/// Fault-aware receive of a byte message with `tag` from `peer` on `comm`.
pub fn recv_or_dead(
    det: &Detector,
    comm: &impl Communicator,
    peer: i32,
    tag: i32,
) -> Result<(Vec<u8>, Status), PeerDead> {
    let mut pacer = default_backoff();
    let raw = comm.as_raw();
    let (mut msg, st) = loop {
        let mut flag: c_int = 0;
        // SAFETY: POD out-parameters.
        let mut msg: ffi::MPI_Message = unsafe { std::mem::zeroed() };
        let mut st: ffi::MPI_Status = unsafe { std::mem::zeroed() };
        // SAFETY: `raw` is the live communicator borrowed from `comm`.
        unsafe { ffi::MPI_Improbe(peer, tag, raw, &mut flag, &mut msg, &mut st) };
        if flag != 0 {
            break (msg, st);
        }
        if det.state(peer) == ProcState::Dead {
            return Err(PeerDead {
                rank: peer,
                request: (),
            });
        }
        pacer.snooze();
    };
    let mut count: c_int = 0;
    // SAFETY: `st` was filled by MPI_Improbe.
    unsafe { ffi::MPI_Get_count(&st, ffi::RSMPI_UINT8_T, &mut count) };
    let mut buf = vec![0u8; count.max(0) as usize];
    let mut req: ffi::MPI_Request = unsafe { ffi::RSMPI_REQUEST_NULL };
    // SAFETY: `msg` is the matched message; `buf` holds `count` bytes and outlives the request.
    unsafe {
        ffi::MPI_Imrecv(
            buf.as_mut_ptr() as *mut _,
            count,
            ffi::RSMPI_UINT8_T,
            &mut msg,
            &mut req,
        )
    };
    match wait_raw(det, &mut req, &[peer], &mut pacer) {
        Ok(st) => Ok((buf, Status::from_raw(st))),
        Err(d) => {
            // SAFETY: as in send_or_dead.
            unsafe { ffi::MPI_Request_free(&mut req) };
            std::mem::forget(buf);
            Err(PeerDead {
                rank: d,
                request: (),
            })
        }
    }
}

/// Fault-aware barrier over `comm` (whose ranks are the detector's): `Err` as soon as any
/// rank is dead. After an `Err`, `comm` is unusable for collectives: shrink it.
pub fn barrier_or_dead(det: &Detector, comm: &impl Communicator) -> Result<(), PeerDead> {
    use mpi::collective::CommunicatorCollectives;
    let req = comm.immediate_barrier();
    match wait_collective_or_dead(det, req, None) {
        Ok(_) => Ok(()),
        Err(e) => {
            let (e, req) = e.without_request();
            // Freeing an active collective request is not allowed by MPI: leak it instead
            // (the handle only; there is no buffer).
            std::mem::forget(req);
            Err(e)
        }
    }
}

/// Errors of [`Detector::shrink`].
#[derive(Debug, Error, PartialEq, Eq)]
pub enum ShrinkError {
    /// The detector is disabled or stopped.
    #[error("the failure detector is not running")]
    NotRunning,
    /// The survivors consider this rank dead.
    #[error("this rank was excluded by the survivors")]
    Excluded,
    /// MPI refused to create the communicator.
    #[error("MPI_Comm_create_group failed with code {0}")]
    Mpi(i32),
    /// Too many failures during the shrink.
    #[error("gave up after {0} rounds of failures during the shrink")]
    TooManyRounds(u32),
}

const MAX_ROUNDS: u32 = 64;

/// Test hook (used by `ompcluster-ftbench --die-in-shrink`): when set, this process kills
/// itself with SIGKILL in [`Detector::shrink`] after the member list is decided and just
/// before `MPI_Comm_create_group`, to check that the other survivors still complete.
#[doc(hidden)]
pub static DIE_BEFORE_CREATE_GROUP: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Test hook: called right before dying by [`DIE_BEFORE_CREATE_GROUP`] (to record the time).
#[doc(hidden)]
pub static BEFORE_DYING: parking_lot::Mutex<Option<Box<dyn Fn() + Send>>> =
    parking_lot::Mutex::new(None);

fn enc(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
fn dec(b: &[u8]) -> Vec<i32> {
    b.chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// A borrowed view of a raw communicator as an rsmpi communicator (never freed).
struct Borrowed(std::mem::ManuallyDrop<SimpleCommunicator>);
impl Borrowed {
    fn new(c: RawComm) -> Borrowed {
        // SAFETY: `c` is a live duplicate communicator owned by the detector; ManuallyDrop
        // keeps rsmpi from freeing it.
        Borrowed(std::mem::ManuallyDrop::new(unsafe {
            SimpleCommunicator::from_raw(c.0)
        }))
    }
}

impl Detector {
    /// Build a working communicator of the survivors (collective over all survivors: every
    /// live rank must call it, the same number of times).
    ///
    /// Protocol: the lowest live rank leads; every survivor sends it its dead set; once it has
    /// heard from every rank it considers alive (ranks dying meanwhile are dropped), it sends
    /// the member list (all ranks minus the union of the dead sets) to each member, and all
    /// members call `MPI_Comm_create_group`, which involves the members only. If the leader
    /// dies, the next live rank takes over. If a member dies during `MPI_Comm_create_group`
    /// (which would block forever), the call is left behind on a helper thread and the
    /// protocol starts a new round, with a fresh tag and a fresh parent communicator of lower
    /// context id (Open MPI progresses only the pending creation with the lowest parent
    /// context id, so a retry on the same parent would wait behind the stuck one). The spare
    /// parents are made at [`Detector::start`]: over the life of a process, at most 5 rounds
    /// can be lost this way before `shrink` returns [`ShrinkError::TooManyRounds`].
    pub fn shrink(&self) -> Result<SimpleCommunicator, ShrinkError> {
        let ctl = self.ctl.ok_or(ShrinkError::NotRunning)?;
        let epoch = self
            .shrink_epoch
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst) as i32
            % 5000;
        let tag_req = 1000 + 2 * epoch;
        let tag_dec = 1001 + 2 * epoch;
        let me = self.rank();
        let comm = Borrowed::new(ctl);
        let comm = &*comm.0;
        let mut round: u32 = 0;
        // dead sets reported to us (as leader) in this epoch, by reporter
        let mut heard: BTreeMap<i32, BTreeSet<i32>> = BTreeMap::new();
        loop {
            if round >= MAX_ROUNDS {
                return Err(ShrinkError::TooManyRounds(round));
            }
            let live: Vec<i32> = self.live_ranks();
            let leader = live
                .iter()
                .copied()
                .filter(|&r| r != me)
                .chain([me])
                .min()
                .unwrap_or(me);
            let members: Vec<i32>;
            if leader == me {
                let mut pacer = default_backoff();
                loop {
                    while let Some(st) = comm.any_process().immediate_probe_with_tag(tag_req) {
                        let src = st.source_rank();
                        let (buf, _) = match recv_or_dead(self, comm, src, tag_req) {
                            Ok(x) => x,
                            Err(_) => break,
                        };
                        let v = dec(&buf);
                        if let Some((&r, dead)) = v.split_first() {
                            round = round.max(r as u32);
                            heard.insert(src, dead.iter().copied().filter(|&d| d != me).collect());
                        }
                    }
                    let live: Vec<i32> = self.live_ranks();
                    if live.iter().all(|&r| r == me || heard.contains_key(&r)) {
                        let mut excluded: BTreeSet<i32> = self.dead_ranks();
                        excluded.remove(&me);
                        for (src, d) in &heard {
                            if live.contains(src) {
                                excluded.extend(d.iter().copied());
                            }
                        }
                        members = (0..self.size() as i32)
                            .filter(|r| !excluded.contains(r))
                            .collect();
                        break;
                    }
                    pacer.snooze();
                }
                let mut msg = vec![round as i32];
                msg.extend(&members);
                for &m in members.iter().filter(|&&m| m != me) {
                    let _ = send_or_dead(self, comm, m, tag_dec, enc(&msg));
                }
            } else {
                let mut req = vec![round as i32];
                req.extend(self.dead_ranks());
                if send_or_dead(self, comm, leader, tag_req, enc(&req)).is_err() {
                    continue; // leader died: next leader
                }
                let decided = loop {
                    match recv_or_dead(self, comm, leader, tag_dec) {
                        Ok((buf, _)) => {
                            let v = dec(&buf);
                            if let Some((&r, m)) = v.split_first() {
                                if r as u32 >= round {
                                    round = r as u32;
                                    break Some(m.to_vec());
                                }
                            }
                        }
                        Err(_) => break None,
                    }
                };
                match decided {
                    Some(m) => members = m,
                    None => continue, // leader died: next leader, same round
                }
            }
            if !members.contains(&me) {
                return Err(ShrinkError::Excluded);
            }
            if DIE_BEFORE_CREATE_GROUP.load(std::sync::atomic::Ordering::SeqCst) {
                if let Some(f) = BEFORE_DYING.lock().as_ref() {
                    f();
                }
                // SAFETY: raising SIGKILL on ourselves (test hook).
                unsafe { libc::raise(libc::SIGKILL) };
            }
            if std::env::var_os("FT_DETECTOR_DEBUG").is_some() {
                eprintln!(
                    "ft-detector[{me}]: shrink round {round}: members {members:?}, dead {:?}",
                    self.dead_ranks()
                );
            }
            // Open MPI lets only the pending communicator creation with the lowest parent
            // context id progress; a creation stuck on a dead member would block every later
            // one on the same or a higher parent. So each round uses a fresh parent with a
            // lower context id than the previous round's.
            let used = self
                .shrink_rounds_lost
                .load(std::sync::atomic::Ordering::SeqCst) as usize
                + round as usize;
            let parent = match self.spares.len().checked_sub(1 + used) {
                Some(i) => self.spares[i],
                None => return Err(ShrinkError::TooManyRounds(round)),
            };
            match create_group(self, parent, &members, 25000 + round as i32) {
                Ok(c) => {
                    self.shrink_rounds_lost
                        .fetch_add(round as u64, std::sync::atomic::Ordering::SeqCst);
                    return Ok(c);
                }
                Err(CreateError::Mpi(code)) => return Err(ShrinkError::Mpi(code)),
                Err(CreateError::MemberDied) => round += 1,
            }
        }
    }
}

enum CreateError {
    Mpi(i32),
    MemberDied,
}

fn create_group(
    det: &Detector,
    ctl: RawComm,
    members: &[i32],
    tag: i32,
) -> Result<SimpleCommunicator, CreateError> {
    let m = members.to_vec();
    let (tx, rx) = std::sync::mpsc::channel::<(i32, RawComm)>();
    std::thread::Builder::new()
        .name("ft-shrink".into())
        .spawn(move || {
            // SAFETY: ctl is a live communicator; group handles are locals; outputs are POD.
            let ctl = ctl; // capture the Send wrapper, not its raw field
            let r = unsafe {
                let mut g: ffi::MPI_Group = std::mem::zeroed();
                ffi::MPI_Comm_group(ctl.raw(), &mut g);
                let mut sub: ffi::MPI_Group = std::mem::zeroed();
                ffi::MPI_Group_incl(g, m.len() as c_int, m.as_ptr(), &mut sub);
                let mut newcomm: ffi::MPI_Comm = std::mem::zeroed();
                let rc = ffi::MPI_Comm_create_group(ctl.raw(), sub, tag, &mut newcomm);
                ffi::MPI_Group_free(&mut sub);
                ffi::MPI_Group_free(&mut g);
                (rc, RawComm(newcomm))
            };
            let _ = tx.send(r);
        })
        .map_err(|_| CreateError::Mpi(-1))?;
    let mut pacer = Backoff::sleeping(Duration::from_micros(50), Duration::from_millis(5));
    loop {
        match rx.try_recv() {
            Ok((rc, c)) => {
                if rc != ffi::MPI_SUCCESS as c_int {
                    return Err(CreateError::Mpi(rc));
                }
                // SAFETY: a fresh intra-communicator created above, owned from now on.
                return Ok(unsafe { SimpleCommunicator::from_raw(c.0) });
            }
            Err(std::sync::mpsc::TryRecvError::Disconnected) => return Err(CreateError::Mpi(-1)),
            Err(std::sync::mpsc::TryRecvError::Empty) => {}
        }
        if first_dead(det, members).is_some() {
            // The helper thread may stay blocked forever in MPI_Comm_create_group; it is
            // detached on purpose.
            return Err(CreateError::MemberDied);
        }
        pacer.snooze();
    }
}
