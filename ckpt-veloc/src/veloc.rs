//! The VeloC store (cargo feature `veloc`; `OMPCLUSTER_CP_USEVELOC=1` and
//! `OMPCLUSTER_CP_EXECCFG=<VeloC config>`).
//!
//! It uses VeloC's file-based interface in non-collective mode, one client
//! per rank (`VELOC_Init_single(rank, cfg)`), so no MPI communicator is
//! involved and a rank failure does not block the others:
//!
//! * the first save of checkpoint `k` calls `VELOC_Checkpoint_begin("ompcluster", k)`
//!   and `VELOC_Route_file`, and appends every region of `k` to the routed
//!   file in VeloC's scratch directory, recording offset, size and xxh3, as
//!   the embedded store does;
//! * [`flush`](CheckpointStore::flush) calls `VELOC_Checkpoint_end(1)`: VeloC's
//!   backend copies the file to its persistent directory as
//!   `ompcluster-<rank>-<k>.dat` (asynchronously in VeloC's async mode); a
//!   background thread calls `VELOC_Checkpoint_wait` and then checks that
//!   the persistent file is there with the expected size before the flush
//!   counts as complete;
//! * loading does not go through VeloC's restart path (which only restores
//!   a rank's own files): the records name `ompcluster-<rank>-<k>.dat` in the
//!   persistent directory and any rank reads it directly, checking xxh3,
//!   with the same [`load_region`](crate::load_region) as the embedded store.
//!
//! Manifests are published by the head in VeloC's persistent directory,
//! which is what [`persistent_dir`](CheckpointStore::persistent_dir) returns
//! (`OMPCLUSTER_CP_PERSISTENT` and `OMPCLUSTER_CP_SCRATCH` are not used:
//! VeloC's `persistent` and `scratch` keys play their roles).
//!
//! Design note (concurrency): VeloC keeps one global client per process and
//! documents no thread safety, so every VeloC call happens with `inner`
//! locked, and at most one store may be open per process (`OPEN`). VeloC
//! allows one checkpoint in flight per client: the waiter thread holds the
//! lock while in `VELOC_Checkpoint_wait`, so a save for the next checkpoint
//! waits until the previous flush is done. Whoever holds the lock first
//! (waiter, next save, `wait_all`, `Drop`) completes the in-flight flush;
//! the others find nothing left to do.

use std::collections::HashSet;
use std::ffi::{c_char, c_int, c_uint, CStr, CString};
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use crate::config::StoreConfig;
use crate::error::{FlushError, OpenError, SaveError};
use crate::flush::{new_flush, FlushCompleter, FlushHandle, FlushOutcome, FlushSlot};
use crate::fsutil;
use crate::layout::{self, VELOC_NAME};
use crate::record::{now_unix_ms, Checksum, CkptId, Rank, RegionId, RegionRecord};
use crate::store::{CheckpointStore, StoreKind};
use crate::veloc_cfg::read_veloc_config;
use crate::veloc_sys as sys;

/// `VELOC_SUCCESS` as documented in `veloc.h` (a macro `(0)` in recent
/// releases, a `static const int` in older ones, so not taken from the
/// generated bindings).
const VELOC_SUCCESS: c_int = 0;

/// Whether a VeloC client exists in this process.
static OPEN: AtomicBool = AtomicBool::new(false);

/// The VeloC store. See the module documentation.
pub struct VelocStore {
    rank: Rank,
    persistent: PathBuf,
    scratch: PathBuf,
    inner: Arc<Mutex<Inner>>,
}

impl std::fmt::Debug for VelocStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VelocStore")
            .field("rank", &self.rank)
            .field("persistent", &self.persistent)
            .field("scratch", &self.scratch)
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

/// A checkpoint ended in VeloC and not yet waited for.
struct InFlight {
    ckpt: CkptId,
    /// `None` for an abandoned checkpoint (waited for, never reported).
    completer: Option<FlushCompleter>,
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
    /// written.
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
        let dirs = read_veloc_config(config_file).map_err(OpenError::Veloc)?;
        let var = "the VeloC configuration (OMPCLUSTER_CP_EXECCFG)";
        for (role, dir) in [("scratch", &dirs.scratch), ("persistent", &dirs.persistent)] {
            fsutil::create_private_dir_all(dir).map_err(|source| OpenError::CreateDir {
                role,
                var,
                path: dir.clone(),
                source,
            })?;
            fsutil::probe_writable(dir).map_err(|source| OpenError::NotWritable {
                role,
                var,
                path: dir.clone(),
                source,
            })?;
        }
        let cfg = CString::new(config_file.as_os_str().as_bytes()).map_err(|_| {
            OpenError::Veloc(format!("{} contains a NUL byte", config_file.display()))
        })?;
        // SAFETY: `cfg` is a NUL-terminated string that outlives the call;
        // no other VeloC client exists in this process (OPEN was false).
        let rc = unsafe { sys::VELOC_Init_single(rank as c_uint, cfg.as_ptr()) };
        if rc != VELOC_SUCCESS {
            return Err(OpenError::Veloc(veloc_err(
                &format!("VELOC_Init_single({rank}, {})", config_file.display()),
                rc,
            )));
        }
        tracing::debug!(rank, persistent = %dirs.persistent.display(), "VeloC checkpoint store opened");
        Ok(VelocStore {
            rank,
            persistent: dirs.persistent.clone(),
            scratch: dirs.scratch.clone(),
            inner: Arc::new(Mutex::new(Inner {
                rank,
                persistent: dirs.persistent,
                phase: Phase::Idle,
                last_flushed: None,
                in_flight: None,
                slots: Vec::new(),
            })),
        })
    }
}

impl Inner {
    /// Waits for the checkpoint in flight, if any, and completes its flush.
    fn finish_in_flight(&mut self) {
        let Some(f) = self.in_flight.take() else {
            return;
        };
        // SAFETY: the client was initialised in `open`, calls are serialised
        // by the lock held through `&mut self`, and no checkpoint is between
        // begin and end (a save completes the in-flight one before `begin`).
        let rc = unsafe { sys::VELOC_Checkpoint_wait() };
        let Some(completer) = f.completer else { return };
        let result = if rc != VELOC_SUCCESS {
            Err(FlushError::Veloc {
                ckpt: f.ckpt,
                message: veloc_err("VELOC_Checkpoint_wait", rc),
            })
        } else {
            let path = self.persistent.join(layout::veloc_file(f.ckpt, self.rank));
            match std::fs::metadata(&path) {
                Ok(m) if m.len() == f.bytes => Ok(FlushOutcome {
                    ckpt: f.ckpt,
                    rank: self.rank,
                    records: f.records,
                    bytes: f.bytes,
                    duration: f.start.elapsed(),
                }),
                Ok(m) => Err(FlushError::Veloc {
                    ckpt: f.ckpt,
                    message: format!(
                        "VeloC's persistent copy {} has {} bytes, expected {}",
                        path.display(),
                        m.len(),
                        f.bytes
                    ),
                }),
                Err(source) => Err(FlushError::Io {
                    ckpt: f.ckpt,
                    op: "find VeloC's persistent copy",
                    path,
                    source,
                }),
            }
        };
        completer.complete(result);
    }

    /// Ends the open VeloC checkpoint without reporting it (its file is
    /// emptied first; it is never referenced and pruning removes it).
    fn abandon(&mut self) {
        // Invariant: a checkpoint is in flight only while the phase is Idle
        // (`begin` completes the in-flight one first), so nothing is lost here.
        debug_assert!(self.in_flight.is_none() || matches!(self.phase, Phase::Idle));
        if let Phase::Collecting(c) = std::mem::replace(&mut self.phase, Phase::Idle) {
            let _ = c.file.set_len(0);
            drop(c.file);
            // SAFETY: a checkpoint is open (Collecting), calls are serialised by the lock.
            let _ = unsafe { sys::VELOC_Checkpoint_end(0) };
            self.in_flight = Some(InFlight {
                ckpt: c.ckpt,
                completer: None,
                records: Vec::new(),
                bytes: 0,
                start: Instant::now(),
            });
        }
    }

    /// `VELOC_Checkpoint_begin` + `VELOC_Route_file` for checkpoint `ckpt`.
    fn begin(&mut self, ckpt: CkptId, scratch: &Path) -> Result<(), SaveError> {
        let version = c_int::try_from(ckpt).map_err(|_| {
            SaveError::Veloc(format!(
                "checkpoint id {ckpt} does not fit VeloC's int version"
            ))
        })?;
        self.finish_in_flight();
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
        let original = CString::new(
            scratch
                .join(format!("{VELOC_NAME}-rank{}.pack", self.rank))
                .as_os_str()
                .as_bytes(),
        )
        .map_err(|_| SaveError::Veloc("scratch path contains a NUL byte".into()))?;
        // VeloC copies the routed name without a bound check: give it a PATH_MAX buffer.
        let mut routed = vec![0 as c_char; libc::PATH_MAX as usize + 1];
        // SAFETY: `original` is NUL-terminated; `routed` has PATH_MAX + 1
        // bytes, the most a path VeloC builds can use; a checkpoint is open.
        let rc = unsafe { sys::VELOC_Route_file(original.as_ptr(), routed.as_mut_ptr()) };
        // SAFETY: VeloC NUL-terminates `routed` (and the buffer was zeroed).
        let routed = unsafe { CStr::from_ptr(routed.as_ptr()) };
        if rc != VELOC_SUCCESS || routed.to_bytes().is_empty() {
            // SAFETY: the checkpoint opened above is still open.
            let _ = unsafe { sys::VELOC_Checkpoint_end(0) };
            return Err(SaveError::Veloc(veloc_err("VELOC_Route_file", rc)));
        }
        let routed = PathBuf::from(std::ffi::OsStr::from_bytes(routed.to_bytes()));
        let file = match File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&routed)
        {
            Ok(f) => f,
            Err(source) => {
                // SAFETY: the checkpoint opened above is still open.
                let _ = unsafe { sys::VELOC_Checkpoint_end(0) };
                return Err(SaveError::Io {
                    path: routed,
                    source,
                });
            }
        };
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
        let checksum = Checksum::of(bytes);
        let mut g = self.inner.lock();
        if g.last_flushed.is_some_and(|f| ckpt <= f) {
            return Err(SaveError::Closed { ckpt });
        }
        match &g.phase {
            Phase::Collecting(c) if c.ckpt == ckpt => {}
            Phase::Collecting(c) if c.ckpt > ckpt => return Err(SaveError::Closed { ckpt }),
            Phase::Collecting(_) => {
                g.abandon();
                g.begin(ckpt, &self.scratch)?;
            }
            Phase::Idle => g.begin(ckpt, &self.scratch)?,
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
        let mut g = self.inner.lock();
        if g.last_flushed.is_some_and(|f| ckpt <= f) {
            return Err(FlushError::AlreadyFlushed { ckpt });
        }
        g.last_flushed = Some(ckpt);
        let start = Instant::now();
        let (handle, completer, slot) = new_flush(ckpt);
        g.slots.retain(|s| !s.is_done());
        g.slots.push(slot);
        let empty = || FlushOutcome {
            ckpt,
            rank: self.rank,
            records: Vec::new(),
            bytes: 0,
            duration: start.elapsed(),
        };
        match std::mem::replace(&mut g.phase, Phase::Idle) {
            Phase::Collecting(c) if c.ckpt == ckpt => {
                drop(c.file);
                // SAFETY: checkpoint `ckpt` is open (begun in `save_region`),
                // calls are serialised by the lock.
                let rc = unsafe { sys::VELOC_Checkpoint_end(1) };
                if rc != VELOC_SUCCESS {
                    completer.complete(Err(FlushError::Veloc {
                        ckpt,
                        message: veloc_err("VELOC_Checkpoint_end", rc),
                    }));
                    return Ok(handle);
                }
                let file = layout::veloc_file(ckpt, self.rank);
                let records = c
                    .regions
                    .iter()
                    .map(|p| RegionRecord {
                        region: p.region,
                        ckpt,
                        rank: self.rank,
                        size: p.size,
                        checksum: p.checksum,
                        file: file.clone(),
                        offset: p.offset,
                        saved_unix_ms: p.saved_unix_ms,
                    })
                    .collect();
                g.in_flight = Some(InFlight {
                    ckpt,
                    completer: Some(completer),
                    records,
                    bytes: c.len,
                    start,
                });
                drop(g);
                let inner = self.inner.clone();
                let spawned = std::thread::Builder::new()
                    .name(format!("veloc-wait-r{}", self.rank))
                    .spawn(move || inner.lock().finish_in_flight());
                if spawned.is_err() {
                    // No thread: complete it here (blocking) rather than never.
                    self.inner.lock().finish_in_flight();
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
        let mut g = self.inner.lock();
        if matches!(&g.phase, Phase::Collecting(c) if c.ckpt == ckpt) {
            g.abandon();
        }
    }

    fn wait_all(&self) {
        let slots = {
            let mut g = self.inner.lock();
            g.finish_in_flight();
            g.slots.clone()
        };
        for s in slots {
            s.wait_done(None);
        }
    }
}

impl Drop for VelocStore {
    fn drop(&mut self) {
        let mut g = self.inner.lock();
        g.abandon();
        g.finish_in_flight();
        // SAFETY: the client was initialised in `open` and is finalised once,
        // here; `1` drains VeloC's pending work first.
        let _ = unsafe { sys::VELOC_Finalize(1) };
        drop(g);
        OPEN.store(false, Ordering::SeqCst);
    }
}
