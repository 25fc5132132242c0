//! The VeloC store (cargo feature `veloc`; `OMPCLUSTER_CP_USEVELOC=1` and
//! `OMPCLUSTER_CP_EXECCFG=<VeloC config>`).
//!
//! It uses VeloC's file-based interface, one client per rank
//! (`VELOC_Init_single(rank, cfg)`: no collective call, so a dead rank blocks no other;
//! `VELOC_Init` over a communicator would tie every rank to barriers at finalisation and to
//! one engine per node living in one of the ranks):
//!
//! * the first save of checkpoint `k` calls `VELOC_Checkpoint_begin("ompcluster", k)` and
//!   `VELOC_Route_file(PERSISTENT/ckpt-<k>/rank-<r>.data)`. The path handed over is where
//!   the checkpoint is to end up, one file per version; VeloC answers with its scratch file
//!   for this version (`<scratch>/ompcluster-<r>-<k>.dat`), into which every region of `k`
//!   is appended, recording offset, size and xxh3, as the embedded store does;
//! * the flush calls `VELOC_Checkpoint_end(1)` and `VELOC_Checkpoint_wait` in a background
//!   thread: VeloC's engine (in this process in sync mode, the node's `veloc-backend` in async
//!   mode) copies the scratch file to `PERSISTENT/ckpt-<k>/rank-<r>.data` and points its own
//!   `PERSISTENT/ompcluster-<r>-<k>.dat` at it (a symbolic link). The flush then checks the
//!   persistent file's size, makes it durable (fsync of file and directory, which VeloC does
//!   not do) and removes the scratch file;
//! * loading does not go through VeloC's restart path, which only brings a rank's *own* files
//!   back to its scratch directory: the records name `ckpt-<k>/rank-<r>.data` in the
//!   persistent directory and any rank reads it directly, checking xxh3, with the same
//!   [`load_region`](crate::load_region) as the embedded store, also after its saver died.
//!
//! Manifests are published by the head in VeloC's persistent directory, which is what
//! [`persistent_dir`](CheckpointStore::persistent_dir) returns (`OMPCLUSTER_CP_PERSISTENT` and
//! `OMPCLUSTER_CP_SCRATCH` are not used: VeloC's `persistent` and `scratch` keys play their
//! roles). One job per user and node uses VeloC at a time, and the async daemon is the job's
//! own: see [`veloc_node`](crate::veloc_node).
//!
//! Design note (concurrency): VeloC keeps one global client per process and documents no
//! thread safety, so every VeloC call happens with `inner` locked, and at most one store may
//! be open per process (`OPEN`). VeloC allows one checkpoint in flight per client: the waiter
//! thread holds the lock while it ends and waits for a checkpoint, so a save for the next
//! checkpoint waits until the previous flush is done. Whoever holds the lock first (waiter,
//! next save, `wait_all`, `Drop`) completes the in-flight flush; the others find nothing left
//! to do.
//!
//! VeloC's waits have no timeout, and its async engine has been seen to lose a request: the
//! client waits forever for a completion while the daemon idles. So every flush has a
//! watchdog thread: when the checkpoint's files in the persistent directory have not grown
//! for [`STALL`], it fails the flush (the head then drops that checkpoint) and marks the store
//! *wedged*: the waiter still holds `inner` inside VeloC, so from then on no call waits for
//! `inner` (every locker gives up once the store is wedged), saves and flushes fail at once,
//! and closing leaves the node without `VELOC_Finalize` (the last rank still stops the
//! daemon). Recovery then relies on the other levels (lineage, the head's copies).

use std::collections::HashSet;
use std::ffi::{c_char, c_int, c_uint, CStr, CString};
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard};

use crate::config::StoreConfig;
use crate::error::{FlushError, OpenError, SaveError};
use crate::flush::{new_flush, FlushCompleter, FlushHandle, FlushOutcome, FlushSlot};
use crate::fsutil;
use crate::layout::{self, VELOC_NAME};
use crate::record::{now_unix_ms, Checksum, CkptId, Rank, RegionId, RegionRecord};
use crate::store::{CheckpointStore, StoreKind};
use crate::veloc_cfg::read_veloc_config;
use crate::veloc_node::{NodePaths, NodeSession};
use crate::veloc_sys as sys;

/// `VELOC_SUCCESS` as documented in `veloc.h` (a macro `(0)` in recent
/// releases, a `static const int` in older ones, so not taken from the
/// generated bindings).
const VELOC_SUCCESS: c_int = 0;

/// Whether a VeloC client exists in this process.
static OPEN: AtomicBool = AtomicBool::new(false);

/// How long a flush may go without its checkpoint's persistent files growing before the
/// watchdog declares VeloC's engine stuck.
pub(crate) const STALL: Duration = Duration::from_secs(30);

/// The VeloC store. See the module documentation.
pub struct VelocStore {
    rank: Rank,
    persistent: PathBuf,
    inner: Arc<Mutex<Inner>>,
    /// Set by a flush's watchdog when VeloC stopped completing it (module documentation).
    wedged: Arc<AtomicBool>,
    /// This rank's part in the job's use of VeloC on the node; left after `VELOC_Finalize`
    /// (by `close` or `Drop`, whichever comes first).
    session: Mutex<Option<NodeSession>>,
}

impl std::fmt::Debug for VelocStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VelocStore")
            .field("rank", &self.rank)
            .field("persistent", &self.persistent)
            .finish_non_exhaustive()
    }
}

struct Inner {
    rank: Rank,
    persistent: PathBuf,
    phase: Phase,
    last_flushed: Option<CkptId>,
    in_flight: Option<InFlight>,
    slots: Vec<Arc<FlushSlot>>,
}

/// Where the client is in VeloC's begin/end protocol.
enum Phase {
    /// No VeloC checkpoint open.
    Idle,
    /// Between `VELOC_Checkpoint_begin` and `VELOC_Checkpoint_end`.
    Collecting(Collecting),
}

struct Collecting {
    ckpt: CkptId,
    file: File,
    /// VeloC's scratch file for this version.
    routed: PathBuf,
    len: u64,
    regions: Vec<Pending>,
    seen: HashSet<RegionId>,
}

struct Pending {
    region: RegionId,
    offset: u64,
    size: u64,
    checksum: Checksum,
    saved_unix_ms: u64,
}

/// A checkpoint handed to the flush, still open in VeloC: whoever completes it calls
/// `VELOC_Checkpoint_end` (the waiter thread, normally, so that a sync-mode copy does not
/// hold up the caller of `flush`) and `VELOC_Checkpoint_wait`.
struct InFlight {
    ckpt: CkptId,
    /// `None` for an abandoned checkpoint (its files are removed once VeloC is done).
    completer: Option<FlushCompleter>,
    routed: PathBuf,
    records: Vec<RegionRecord>,
    bytes: u64,
    start: Instant,
}

fn veloc_err(what: &str, rc: c_int) -> String {
    format!("{what} returned {rc} (VeloC prints its reason on its own output)")
}

impl VelocStore {
    /// Initialises VeloC for this rank with `config_file`, after checking
    /// the configuration and that its directories can be created and
    /// written, and joining the job's use of VeloC on this node.
    pub fn open(config: &StoreConfig, config_file: &Path) -> Result<Self, OpenError> {
        if OPEN.swap(true, Ordering::SeqCst) {
            return Err(OpenError::Veloc(
                "a VeloC store is already open in this process (VeloC has one client per process)"
                    .into(),
            ));
        }
        match Self::open_inner(config, config_file) {
            Ok(s) => Ok(s),
            Err(e) => {
                OPEN.store(false, Ordering::SeqCst);
                Err(e)
            }
        }
    }

    fn open_inner(config: &StoreConfig, config_file: &Path) -> Result<Self, OpenError> {
        let rank = config.rank;
        let settings = read_veloc_config(config_file).map_err(OpenError::Veloc)?;
        fsutil::usable_dir("scratch", crate::config::vars::VELOC_SCRATCH, &settings.scratch)?;
        fsutil::usable_dir("persistent", crate::config::vars::VELOC_PERSISTENT, &settings.persistent)?;
        let cfg = CString::new(config_file.as_os_str().as_bytes()).map_err(|_| {
            OpenError::Veloc(format!("{} contains a NUL byte", config_file.display()))
        })?;
        if settings.mode == crate::veloc_cfg::VelocMode::Backend {
            // VeloC's client runs it with system() and ends the process when that fails:
            // say why here instead.
            crate::veloc_node::backend_binary().map_err(OpenError::Veloc)?;
        }
        let session = NodeSession::join(NodePaths::for_user(), config.job, settings.mode, config_file, || {
            // SAFETY: `cfg` is a NUL-terminated string that outlives the call;
            // no other VeloC client exists in this process (OPEN was false).
            let rc = unsafe { sys::VELOC_Init_single(rank as c_uint, cfg.as_ptr()) };
            if rc == VELOC_SUCCESS {
                Ok(())
            } else {
                Err(veloc_err(&format!("VELOC_Init_single({rank}, {})", config_file.display()), rc))
            }
        })
        .map_err(OpenError::Veloc)?;
        tracing::debug!(rank, persistent = %settings.persistent.display(), mode = ?settings.mode, "VeloC checkpoint store opened");
        Ok(VelocStore {
            rank,
            persistent: settings.persistent.clone(),
            inner: Arc::new(Mutex::new(Inner {
                rank,
                persistent: settings.persistent,
                phase: Phase::Idle,
                last_flushed: None,
                in_flight: None,
                slots: Vec::new(),
            })),
            wedged: Arc::new(AtomicBool::new(false)),
            session: Mutex::new(Some(session)),
        })
    }
}

impl Inner {
    /// Where checkpoint `ckpt` of this rank ends up (absolute).
    fn destination(&self, ckpt: CkptId) -> PathBuf {
        self.persistent.join(layout::data_file(ckpt, self.rank))
    }

    /// Ends (if not yet done) and waits for the checkpoint in flight, if any, and completes
    /// its flush.
    fn finish_in_flight(&mut self) {
        let Some(f) = self.in_flight.take() else {
            return;
        };
        // SAFETY: the checkpoint begun for `f` is still open (nothing else ends it: the
        // phase is Idle and every path to `begin` comes through here first); calls are
        // serialised by the lock held through `&mut self`.
        let mut rc = unsafe { sys::VELOC_Checkpoint_end(i32::from(f.completer.is_some())) };
        // SAFETY: as above; no checkpoint is between begin and end now.
        let waited = unsafe { sys::VELOC_Checkpoint_wait() };
        if rc == VELOC_SUCCESS {
            rc = waited;
        }
        // The scratch copy has served its purpose whatever happened.
        let _ = std::fs::remove_file(&f.routed);
        let dest = self.destination(f.ckpt);
        let Some(completer) = f.completer else {
            // Abandoned: nothing refers to what VeloC may have copied.
            let _ = std::fs::remove_file(&dest);
            let _ = std::fs::remove_file(self.persistent.join(layout::veloc_file(f.ckpt, self.rank)));
            return;
        };
        let result = if rc != VELOC_SUCCESS {
            Err(FlushError::Veloc {
                ckpt: f.ckpt,
                message: veloc_err("VELOC_Checkpoint_end/VELOC_Checkpoint_wait", rc),
            })
        } else {
            match std::fs::metadata(&dest) {
                Ok(m) if m.len() == f.bytes => {
                    // VeloC copies without fsync: make the version durable before it counts.
                    let synced = File::open(&dest)
                        .and_then(|file| file.sync_all())
                        .and_then(|()| fsutil::fsync_dir(dest.parent().unwrap_or(&self.persistent)));
                    match synced {
                        Ok(()) => Ok(FlushOutcome {
                            ckpt: f.ckpt,
                            rank: self.rank,
                            records: f.records,
                            bytes: f.bytes,
                            duration: f.start.elapsed(),
                        }),
                        Err(source) => Err(FlushError::Io {
                            ckpt: f.ckpt,
                            op: "fsync VeloC's persistent copy",
                            path: dest,
                            source,
                        }),
                    }
                }
                Ok(m) => Err(FlushError::Veloc {
                    ckpt: f.ckpt,
                    message: format!(
                        "VeloC's persistent copy {} has {} bytes, expected {}",
                        dest.display(),
                        m.len(),
                        f.bytes
                    ),
                }),
                Err(source) => Err(FlushError::Io {
                    ckpt: f.ckpt,
                    op: "find VeloC's persistent copy",
                    path: dest,
                    source,
                }),
            }
        };
        completer.complete(result);
    }

    /// Hands the open checkpoint to the flush: with a completer it is reported, without one
    /// it is abandoned (its files are removed once VeloC is done with them).
    fn hand_over(&mut self, c: Collecting, completer: Option<FlushCompleter>, start: Instant) {
        // Invariant: a checkpoint is in flight only while the phase is Idle
        // (`begin` completes the in-flight one first), so nothing is lost here.
        debug_assert!(self.in_flight.is_none());
        let records = c
            .regions
            .iter()
            .map(|p| RegionRecord {
                region: p.region,
                ckpt: c.ckpt,
                rank: self.rank,
                size: p.size,
                checksum: p.checksum,
                file: layout::data_file(c.ckpt, self.rank),
                offset: p.offset,
                saved_unix_ms: p.saved_unix_ms,
            })
            .collect();
        if completer.is_none() {
            let _ = c.file.set_len(0);
        }
        drop(c.file);
        self.in_flight = Some(InFlight {
            ckpt: c.ckpt,
            completer,
            routed: c.routed,
            records,
            bytes: c.len,
            start,
        });
    }

    /// Abandons the open checkpoint, if any, and waits for VeloC to be done with it.
    fn abandon(&mut self) {
        if let Phase::Collecting(c) = std::mem::replace(&mut self.phase, Phase::Idle) {
            self.finish_in_flight();
            self.hand_over(c, None, Instant::now());
            self.finish_in_flight();
        }
    }

    /// `VELOC_Checkpoint_begin` + `VELOC_Route_file` for checkpoint `ckpt`.
    fn begin(&mut self, ckpt: CkptId, version: c_int) -> Result<(), SaveError> {
        self.finish_in_flight();
        let dest = self.destination(ckpt);
        let dir = dest.parent().unwrap_or(&self.persistent).to_path_buf();
        fsutil::create_private_dir_all(&dir).map_err(|source| SaveError::Io { path: dir, source })?;
        // VeloC writes into the destination without truncating it.
        match std::fs::remove_file(&dest) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(SaveError::Io { path: dest, source }),
        }
        let name = CString::new(VELOC_NAME).expect("no NUL");
        // SAFETY: `name` is NUL-terminated and outlives the call; no VeloC
        // checkpoint is open (phase Idle) and none is in flight (just waited).
        let rc = unsafe { sys::VELOC_Checkpoint_begin(name.as_ptr(), version) };
        if rc != VELOC_SUCCESS {
            return Err(SaveError::Veloc(veloc_err(
                &format!("VELOC_Checkpoint_begin({VELOC_NAME}, {ckpt})"),
                rc,
            )));
        }
        let original = CString::new(dest.as_os_str().as_bytes())
            .map_err(|_| SaveError::Veloc("persistent path contains a NUL byte".into()))?;
        // VeloC copies the routed name without a bound check: give it a PATH_MAX buffer.
        let mut routed = vec![0 as c_char; libc::PATH_MAX as usize + 1];
        // SAFETY: `original` is NUL-terminated; `routed` has PATH_MAX + 1
        // bytes, the most a path VeloC builds can use; a checkpoint is open.
        let rc = unsafe { sys::VELOC_Route_file(original.as_ptr(), routed.as_mut_ptr()) };
        // SAFETY: VeloC NUL-terminates `routed` (and the buffer was zeroed).
        let routed = unsafe { CStr::from_ptr(routed.as_ptr()) };
        let routed = PathBuf::from(std::ffi::OsStr::from_bytes(routed.to_bytes()));
        let file = if rc != VELOC_SUCCESS || routed.as_os_str().is_empty() {
            Err(SaveError::Veloc(veloc_err("VELOC_Route_file", rc)))
        } else {
            File::options()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&routed)
                .map_err(|source| SaveError::Io { path: routed.clone(), source })
        };
        match file {
            Ok(file) => {
                self.phase = Phase::Collecting(Collecting {
                    ckpt,
                    file,
                    routed,
                    len: 0,
                    regions: Vec::new(),
                    seen: HashSet::new(),
                });
                Ok(())
            }
            Err(e) => {
                // End the checkpoint opened above as abandoned.
                self.in_flight = Some(InFlight {
                    ckpt,
                            completer: None,
                    routed,
                    records: Vec::new(),
                    bytes: 0,
                    start: Instant::now(),
                });
                self.finish_in_flight();
                Err(e)
            }
        }
    }
}

impl CheckpointStore for VelocStore {
    fn kind(&self) -> StoreKind {
        StoreKind::Veloc
    }

    fn rank(&self) -> Rank {
        self.rank
    }

    fn persistent_dir(&self) -> &Path {
        &self.persistent
    }

    fn save_region(&self, ckpt: CkptId, region: RegionId, bytes: &[u8]) -> Result<(), SaveError> {
        let version = c_int::try_from(ckpt).map_err(|_| {
            SaveError::Veloc(format!("checkpoint id {ckpt} does not fit VeloC's int version"))
        })?;
        let checksum = Checksum::of(bytes);
        let mut g = self.lock().ok_or_else(|| SaveError::Veloc(WEDGED.into()))?;
        if g.last_flushed.is_some_and(|f| ckpt <= f) {
            return Err(SaveError::Closed { ckpt });
        }
        match &g.phase {
            Phase::Collecting(c) if c.ckpt == ckpt => {}
            Phase::Collecting(c) if c.ckpt > ckpt => return Err(SaveError::Closed { ckpt }),
            Phase::Collecting(_) => {
                g.abandon();
                g.begin(ckpt, version)?;
            }
            Phase::Idle => g.begin(ckpt, version)?,
        }
        let Phase::Collecting(c) = &mut g.phase else {
            unreachable!("begin sets Collecting")
        };
        if !c.seen.insert(region) {
            return Err(SaveError::Duplicate { ckpt, region });
        }
        if let Err(source) = c.file.write_all_at(bytes, c.len) {
            c.seen.remove(&region);
            return Err(SaveError::Io {
                path: c.routed.clone(),
                source,
            });
        }
        c.regions.push(Pending {
            region,
            offset: c.len,
            size: bytes.len() as u64,
            checksum,
            saved_unix_ms: now_unix_ms(),
        });
        c.len += bytes.len() as u64;
        Ok(())
    }

    fn flush(&self, ckpt: CkptId) -> Result<FlushHandle, FlushError> {
        let mut g = self.lock().ok_or_else(|| FlushError::Veloc { ckpt, message: WEDGED.into() })?;
        if g.last_flushed.is_some_and(|f| ckpt <= f) {
            return Err(FlushError::AlreadyFlushed { ckpt });
        }
        g.last_flushed = Some(ckpt);
        let start = Instant::now();
        let (handle, completer, slot) = new_flush(ckpt);
        g.slots.retain(|s| !s.is_done());
        g.slots.push(slot.clone());
        let empty = || FlushOutcome {
            ckpt,
            rank: self.rank,
            records: Vec::new(),
            bytes: 0,
            duration: start.elapsed(),
        };
        match std::mem::replace(&mut g.phase, Phase::Idle) {
            Phase::Collecting(c) if c.ckpt == ckpt => {
                g.hand_over(c, Some(completer), start);
                drop(g);
                let dir = self.persistent.join(layout::ckpt_dir(ckpt));
                let wedged = self.wedged.clone();
                let rank = self.rank;
                let watched = slot.clone();
                let watching = std::thread::Builder::new()
                    .name(format!("veloc-watch-r{rank}"))
                    .spawn(move || watch(&watched, ckpt, rank, &dir, &wedged));
                let inner = self.inner.clone();
                let spawned = std::thread::Builder::new()
                    .name(format!("veloc-wait-r{}", self.rank))
                    .spawn(move || inner.lock().finish_in_flight());
                if spawned.is_err() || watching.is_err() {
                    // No thread: complete it here (blocking) rather than never. Without a
                    // watchdog this wait is unbounded, as is VeloC's own.
                    if let Some(mut g) = self.lock() {
                        g.finish_in_flight();
                    }
                }
            }
            Phase::Collecting(c) if c.ckpt > ckpt => {
                // This rank saved nothing in `ckpt`; keep collecting the newer one.
                g.phase = Phase::Collecting(c);
                completer.complete(Ok(empty()));
            }
            Phase::Collecting(c) => {
                // An older checkpoint never flushed: abandon it.
                g.phase = Phase::Collecting(c);
                g.abandon();
                completer.complete(Ok(empty()));
            }
            Phase::Idle => completer.complete(Ok(empty())),
        }
        Ok(handle)
    }

    fn discard(&self, ckpt: CkptId) {
        let Some(mut g) = self.lock() else { return };
        if matches!(&g.phase, Phase::Collecting(c) if c.ckpt == ckpt) {
            g.abandon();
        }
    }

    fn wait_all(&self) {
        let Some(slots) = self.lock().map(|mut g| {
            g.finish_in_flight();
            g.slots.clone()
        }) else {
            return;
        };
        // Each is completed by its waiter or failed by its watchdog: bounded.
        for s in slots {
            s.wait_done(None);
        }
    }

    fn close(&self) {
        self.wait_all();
        self.shut_down();
    }
}

/// What a save or flush on a wedged store fails with.
const WEDGED: &str = "VeloC's engine stopped completing this rank's checkpoints (see the message above); this rank saves no more checkpoints";

/// A flush's watchdog: fails the flush of `ckpt` in `slot` and marks the store `wedged` when
/// the checkpoint's files in `dir` have not grown for [`STALL`] (module documentation).
fn watch(slot: &FlushSlot, ckpt: CkptId, rank: Rank, dir: &Path, wedged: &AtomicBool) {
    let size = || -> u64 {
        std::fs::read_dir(dir)
            .map(|d| d.flatten().filter_map(|e| e.metadata().ok()).map(|m| m.len()).sum())
            .unwrap_or(0)
    };
    let (mut seen, mut since) = (size(), Instant::now());
    while !slot.wait_done(Some(Instant::now() + Duration::from_millis(500))) {
        let now = size();
        if now != seen {
            (seen, since) = (now, Instant::now());
        } else if since.elapsed() >= STALL {
            let message = format!(
                "VeloC's engine made no progress on checkpoint {ckpt} for {} s (a lost request or a stopped daemon); this rank saves no more checkpoints",
                STALL.as_secs()
            );
            wedged.store(true, Ordering::SeqCst);
            if slot.finish(Err(FlushError::Veloc { ckpt, message: message.clone() })) {
                eprintln!("ompcluster: rank {rank}: {message}");
            }
            return;
        }
    }
}

impl VelocStore {
    /// `inner`, unless the store is wedged (then `None`, also while waiting for it: the
    /// holder may never let go).
    fn lock(&self) -> Option<MutexGuard<'_, Inner>> {
        while !self.wedged.load(Ordering::SeqCst) {
            if let Some(g) = self.inner.try_lock_for(Duration::from_millis(100)) {
                return Some(g);
            }
        }
        None
    }

    /// Completes what is in flight, finalises VeloC and leaves the node session (the last
    /// rank of the job on the node stops the daemon). Once only.
    fn shut_down(&self) {
        let mut session = self.session.lock();
        if session.is_none() {
            return;
        }
        match self.lock() {
            Some(mut g) => {
                g.abandon();
                g.finish_in_flight();
                // SAFETY: the client was initialised in `open` and is finalised once (the
                // session is taken below, under the same lock); `1` drains VeloC's pending
                // work first.
                let _ = unsafe { sys::VELOC_Finalize(1) };
            }
            // A VeloC call never returned: finalising would wait on it too. Leave the node
            // without it (the last rank stops the daemon).
            None => tracing::warn!(rank = self.rank, "leaving VeloC without VELOC_Finalize: its engine is stuck"),
        }
        drop(session.take());
    }
}

impl Drop for VelocStore {
    fn drop(&mut self) {
        self.shut_down();
        OPEN.store(false, Ordering::SeqCst);
    }
}
