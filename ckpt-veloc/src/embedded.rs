//! The embedded store: no dependency, works everywhere.
//!
//! *Save* (during the pause) appends the region's bytes to this rank's
//! scratch file for the checkpoint (`<scratch>/ckpt-<k>.pack`, in a private
//! directory with a random name made for this store) and records its offset,
//! size and xxh3 checksum, computed from the caller's bytes. Nothing is
//! fsynced: scratch only has to survive until the flush. The directory holds a lock file
//! flocked by its store for as long as it is open; a store opening sweeps the directories of
//! ranks that died (lock file there and free), which a killed process cannot remove itself.
//!
//! *Flush* (after the pause) hands the checkpoint to a background thread
//! that copies the scratch file, in the kernel (`copy_file_range`, 8 MiB at a
//! time, starting writeback after each piece with `sync_file_range`), into a
//! randomly named temporary file in `PERSISTENT/ckpt-<k>/`, then fsyncs it,
//! renames it to `rank-<r>.data`, fsyncs the directory, and finally writes
//! `rank-<r>.index.json` the same way. The flush is complete only when the
//! index is durable.
//!
//! The flush does not re-hash: the checksum is computed once, at save time,
//! from the caller's bytes, and every load (and `ompcluster-ckpt verify`)
//! checks the persistent copy against it, so damage anywhere between the
//! device buffer and the persistent file is caught where it matters, when
//! the data is read. Re-hashing the scratch copy during the flush was
//! measured: it cost up to a third of the flush throughput on a loaded
//! 2-core machine and cannot see damage on the persistent side anyway.
//!
//! Design note (concurrency): `state` (one mutex) holds the checkpoints
//! being collected, the highest flushed id and the slots of all flushes; a
//! save holds it while appending, so saves of one rank are serialised (they
//! go to one sequential file anyway). Flush jobs go through a channel to a
//! single flusher thread, so flushes of one rank run one at a time, in
//! order, while the caller goes on computing. The flusher owns everything it
//! touches (the scratch file, the records); it never takes `state`. `Drop`
//! closes the channel and joins the thread, so every started flush finishes
//! before the scratch directory is removed.

use std::collections::{BTreeMap, HashSet};
use std::fs::{self, File};
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::config::{vars, StoreConfig};
use crate::error::{FlushError, OpenError, SaveError};
use crate::flush::{new_flush, FlushCompleter, FlushHandle, FlushOutcome, FlushSlot};
use crate::fsutil;
use crate::layout;
use crate::record::{now_unix_ms, Checksum, CkptId, Rank, RegionId, RegionRecord};
use crate::store::{CheckpointStore, StoreKind};

/// Scratch directories are `<base>/ompcluster-ckpt-rank<r>-<random>`.
const SCRATCH_PREFIX: &str = "ompcluster-ckpt-rank";

/// The flusher copies this much at a time and then asks the kernel to start
/// writing it back.
const WRITEBACK_CHUNK: u64 = 8 << 20;

/// The embedded file store. See the module documentation.
pub struct EmbeddedStore {
    rank: Rank,
    persistent: PathBuf,
    scratch: tempfile::TempDir,
    /// The lock that marks `scratch` as in use (see [`fsutil::claim_scratch`]).
    _owner: File,
    state: Mutex<State>,
    jobs: Mutex<Option<Sender<Job>>>,
    flusher: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for EmbeddedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedStore")
            .field("rank", &self.rank)
            .field("persistent", &self.persistent)
            .field("scratch", &self.scratch.path())
            .finish_non_exhaustive()
    }
}

struct State {
    collecting: BTreeMap<CkptId, Collecting>,
    /// Highest checkpoint id handed to the flusher.
    last_flushed: Option<CkptId>,
    flushes: Vec<Arc<FlushSlot>>,
}

/// A checkpoint whose regions are being saved to scratch.
struct Collecting {
    file: File,
    path: PathBuf,
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

struct Job {
    ckpt: CkptId,
    data: Option<Collecting>,
    completer: FlushCompleter,
}

/// Contents of `rank-<r>.index.json`.
#[derive(Serialize, Deserialize)]
pub(crate) struct FlushIndex {
    pub(crate) format: String,
    pub(crate) ckpt: CkptId,
    pub(crate) rank: Rank,
    pub(crate) flushed_unix_ms: u64,
    pub(crate) records: Vec<RegionRecord>,
}

/// Format tag of a flush index. One of another format, or with none, is refused naming both
/// (`ManifestError::OtherFormat`): bump it whenever the index's fields or their meaning change.
pub(crate) const INDEX_FORMAT: &str = "ompcluster-ckpt-index/1";

impl EmbeddedStore {
    /// Opens the store: creates (0700) and probes the persistent directory
    /// and a private, randomly named scratch directory for this rank, and
    /// starts the flusher thread. Unusable directories fail here, naming the
    /// directory and the variable that chooses it.
    pub fn open(config: &StoreConfig) -> Result<Self, OpenError> {
        let rank = config.rank;
        let persistent = config.persistent.clone();
        fsutil::usable_dir("persistent", vars::PERSISTENT, &persistent)?;

        let base = config.scratch.resolve();
        let scratch_var = config.scratch.var();
        fsutil::create_private_dir_all(&base).map_err(|source| OpenError::CreateDir {
            role: "scratch",
            var: scratch_var,
            path: base.clone(),
            source,
        })?;
        // Random name, created with mode 0700 (tempfile's default would be 0777 & umask),
        // removed when the store drops.
        let scratch = tempfile::Builder::new()
            .prefix(&format!("{SCRATCH_PREFIX}{rank}-"))
            .permissions(fs::Permissions::from_mode(0o700))
            .tempdir_in(&base)
            .map_err(|source| OpenError::NotWritable {
                role: "scratch",
                var: scratch_var,
                path: base.clone(),
                source,
            })?;
        fsutil::probe_writable(scratch.path()).map_err(|source| OpenError::NotWritable {
            role: "scratch",
            var: scratch_var,
            path: scratch.path().to_path_buf(),
            source,
        })?;
        let owner = fsutil::claim_scratch(scratch.path()).map_err(|source| OpenError::NotWritable {
            role: "scratch",
            var: scratch_var,
            path: scratch.path().to_path_buf(),
            source,
        })?;
        // Scratch directories of ranks that died (SIGKILL runs no destructor): in /dev/shm
        // they would hold memory until reboot.
        for gone in fsutil::sweep_dead_scratch(&base, SCRATCH_PREFIX) {
            tracing::info!(dir = %gone.display(), "removed the scratch directory of a rank that died");
        }

        let (tx, rx) = crossbeam_channel::unbounded::<Job>();
        let dir = persistent.clone();
        let flusher = std::thread::Builder::new()
            .name(format!("ckpt-flush-r{rank}"))
            .spawn(move || flusher_loop(rank, dir, rx))
            .map_err(|e| OpenError::NotWritable {
                role: "scratch",
                var: scratch_var,
                path: base,
                source: e,
            })?;

        tracing::debug!(rank, persistent = %persistent.display(), scratch = %scratch.path().display(), "embedded checkpoint store opened");
        Ok(EmbeddedStore {
            rank,
            persistent,
            scratch,
            _owner: owner,
            state: Mutex::new(State {
                collecting: BTreeMap::new(),
                last_flushed: None,
                flushes: Vec::new(),
            }),
            jobs: Mutex::new(Some(tx)),
            flusher: Mutex::new(Some(flusher)),
        })
    }

    /// This rank's private scratch directory.
    pub fn scratch_dir(&self) -> &Path {
        self.scratch.path()
    }
}

impl CheckpointStore for EmbeddedStore {
    fn kind(&self) -> StoreKind {
        StoreKind::Embedded
    }

    fn rank(&self) -> Rank {
        self.rank
    }

    fn persistent_dir(&self) -> &Path {
        &self.persistent
    }

    fn save_region(&self, ckpt: CkptId, region: RegionId, bytes: &[u8]) -> Result<(), SaveError> {
        // Hash outside the lock.
        let checksum = Checksum::of(bytes);
        let mut st = self.state.lock();
        if st.last_flushed.is_some_and(|f| ckpt <= f) {
            return Err(SaveError::Closed { ckpt });
        }
        let c = match st.collecting.entry(ckpt) {
            std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::btree_map::Entry::Vacant(v) => {
                let path = self.scratch.path().join(format!("ckpt-{ckpt}.pack"));
                let file = File::options()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .open(&path)
                    .map_err(|source| SaveError::Io {
                        path: path.clone(),
                        source,
                    })?;
                v.insert(Collecting {
                    file,
                    path,
                    len: 0,
                    regions: Vec::new(),
                    seen: HashSet::new(),
                })
            }
        };
        if c.seen.contains(&region) {
            return Err(SaveError::Duplicate { ckpt, region });
        }
        c.file
            .write_all_at(bytes, c.len)
            .map_err(|source| SaveError::Io {
                path: c.path.clone(),
                source,
            })?;
        c.seen.insert(region);
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
        let mut st = self.state.lock();
        if st.last_flushed.is_some_and(|f| ckpt <= f) {
            return Err(FlushError::AlreadyFlushed { ckpt });
        }
        let data = st.collecting.remove(&ckpt);
        // Older checkpoints still collecting can never be flushed now.
        let stale: Vec<CkptId> = st.collecting.range(..ckpt).map(|(k, _)| *k).collect();
        for k in stale {
            if let Some(c) = st.collecting.remove(&k) {
                tracing::warn!(
                    rank = self.rank,
                    ckpt = k,
                    "discarding unflushed checkpoint older than {ckpt}"
                );
                let _ = fs::remove_file(&c.path);
            }
        }
        st.last_flushed = Some(ckpt);
        let (handle, completer, slot) = new_flush(ckpt);
        st.flushes.retain(|s| !s.is_done());
        st.flushes.push(slot);
        drop(st);
        if let Some(tx) = self.jobs.lock().as_ref() {
            // On a send error the job (and its completer) is dropped, which
            // fails the flush with FlusherGone.
            let _ = tx.send(Job {
                ckpt,
                data,
                completer,
            });
        }
        Ok(handle)
    }

    fn discard(&self, ckpt: CkptId) {
        if let Some(c) = self.state.lock().collecting.remove(&ckpt) {
            let _ = fs::remove_file(&c.path);
        }
    }

    fn wait_all(&self) {
        let slots: Vec<Arc<FlushSlot>> = self.state.lock().flushes.clone();
        for s in slots {
            s.wait_done(None);
        }
    }

    fn close(&self) {
        self.wait_all();
        // The `TempDir` would remove it on drop; a store that is never dropped leaves it
        // behind. Removing it twice is harmless (the drop ignores the error).
        let _ = std::fs::remove_dir_all(self.scratch.path());
    }
}

impl Drop for EmbeddedStore {
    fn drop(&mut self) {
        // Closing the channel ends the flusher loop after the queued jobs.
        self.jobs.lock().take();
        if let Some(t) = self.flusher.lock().take() {
            let _ = t.join();
        }
    }
}

/// The flusher thread. It holds a watchdog beat (`ompc-ckpt-store`): idle while it waits
/// for a checkpoint, running while it writes one, ticking after each piece it copies, so
/// that a flush stuck on the file system (or on a bug of ours) ends its rank with a message
/// naming it (the runtime's watchdog, `OMPCLUSTER_WATCHDOG`) rather than hanging the job.
fn flusher_loop(rank: Rank, persistent: PathBuf, rx: Receiver<Job>) {
    use watchdog::State;
    let beat = watchdog::global().beat("ompc-ckpt-store", "waiting for a checkpoint to flush");
    loop {
        beat.set(State::Idle, "waiting for a checkpoint to flush");
        let Ok(job) = rx.recv() else { break };
        beat.set(State::Running, "writing a checkpoint to the persistent directory");
        let Job {
            ckpt,
            data,
            completer,
        } = job;
        let r = run_flush(rank, &persistent, ckpt, data.as_ref(), &beat);
        if let Some(c) = data {
            let _ = fs::remove_file(&c.path);
        }
        if let Err(e) = &r {
            tracing::error!(rank, ckpt, "checkpoint flush failed: {e}");
        }
        completer.complete(r);
    }
}

fn run_flush(
    rank: Rank,
    persistent: &Path,
    ckpt: CkptId,
    data: Option<&Collecting>,
    beat: &watchdog::Beat,
) -> Result<FlushOutcome, FlushError> {
    let start = Instant::now();
    let io = |op: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| FlushError::Io {
            ckpt,
            op,
            path,
            source,
        }
    };
    let dir = persistent.join(layout::ckpt_dir(ckpt));
    fsutil::create_private_dir_all(&dir).map_err(io("create directory", &dir))?;

    let mut records = Vec::new();
    let mut bytes = 0u64;
    if let Some(c) = data.filter(|c| !c.regions.is_empty()) {
        let rel = layout::data_file(ckpt, rank);
        let dest = persistent.join(&rel);
        let mut tmp = fsutil::temp_beside(&dest).map_err(io("create temporary file for", &dest))?;
        let tmp_path = tmp.path().to_path_buf();
        // The data file is a byte-for-byte copy of the scratch file (same
        // offsets). Copy it in the kernel (std uses copy_file_range, with
        // fallbacks), in pieces, starting writeback after each piece.
        let mut src = &c.file;
        src.seek(SeekFrom::Start(0))
            .map_err(io("read scratch file", &c.path))?;
        let mut written = 0u64;
        while written < c.len {
            let n = (c.len - written).min(WRITEBACK_CHUNK);
            let copied = std::io::copy(&mut src.take(n), tmp.as_file_mut())
                .map_err(io("copy to", &tmp_path))?;
            if copied != n {
                let source = std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!(
                        "scratch file ended after {} of {} bytes",
                        written + copied,
                        c.len
                    ),
                );
                return Err(FlushError::Io {
                    ckpt,
                    op: "read scratch file",
                    path: c.path.clone(),
                    source,
                });
            }
            start_writeback(tmp.as_file(), written, n);
            written += n;
            beat.tick();
        }
        records = c
            .regions
            .iter()
            .map(|p| RegionRecord {
                region: p.region,
                ckpt,
                rank,
                size: p.size,
                checksum: p.checksum,
                file: rel.clone(),
                offset: p.offset,
                saved_unix_ms: p.saved_unix_ms,
            })
            .collect();
        bytes = c.len;
        fsutil::publish(tmp, &dest).map_err(io("publish", &dest))?;
    }

    let index = FlushIndex {
        format: INDEX_FORMAT.to_string(),
        ckpt,
        rank,
        flushed_unix_ms: now_unix_ms(),
        records: records.clone(),
    };
    let json = serde_json::to_vec_pretty(&index).expect("index serialises");
    let index_path = persistent.join(layout::index_file(ckpt, rank));
    fsutil::atomic_write(&index_path, &json).map_err(|(path, source)| FlushError::Io {
        ckpt,
        op: "publish",
        path,
        source,
    })?;
    Ok(FlushOutcome {
        ckpt,
        rank,
        records,
        bytes,
        duration: start.elapsed(),
    })
}

/// Asks the kernel to start writing `len` bytes at `offset` of `f` back to
/// disk now, without waiting, so that the final fsync has little left to
/// do and the disk works while the flusher copies the next chunk.
fn start_writeback(f: &File, offset: u64, len: u64) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: sync_file_range only reads its integer arguments; the
        // descriptor is valid for the duration of the call because `f` is
        // borrowed. A failure only loses the hint: fsync still follows.
        let _ = unsafe {
            libc::sync_file_range(
                f.as_raw_fd(),
                offset as libc::off64_t,
                len as libc::off64_t,
                libc::SYNC_FILE_RANGE_WRITE,
            )
        };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (f, offset, len);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flush::FlushStatus;

    fn open(dir: &Path, rank: Rank) -> EmbeddedStore {
        let mut c = StoreConfig::new(rank, dir.join("persistent"));
        c.scratch = crate::config::ScratchBase::Dir(dir.join("scratch"));
        EmbeddedStore::open(&c).unwrap()
    }

    #[test]
    fn save_flush_and_records() {
        let t = tempfile::tempdir().unwrap();
        let s = open(t.path(), 2);
        s.save_region(1, 10, b"hello").unwrap();
        s.save_region(1, 11, &[7u8; 100_000]).unwrap();
        assert!(matches!(
            s.save_region(1, 10, b"again"),
            Err(SaveError::Duplicate {
                ckpt: 1,
                region: 10
            })
        ));
        let out = s.flush(1).unwrap().wait().unwrap();
        assert_eq!(out.rank, 2);
        assert_eq!(out.bytes, 100_005);
        assert_eq!(out.records.len(), 2);
        assert_eq!(out.records[0].offset, 0);
        assert_eq!(out.records[1].offset, 5);
        assert_eq!(out.records[1].checksum, Checksum::of(&[7u8; 100_000]));
        let data = fs::read(t.path().join("persistent/ckpt-1/rank-2.data")).unwrap();
        assert_eq!(&data[..5], b"hello");
        assert!(t
            .path()
            .join("persistent/ckpt-1/rank-2.index.json")
            .exists());
        // The scratch file is gone after the flush; ids must increase.
        assert_eq!(scratch_files(&s), 0);
        assert!(matches!(
            s.save_region(1, 12, b"x"),
            Err(SaveError::Closed { ckpt: 1 })
        ));
        assert!(matches!(
            s.flush(1),
            Err(FlushError::AlreadyFlushed { ckpt: 1 })
        ));
    }

    #[test]
    fn empty_flush_completes_with_no_records() {
        let t = tempfile::tempdir().unwrap();
        let s = open(t.path(), 0);
        let out = s.flush(3).unwrap().wait().unwrap();
        assert!(out.records.is_empty());
        assert!(t
            .path()
            .join("persistent/ckpt-3/rank-0.index.json")
            .exists());
        assert!(!t.path().join("persistent/ckpt-3/rank-0.data").exists());
    }

    #[test]
    fn scratch_damage_is_caught_when_loading() {
        // The checksum comes from the caller's bytes at save time, so a
        // scratch copy damaged before the flush cannot yield wrong data.
        let t = tempfile::tempdir().unwrap();
        let s = open(t.path(), 1);
        s.save_region(5, 1, &[1u8; 4096]).unwrap();
        let scratch_file = s.scratch_dir().join("ckpt-5.pack");
        let mut bytes = fs::read(&scratch_file).unwrap();
        bytes[100] ^= 0x40;
        fs::write(&scratch_file, &bytes).unwrap();
        let out = s.flush(5).unwrap().wait().unwrap();
        assert_eq!(out.records[0].checksum, Checksum::of(&[1u8; 4096]));
        let e = crate::manifest::load_record(&t.path().join("persistent"), &out.records[0])
            .unwrap_err();
        assert!(
            matches!(e, crate::LoadError::Corrupt { region: 1, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("ckpt-5/rank-1.data"), "{e}");
    }

    #[test]
    fn large_regions_are_copied_exactly() {
        // Several writeback pieces, and regions not aligned to them.
        let t = tempfile::tempdir().unwrap();
        let s = open(t.path(), 4);
        let a: Vec<u8> = (0..(WRITEBACK_CHUNK as usize + 12_345))
            .map(|i| (i * 7) as u8)
            .collect();
        let b: Vec<u8> = (0..(2 * WRITEBACK_CHUNK as usize + 1))
            .map(|i| (i * 13) as u8)
            .collect();
        s.save_region(1, 1, &a).unwrap();
        s.save_region(1, 2, &[]).unwrap();
        s.save_region(1, 3, &b).unwrap();
        let out = s.flush(1).unwrap().wait().unwrap();
        assert_eq!(out.bytes, (a.len() + b.len()) as u64);
        let dir = t.path().join("persistent");
        let got: Vec<Vec<u8>> = out
            .records
            .iter()
            .map(|r| crate::manifest::load_record(&dir, r).unwrap())
            .collect();
        assert_eq!(got, vec![a, vec![], b]);
    }

    #[test]
    fn scratch_dir_is_private_unique_and_removed() {
        let t = tempfile::tempdir().unwrap();
        let a = open(t.path(), 1);
        let b = open(t.path(), 1);
        assert_ne!(a.scratch_dir(), b.scratch_dir());
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(a.scratch_dir()).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let p = a.scratch_dir().to_path_buf();
        a.save_region(1, 1, b"x").unwrap();
        let h = a.flush(1).unwrap();
        drop(a); // waits for the flush
        assert_eq!(h.status(), FlushStatus::Complete);
        assert!(!p.exists());
    }

    /// Files in the store's scratch directory besides its lock file.
    fn scratch_files(s: &EmbeddedStore) -> usize {
        fs::read_dir(s.scratch_dir()).unwrap().filter(|e| e.as_ref().unwrap().file_name() != ".owner.lock").count()
    }

    #[test]
    fn discard_and_stale_checkpoints() {
        let t = tempfile::tempdir().unwrap();
        let s = open(t.path(), 1);
        s.save_region(1, 1, b"a").unwrap();
        s.discard(1);
        s.save_region(2, 1, b"b").unwrap();
        s.save_region(3, 1, b"c").unwrap();
        let out = s.flush(3).unwrap().wait().unwrap();
        assert_eq!(out.records.len(), 1);
        assert_eq!(scratch_files(&s), 0);
        s.wait_all();
    }
}
