//! The MPI driver: one heartbeat thread per process running [`Core`] over a private
//! duplicate of the user's communicator, and the public [`Detector`] handle.
//!
//! # Concurrency design (why the locks and orderings are safe)
//! * The heartbeat thread owns the [`Core`] and the heartbeat communicator outright; no
//!   other thread touches either. Other threads talk to it only through `Shared`:
//!   - `commands` (mutex-protected queue): user broadcasts, drained once per timestep;
//!   - `states` (RwLock): the published view (ALIVE/DEAD per rank). The heartbeat thread is
//!     the only writer. It updates `states` *before* running the callbacks of the
//!     corresponding notice, so a callback (or any thread woken by one) that asks
//!     `state(rank)` already sees the new state;
//!   - `callbacks` (mutex): the list is cloned (a vector of `Arc`s) before the callbacks run
//!     and the lock is released, so a callback may register another callback or query the
//!     detector without deadlocking;
//!   - `stop` (AtomicBool, SeqCst): checked once per timestep; `stop()` sets it and joins.
//! * The thread never blocks in MPI: it sends with `MPI_Isend` on buffers it owns and tests
//!   them each timestep, and it receives only messages already matched by `MPI_Improbe`
//!   (small, eager messages, fully arrived). A send to a rank declared dead is released with
//!   `MPI_Request_free` and its buffer leaked on purpose (MPI may still read it).
//! * A panic inside a callback is caught and reported on stderr; a panic in the thread
//!   itself is caught, recorded, and returned by [`Detector::stop`]. The thread never
//!   takes the process down.
//! * MPI is called from several threads at once, which needs `MPI_THREAD_MULTIPLE`;
//!   [`Detector::start`] checks it.

use std::collections::BTreeSet;
use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use mpi::ffi;
use mpi::raw::AsRaw;
use mpi::topology::Communicator;
use parking_lot::{Mutex, RwLock};
use thiserror::Error;

use crate::core::{wire, Core, CoreConfig, Msg, Net, Ring, Time};
use crate::{CommState, Config, Notice, ProcState};

/// Number of spare parent communicators for shrink rounds.
pub(crate) const SHRINK_SPARES: usize = 6;

/// Tag of heartbeat-protocol messages on the detector's private communicator.
const HB_TAG: c_int = 7;

/// A raw communicator handle shared between threads.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawComm(pub(crate) ffi::MPI_Comm);
// SAFETY: an MPI_Comm is a handle to an object owned by the MPI library; with
// MPI_THREAD_MULTIPLE (checked in Detector::start) MPI allows any thread to use it.
unsafe impl Send for RawComm {}
// SAFETY: as above; MPI serialises concurrent use internally under MPI_THREAD_MULTIPLE.
unsafe impl Sync for RawComm {}

impl RawComm {
    /// The raw handle.
    pub(crate) fn raw(self) -> ffi::MPI_Comm {
        self.0
    }
}

/// Could not start the detector.
#[derive(Debug, Error)]
pub enum StartError {
    /// MPI was not initialised with `MPI_THREAD_MULTIPLE`.
    #[error("ft-detector needs MPI_THREAD_MULTIPLE, MPI provides {0:?}")]
    ThreadLevel(mpi::Threading),
    /// The thread could not be spawned.
    #[error("cannot spawn the heartbeat thread: {0}")]
    Spawn(#[from] std::io::Error),
}

/// Errors of [`Detector::broadcast`].
#[derive(Debug, Error, PartialEq, Eq)]
pub enum BroadcastError {
    /// The detector is disabled or stopped.
    #[error("the failure detector is not running")]
    NotRunning,
    /// Only CHECKPOINT, CHECKPOINT_DONE and FAILURE(rank) may be broadcast by users.
    #[error("{0:?} cannot be broadcast by a user")]
    NotAllowed(Notice),
}

/// Error of [`Detector::stop`].
#[derive(Debug, Error)]
pub enum StopError {
    /// The heartbeat thread panicked; the message is the panic's.
    #[error("the heartbeat thread panicked: {0}")]
    Panicked(String),
}

/// Counters of a running detector.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DetectorStats {
    /// Broadcast messages this rank sent (originated, forwarded, repaired).
    pub bcast_msgs: u64,
    /// Broadcast messages re-sent because a relay died.
    pub relay_repairs: u64,
    /// View-repair messages sent.
    pub view_msgs: u64,
    /// Heartbeats sent.
    pub beats: u64,
}

type Callback = Arc<dyn Fn(Notice) + Send + Sync>;

pub(crate) struct Shared {
    pub(crate) size: usize,
    pub(crate) rank: i32,
    states: RwLock<Vec<ProcState>>,
    /// Incremented after every published state change (lets waiters check cheaply).
    pub(crate) changes: AtomicU64,
    callbacks: Mutex<Vec<Callback>>,
    commands: Mutex<Vec<Notice>>,
    stop: AtomicBool,
    panicked: Mutex<Option<String>>,
    stats: Mutex<DetectorStats>,
    neighbours: Mutex<(Option<u32>, Option<u32>)>,
}

impl Shared {
    fn state(&self, rank: i32) -> ProcState {
        if rank < 0 {
            return ProcState::Dead;
        }
        self.states
            .read()
            .get(rank as usize)
            .copied()
            .unwrap_or(ProcState::Dead)
    }
}

/// The failure detector of one process: a heartbeat thread plus the queries, callbacks and
/// fault-aware helpers built on it. Share it between threads by reference or in an `Arc`.
pub struct Detector {
    shared: Arc<Shared>,
    enabled: bool,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Private duplicate for the shrink protocol.
    pub(crate) ctl: Option<RawComm>,
    /// Parents for `MPI_Comm_create_group`, created at start while everyone is alive, in
    /// increasing context-id order; shrink round r uses `spares[len-1-r]` (see fault_aware).
    pub(crate) spares: Vec<RawComm>,
    pub(crate) shrink_epoch: AtomicU64,
    /// Shrink rounds abandoned so far (each consumed a spare parent communicator).
    pub(crate) shrink_rounds_lost: AtomicU64,
    config: Config,
}

impl std::fmt::Debug for Detector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Detector")
            .field("rank", &self.shared.rank)
            .field("size", &self.shared.size)
            .field("enabled", &self.enabled)
            .field("config", &self.config)
            .finish()
    }
}

fn dup(comm: &impl Communicator) -> RawComm {
    let d = comm.duplicate();
    let raw = d.as_raw();
    // Deliberately never freed: MPI_Comm_free after a failure may touch dead peers, and a
    // detector lives as long as the process in practice.
    std::mem::forget(d);
    RawComm(raw)
}

impl Detector {
    /// Start the detector on every rank of `comm` (collective: every rank must call it, as
    /// it duplicates `comm`). With `cfg.enabled == false` nothing is started and every rank
    /// stays ALIVE.
    pub fn start(comm: &impl Communicator, cfg: Config) -> Result<Detector, StartError> {
        let size = comm.size() as usize;
        let rank = comm.rank();
        let shared = Arc::new(Shared {
            size,
            rank,
            states: RwLock::new(vec![ProcState::Alive; size]),
            changes: AtomicU64::new(0),
            callbacks: Mutex::new(Vec::new()),
            commands: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            panicked: Mutex::new(None),
            stats: Mutex::new(DetectorStats::default()),
            neighbours: Mutex::new((None, None)),
        });
        if !cfg.enabled {
            return Ok(Detector {
                shared,
                enabled: false,
                thread: Mutex::new(None),
                ctl: None,
                spares: Vec::new(),
                shrink_epoch: AtomicU64::new(0),
                shrink_rounds_lost: AtomicU64::new(0),
                config: cfg,
            });
        }
        let level = mpi::environment::threading_support();
        if level != mpi::Threading::Multiple {
            return Err(StartError::ThreadLevel(level));
        }
        let hb = dup(comm);
        let ctl = dup(comm);
        let spares: Vec<RawComm> = (0..SHRINK_SPARES).map(|_| dup(comm)).collect();
        let sh = shared.clone();
        let c2 = cfg.clone();
        let handle = std::thread::Builder::new()
            .name("ft-heartbeat".into())
            .spawn(move || {
                let sh2 = sh.clone();
                let r = catch_unwind(AssertUnwindSafe(move || heartbeat_thread(hb, sh2, c2)));
                if let Err(p) = r {
                    let msg = panic_message(&p);
                    eprintln!("ft-detector[{}]: heartbeat thread panicked: {msg}", sh.rank);
                    *sh.panicked.lock() = Some(msg);
                }
            })?;
        Ok(Detector {
            shared,
            enabled: true,
            thread: Mutex::new(Some(handle)),
            ctl: Some(ctl),
            spares,
            shrink_epoch: AtomicU64::new(0),
            shrink_rounds_lost: AtomicU64::new(0),
            config: cfg,
        })
    }

    /// This process's rank in the communicator the detector was started on.
    pub fn rank(&self) -> i32 {
        self.shared.rank
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.shared.size
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Whether the heartbeat thread was started (false when disabled).
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Register a callback for every notice. It runs on the heartbeat thread: keep it short
    /// and never block in it on MPI. Every live rank gets every notice exactly once, after
    /// [`Detector::state`] already reflects it.
    pub fn on_notice(&self, f: impl Fn(Notice) + Send + Sync + 'static) {
        self.shared.callbacks.lock().push(Arc::new(f));
    }

    /// State of `rank` in this process's view (ranks out of range are DEAD).
    pub fn state(&self, rank: i32) -> ProcState {
        self.shared.state(rank)
    }

    /// VALID while no rank is dead in this process's view, INVALID otherwise (use
    /// [`Detector::shrink`] to get a working communicator).
    pub fn comm_state(&self) -> CommState {
        if self.shared.states.read().contains(&ProcState::Dead) {
            CommState::Invalid
        } else {
            CommState::Valid
        }
    }

    /// Ranks dead in this process's view.
    pub fn dead_ranks(&self) -> BTreeSet<i32> {
        self.shared
            .states
            .read()
            .iter()
            .enumerate()
            .filter(|(_, s)| **s == ProcState::Dead)
            .map(|(r, _)| r as i32)
            .collect()
    }

    /// Ranks alive in this process's view.
    pub fn live_ranks(&self) -> Vec<i32> {
        self.shared
            .states
            .read()
            .iter()
            .enumerate()
            .filter(|(_, s)| **s == ProcState::Alive)
            .map(|(r, _)| r as i32)
            .collect()
    }

    /// A counter that changes whenever a state changes (cheap to poll).
    pub fn change_count(&self) -> u64 {
        self.shared.changes.load(Ordering::Acquire)
    }

    /// Fault-tolerant broadcast of `notice` to every live rank (this one included; it gets
    /// its own callback too). `Notice::Failure(r)` declares `r` dead, as if this rank had
    /// detected it. Sent at the heartbeat thread's next timestep.
    pub fn broadcast(&self, notice: Notice) -> Result<(), BroadcastError> {
        if !self.enabled || self.shared.stop.load(Ordering::SeqCst) {
            return Err(BroadcastError::NotRunning);
        }
        match notice {
            Notice::FalsePositive(_) => return Err(BroadcastError::NotAllowed(notice)),
            Notice::Failure(r)
                if r < 0 || r as usize >= self.shared.size || r == self.shared.rank =>
            {
                return Err(BroadcastError::NotAllowed(notice))
            }
            _ => {}
        }
        self.shared.commands.lock().push(notice);
        Ok(())
    }

    /// Counters of this rank's detector.
    pub fn stats(&self) -> DetectorStats {
        *self.shared.stats.lock()
    }

    /// (emitter, observer) of this rank in the ring: whom it watches and whom it beats to.
    pub fn neighbours(&self) -> (Option<i32>, Option<i32>) {
        let (e, o) = *self.shared.neighbours.lock();
        (e.map(|x| x as i32), o.map(|x| x as i32))
    }

    /// Stop the heartbeat thread and wait for it (at most about one timestep). Never
    /// blocks on MPI, so it returns even if ranks are dead. Idempotent.
    pub fn stop(&self) -> Result<(), StopError> {
        self.shared.stop.store(true, Ordering::SeqCst);
        let handle = self.thread.lock().take();
        if let Some(h) = handle {
            if h.thread().id() == std::thread::current().id() {
                // called from a callback, on the heartbeat thread itself: it stops after
                // the current timestep; joining ourselves would deadlock.
            } else {
                let _ = h.join();
            }
        }
        match self.shared.panicked.lock().clone() {
            Some(m) => Err(StopError::Panicked(m)),
            None => Ok(()),
        }
    }
}

impl Drop for Detector {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".into()
    }
}

struct PendingSend {
    req: ffi::MPI_Request,
    buf: Vec<u8>,
    to: u32,
}

struct MpiNet<'a> {
    comm: RawComm,
    pending: &'a mut Vec<PendingSend>,
    shared: &'a Shared,
}

impl Net for MpiNet<'_> {
    fn send(&mut self, to: u32, msg: Msg) {
        let buf = wire::encode(&msg);
        let mut req: ffi::MPI_Request = unsafe { ffi::RSMPI_REQUEST_NULL };
        // SAFETY: `buf` is owned by the PendingSend pushed below and outlives the request
        // (it is kept until MPI_Test completes it, or leaked); `to` < size of `comm`.
        let rc = unsafe {
            ffi::MPI_Isend(
                buf.as_ptr() as *const _,
                buf.len() as c_int,
                ffi::RSMPI_UINT8_T,
                to as c_int,
                HB_TAG,
                self.comm.0,
                &mut req,
            )
        };
        if rc == ffi::MPI_SUCCESS as c_int {
            self.pending.push(PendingSend { req, buf, to });
        }
    }

    fn notice(&mut self, notice: Notice) {
        let change = match notice {
            Notice::Failure(r) => Some((r, ProcState::Dead)),
            Notice::FalsePositive(r) => Some((r, ProcState::Alive)),
            _ => None,
        };
        if let Some((r, s)) = change {
            if let Some(slot) = self.shared.states.write().get_mut(r as usize) {
                *slot = s;
            }
            self.shared.changes.fetch_add(1, Ordering::AcqRel);
        }
        let cbs: Vec<Callback> = self.shared.callbacks.lock().clone();
        for cb in cbs {
            if let Err(p) = catch_unwind(AssertUnwindSafe(|| cb(notice))) {
                eprintln!(
                    "ft-detector[{}]: a notice callback panicked: {}",
                    self.shared.rank,
                    panic_message(&p)
                );
            }
        }
    }
}

/// Receive every message already arrived on `comm` (tag HB_TAG), without blocking.
fn poll_messages(comm: RawComm, mut f: impl FnMut(u32, Vec<u8>)) {
    for _ in 0..100_000 {
        let mut flag: c_int = 0;
        // SAFETY: plain out-parameters; MPI_Message/MPI_Status are POD written by MPI.
        let mut msg: ffi::MPI_Message = unsafe { std::mem::zeroed() };
        let mut st: ffi::MPI_Status = unsafe { std::mem::zeroed() };
        // SAFETY: `comm` is a live communicator (never freed); pointers are to locals.
        unsafe {
            ffi::MPI_Improbe(
                ffi::RSMPI_ANY_SOURCE,
                HB_TAG,
                comm.0,
                &mut flag,
                &mut msg,
                &mut st,
            )
        };
        if flag == 0 {
            return;
        }
        let mut count: c_int = 0;
        // SAFETY: `st` was filled by MPI_Improbe above.
        unsafe { ffi::MPI_Get_count(&st, ffi::RSMPI_UINT8_T, &mut count) };
        let mut buf = vec![0u8; count.max(0) as usize];
        // SAFETY: `msg` is the matched message from MPI_Improbe, `buf` holds `count` bytes;
        // a matched small message has fully arrived so MPI_Mrecv returns promptly.
        unsafe {
            ffi::MPI_Mrecv(
                buf.as_mut_ptr() as *mut _,
                count,
                ffi::RSMPI_UINT8_T,
                &mut msg,
                &mut st,
            )
        };
        f(st.MPI_SOURCE as u32, buf);
    }
}

fn heartbeat_thread(comm: RawComm, shared: Arc<Shared>, cfg: Config) {
    let start = Instant::now();
    let now_us = || start.elapsed().as_micros() as Time;
    let ts = cfg.timestep;
    let core_cfg = CoreConfig::new(
        cfg.period.as_micros() as Time,
        cfg.timeout.as_micros() as Time,
        ts.as_micros() as Time,
        cfg.bcast,
    );
    let ring = Arc::new(Ring::new(shared.size, cfg.shuffle));
    let mut core = Core::new(shared.rank as u32, ring, core_cfg, now_us());
    let mut pending: Vec<PendingSend> = Vec::new();
    let mut inbox: Vec<(u32, Vec<u8>)> = Vec::new();
    // Every round of this loop is short (no MPI wait): it must keep going (the `watchdog` crate).
    let beat = watchdog::global().beat("ft-heartbeat", "a round of the heartbeat");
    while !shared.stop.load(Ordering::SeqCst) {
        beat.tick();
        let tick_start = Instant::now();
        {
            let mut net = MpiNet {
                comm,
                pending: &mut pending,
                shared: &shared,
            };
            let cmds: Vec<Notice> = std::mem::take(&mut *shared.commands.lock());
            for c in cmds {
                core.user_broadcast(c, now_us(), &mut net);
            }
            poll_messages(comm, |from, buf| inbox.push((from, buf)));
            for (from, buf) in inbox.drain(..) {
                match wire::decode(&buf) {
                    Some(m) => core.on_message(now_us(), from, m, &mut net),
                    None => eprintln!(
                        "ft-detector[{}]: malformed message from {from}",
                        shared.rank
                    ),
                }
            }
            core.on_tick(now_us(), &mut net);
        }
        // complete finished sends; abandon those to dead ranks
        pending.retain_mut(|p| {
            let mut flag: c_int = 0;
            // SAFETY: `p.req` is an active request created by MPI_Isend.
            unsafe { ffi::MPI_Test(&mut p.req, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
            if flag != 0 {
                return false;
            }
            if core.is_dead(p.to) {
                // SAFETY: freeing an active send request is allowed; the buffer must stay
                // valid until MPI is done with it, so it is leaked.
                unsafe { ffi::MPI_Request_free(&mut p.req) };
                std::mem::forget(std::mem::take(&mut p.buf));
                return false;
            }
            true
        });
        {
            let s = core.stats;
            *shared.stats.lock() = DetectorStats {
                bcast_msgs: s.bcast_msgs,
                relay_repairs: s.relay_repairs,
                view_msgs: s.view_msgs,
                beats: s.beats,
            };
            *shared.neighbours.lock() = (core.emitter(), core.observer());
        }
        // idle: sleep until the next timestep
        let spent = tick_start.elapsed();
        if spent < ts {
            std::thread::sleep(ts - spent);
        }
    }
    // Unfinished sends (to slow or dead ranks): release the requests, leak the buffers.
    for mut p in pending {
        // SAFETY: as above.
        unsafe { ffi::MPI_Request_free(&mut p.req) };
        std::mem::forget(p.buf);
    }
}
