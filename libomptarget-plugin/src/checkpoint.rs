//! Consistent, incremental checkpoints of device data, orchestrated by the head.
//!
//! Design note (concurrency). Every offloading request of the head runs under the read side
//! of the gate (`cluster::Requests::enter`); a checkpoint takes the write side, so new
//! requests wait and the ones in flight (kernels included) finish first. While the gate is
//! held the head only decides who saves what (the holder of each changed buffer's current
//! version) and posts a CHECKPOINT event to each saving worker; then it releases the gate.
//! The saves themselves run after the pause, yet each buffer is saved exactly as it was at
//! the pause:
//! - a worker saves on its polling thread, before it looks at any later event, and only later
//!   events (a kernel, a transfer, a delete) can change the copies it holds;
//! - the head saves its staged copies on the background thread, and whoever would change or
//!   free a staged copy still listed in [`PendingSaves`] waits until it is saved.
//!
//! The background thread then collects the workers' save replies and runs the flush to the
//! persistent directory. A checkpoint counts (manifest published, report counters) only once
//! every save succeeded and every saver's flush is durable; if any failed, the versions it was
//! to save count as unsaved again, so the next checkpoint saves them. At most one checkpoint is
//! in progress (the final one on SIGTERM waits, under the pause, for one a region took): one
//! that falls due meanwhile is taken at the next request after it finished,
//! so manifests are published in order and each one lists every region (incremental saves
//! point to older files). One request at a time takes a checkpoint that fell due
//! ([`Checkpointer::claim`]); the others wait for it at the gate. One that falls due with
//! nothing to save or forget is not taken (it would publish the same state again); its
//! interval starts again.

use ckpt_veloc::{CheckpointMap, CheckpointStore, FlushError, FlushHandle, RegionRecord, StoreConfig};
use event_system::CheckpointSink;
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The head's checkpoint state.
pub(crate) struct Checkpointer {
    pub(crate) store: Arc<dyn CheckpointStore>,
    pub(crate) cfg: StoreConfig,
    inner: Arc<Mutex<Inner>>,
    flushing: Arc<AtomicBool>,
    /// A request is taking a checkpoint (waiting for the gate, or in the pause): see
    /// [`Checkpointer::claim`].
    taking: AtomicBool,
    flusher: Mutex<Option<JoinHandle<()>>>,
    pub(crate) published: Arc<Mutex<Published>>,
    /// Staged buffers on the head that the checkpoint in progress has yet to save.
    pub(crate) head_pending: Arc<PendingSaves>,
}

/// Addresses of the head's staged buffers still to be saved by the checkpoint in progress.
#[derive(Default)]
pub(crate) struct PendingSaves {
    addrs: Mutex<HashSet<u64>>,
    saved: Condvar,
}

impl PendingSaves {
    fn add(&self, addrs: impl IntoIterator<Item = u64>) {
        self.addrs.lock().extend(addrs);
    }

    fn done(&self, addr: u64) {
        self.addrs.lock().remove(&addr);
        self.saved.notify_all();
    }

    /// Wait until the staged copy of the buffer at `addr` is saved (if a checkpoint is saving
    /// it): call before changing or freeing it.
    pub(crate) fn wait(&self, addr: u64) {
        let mut a = self.addrs.lock();
        while a.contains(&addr) {
            self.saved.wait(&mut a);
        }
    }
}

#[derive(Default)]
struct Inner {
    next_ckpt: u64,
    last: Option<Instant>,
    /// Buffer id -> version of it already saved (in a published or in-flight checkpoint).
    saved: HashMap<u64, u64>,
    /// Pauses of all checkpoints taken, seconds.
    pauses: Vec<f64>,
}

/// What the report says about checkpoints (counted once durable).
#[derive(Default)]
pub(crate) struct Published {
    pub(crate) map: CheckpointMap,
    pub(crate) checkpoints: u64,
    pub(crate) bytes: u64,
    /// Buffers deleted since: their records leave the next manifest.
    pub(crate) deleted: HashSet<u64>,
    /// Buffer id -> the version of it the published checkpoints hold (what recovery can load).
    pub(crate) versions: HashMap<u64, u64>,
    pub(crate) errors: Vec<String>,
    /// Per completed checkpoint: time from the end of its pause until every saver had copied
    /// its regions to scratch.
    pub(crate) save_seconds: Vec<f64>,
    /// Per completed checkpoint: time from then to its publication (the flush).
    pub(crate) flush_seconds: Vec<f64>,
}

/// A request's claim to take the checkpoint due ([`Checkpointer::claim`]), given up when
/// dropped.
pub(crate) struct Claim<'a>(&'a AtomicBool);

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// One region a saver must save: (buffer id, address, size, version).
pub(crate) type SaveItem = (u64, u64, u64, u64);

impl Checkpointer {
    pub(crate) fn new(store: Arc<dyn CheckpointStore>, cfg: StoreConfig) -> Self {
        Checkpointer {
            store,
            cfg,
            inner: Arc::new(Mutex::new(Inner { next_ckpt: 1, last: Some(Instant::now()), ..Default::default() })),
            flushing: Arc::new(AtomicBool::new(false)),
            taking: AtomicBool::new(false),
            flusher: Mutex::new(None),
            published: Arc::new(Mutex::new(Published::default())),
            head_pending: Arc::new(PendingSaves::default()),
        }
    }

    /// Is a checkpoint due, for `bytes` of device data?
    pub(crate) fn due(&self, bytes: u64) -> bool {
        if self.flushing.load(Ordering::Acquire) {
            return false;
        }
        let Some(interval) = self.cfg.interval_for(bytes) else { return false };
        self.inner.lock().last.is_none_or(|t| t.elapsed() >= interval)
    }

    /// A checkpoint is due (for `bytes` of device data) and no other request is taking one:
    /// the caller takes it, while the claim lives. The others go on to the gate and wait
    /// behind it. (Each request that found one due used to wait for the gate's write side
    /// itself: while one waited for the kernels in flight, the next request found the next
    /// one due, and with kernels longer than the interval the requests queued as writers let
    /// one region run per checkpoint: `sleepy 200 2500` with checkpoints every 2 s on 3
    /// workers took 109 s instead of 13.6.)
    pub(crate) fn claim(&self, bytes: u64) -> Option<Claim<'_>> {
        (self.due(bytes) && self.taking.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_ok()).then(|| Claim(&self.taking))
    }

    /// The version already saved of each buffer (in a published or in-flight checkpoint).
    pub(crate) fn saved_versions(&self) -> HashMap<u64, u64> {
        self.inner.lock().saved.clone()
    }

    /// Start a checkpoint: its id.
    pub(crate) fn begin(&self) -> u64 {
        let mut i = self.inner.lock();
        let id = i.next_ckpt;
        i.next_ckpt += 1;
        id
    }

    /// The pause is over (the gate is about to be released): remember what is being saved and
    /// how long the pause took, and start the background thread. It first saves the head's
    /// `head_items` (staged copies, read in place) and starts the head's flush, then runs
    /// `workers`, which collects the workers' answers (calling `saved` once every save is in)
    /// and the head's flush, given to it, and returns every saver's records.
    pub(crate) fn end_pause(
        &self,
        ckpt: u64,
        saved: &[SaveItem],
        head_items: Vec<SaveItem>,
        pause: Duration,
        journal: Option<Arc<crate::journal::Journal>>,
        workers: impl FnOnce(Result<FlushHandle, FlushError>, &mut dyn FnMut()) -> Result<Vec<RegionRecord>, String> + Send + 'static,
    ) {
        {
            let mut i = self.inner.lock();
            for &(id, _, _, version) in saved {
                i.saved.insert(id, version);
            }
            i.pauses.push(pause.as_secs_f64());
            i.last = Some(Instant::now());
        }
        self.head_pending.add(head_items.iter().map(|&(_, addr, ..)| addr));
        self.flushing.store(true, Ordering::Release);
        let flushing = self.flushing.clone();
        let published = self.published.clone();
        let inner = self.inner.clone();
        let pending = self.head_pending.clone();
        let store = self.store.clone();
        let dir = self.store.persistent_dir().to_path_buf();
        let keep = self.cfg.keep;
        let saved = saved.to_vec();
        let body = move || {
            // Watched (the `watchdog` crate): running while it publishes (its log's and
            // manifest's fsyncs, under the `published` lock that region threads may wait for);
            // waiting while it writes the head's copies to scratch (the file system, the
            // embedded store's own flusher watched) and on the savers' answers (peers).
            // (Not its thread's own: run on the caller's thread when no thread can be started,
            // it must not take the place of that thread's own beat.)
            let beat = watchdog::global().beat("ompc-ckpt-flush", "taking a checkpoint in the background");
            let started = Instant::now();
            let mut head_result = Ok(());
            beat.set(watchdog::State::Waiting, "writing the head's copies to the scratch directory");
            for (id, addr, size, _) in head_items {
                if head_result.is_ok() {
                    // SAFETY: the head holds this buffer's current version in its staged
                    // copy, and nothing changes or frees that copy while `addr` is in
                    // `pending` (see `PendingSaves::wait`).
                    let bytes = unsafe { std::slice::from_raw_parts(addr as *const u8, size as usize) };
                    head_result = store.save_region(ckpt, id, bytes).map_err(|e| e.to_string());
                }
                pending.done(addr);
            }
            // The head's own flush starts at once (workers start theirs after saving);
            // the workers' answers are collected even if the head failed, so that none is
            // left behind.
            let own_flush = store.flush(ckpt);
            let mut save_s = 0.0;
            let mut flush_started = Instant::now();
            let mut mark = || {
                save_s = started.elapsed().as_secs_f64();
                flush_started = Instant::now();
            };
            beat.set(watchdog::State::Waiting, "the savers' answers and flushes");
            let workers_result = workers(own_flush, &mut mark);
            beat.set(watchdog::State::Running, "publishing a checkpoint");
            let result = head_result.and(workers_result).and_then(|records| {
                let mut p = published.lock();
                let bytes: u64 = records.iter().map(|r| r.size).sum();
                let deleted = p.deleted.clone();
                p.map.record(records.into_iter().filter(|r| !deleted.contains(&r.region)));
                for d in deleted {
                    p.map.forget(d);
                }
                p.deleted.clear();
                if let Some(j) = &journal {
                    // The manifest is published only once its log is durable.
                    j.write(ckpt, p.map.iter().map(|r| r.region), keep.get())?;
                }
                p.map.publish(&dir, ckpt, keep).map_err(|e| e.to_string())?;
                for &(id, _, _, version) in &saved {
                    if p.map.get(id).is_some() {
                        p.versions.insert(id, version);
                    }
                }
                p.checkpoints += 1;
                p.bytes += bytes;
                p.save_seconds.push(save_s);
                p.flush_seconds.push(flush_started.elapsed().as_secs_f64());
                Ok(())
            });
            if let Err(e) = result {
                if let Some(j) = &journal {
                    j.abandon(ckpt);
                }
                eprintln!("ompcluster: checkpoint {ckpt} failed: {e}");
                store.discard(ckpt);
                // What it was to save is unsaved again: the next checkpoint saves it.
                let mut i = inner.lock();
                for (id, _, _, version) in saved {
                    if i.saved.get(&id) == Some(&version) {
                        i.saved.remove(&id);
                    }
                }
                published.lock().errors.push(format!("checkpoint {ckpt}: {e}"));
            }
            flushing.store(false, Ordering::Release);
        };
        // If no thread can be started, this thread does the work (slower, but the pending saves
        // must happen: submits to those buffers wait for them).
        if let Some(handle) = spawn_or_run("ompc-ckpt-flush", body) {
            if let Some(old) = self.flusher.lock().replace(handle) {
                let _ = old.join();
            }
        }
    }

    /// A resumed job: its checkpoints are numbered after the earlier job's last, `last`
    /// (retention keeps the newest manifests).
    pub(crate) fn continue_after(&self, last: u64) {
        let mut i = self.inner.lock();
        i.next_ckpt = i.next_ckpt.max(last + 1);
    }

    /// A resumed job adopts an earlier job's saved region `rec` as `version` of its buffer
    /// `id`: recovery can load it, the next manifests list it, and it is not saved again.
    pub(crate) fn adopt(&self, id: u64, version: u64, rec: RegionRecord) {
        self.inner.lock().saved.insert(id, version);
        let mut p = self.published();
        p.map.record([RegionRecord { region: id, ..rec }]);
        p.versions.insert(id, version);
    }

    /// Was a buffer the published manifest lists freed since (so the next manifest differs)?
    pub(crate) fn forgot_any(&self) -> bool {
        let p = self.published();
        p.deleted.iter().any(|&id| p.map.get(id).is_some())
    }

    /// A checkpoint fell due with nothing to save or forget: the interval starts again.
    pub(crate) fn skip(&self) {
        self.inner.lock().last = Some(Instant::now());
    }

    /// A buffer was freed: it leaves the next manifest.
    pub(crate) fn forget(&self, id: u64) {
        self.inner.lock().saved.remove(&id);
        let mut p = self.published();
        p.deleted.insert(id);
        p.versions.remove(&id);
    }

    /// Does a published checkpoint hold `version` of buffer `id`?
    pub(crate) fn holds(&self, id: u64, version: u64) -> bool {
        self.published().versions.get(&id) == Some(&version)
    }

    /// Where the published checkpoints hold `version` of buffer `id`, if they do.
    pub(crate) fn record(&self, id: u64, version: u64) -> Option<RegionRecord> {
        let p = self.published();
        match (p.versions.get(&id), p.map.get(id)) {
            (Some(&v), Some(rec)) if v == version => Some(rec.clone()),
            _ => None,
        }
    }

    /// Load `version` of buffer `id` from the published checkpoints (checksum checked).
    pub(crate) fn load(&self, id: u64, version: u64) -> Result<Vec<u8>, String> {
        let rec = self.record(id, version).ok_or_else(|| format!("no published checkpoint holds version {version} of buffer {id}"))?;
        ckpt_veloc::load_record(self.store.persistent_dir(), &rec).map_err(|e| e.to_string())
    }

    /// What is published, locked: the flush holds it across its log's and manifest's fsyncs,
    /// so a region that waits for it is marked waiting (`watchdog::lock`).
    fn published(&self) -> MutexGuard<'_, Published> {
        watchdog::lock(&self.published, "a checkpoint's publication")
    }

    /// Wait for the flush in progress (at exit).
    pub(crate) fn wait(&self) {
        watchdog::waiting("a checkpoint's saves and flush", || {
            // Held across the join: a second caller waits for the same flush to end (taken
            // and released at once, it would find no handle and return while it runs).
            let mut flusher = self.flusher.lock();
            if let Some(h) = flusher.take() {
                let _ = h.join();
            }
            drop(flusher);
            self.store.wait_all();
        });
    }

    /// Is a checkpoint's flush in progress?
    pub(crate) fn in_progress(&self) -> bool {
        self.flushing.load(Ordering::Acquire)
    }

    /// All pauses so far, seconds.
    pub(crate) fn pauses(&self) -> Vec<f64> {
        self.inner.lock().pauses.clone()
    }
}

/// A worker's side: save and flush through its own store.
pub(crate) struct WorkerSink(pub(crate) Arc<dyn CheckpointStore>);

impl CheckpointSink for WorkerSink {
    fn save(&self, ckpt: u64, region: u64, bytes: &[u8]) -> Result<(), String> {
        self.0.save_region(ckpt, region, bytes).map_err(|e| e.to_string())
    }

    fn flush_then(&self, ckpt: u64, done: Box<dyn FnOnce(Result<Vec<u8>, String>) + Send>) {
        let records = move |h: FlushHandle| {
            let outcome = h.wait().map_err(|e| e.to_string())?;
            serde_json::to_vec(&outcome.records).map_err(|e| e.to_string())
        };
        match self.0.flush(ckpt) {
            Err(e) => done(Err(e.to_string())),
            // One short-lived thread per checkpoint waits for the store's flusher (or this
            // thread, if none can be started: the head must get its answer).
            Ok(h) => {
                spawn_or_run("ompc-ckpt-done", move || done(records(h)));
            }
        }
    }

    fn load(&self, record: &[u8], into: &mut [u8]) -> Result<(), String> {
        let rec: ckpt_veloc::RegionRecord = serde_json::from_slice(record).map_err(|e| format!("a checkpoint record that does not parse: {e}"))?;
        // From the head: a file inside the persistent directory, of the size asked for.
        if !rec.file.components().all(|c| matches!(c, std::path::Component::Normal(_))) {
            return Err(format!("checkpoint record names a file outside the checkpoint directory: {}", rec.file.display()));
        }
        ckpt_veloc::load_record_into(self.0.persistent_dir(), &rec, into).map_err(|e| e.to_string())
    }
}

/// Run `job` on a new thread called `name` and return it; if no thread can be started, run
/// `job` on this one (work that must happen is never dropped) and return `None`.
fn spawn_or_run(name: &str, job: impl FnOnce() + Send + 'static) -> Option<JoinHandle<()>> {
    let slot = Arc::new(Mutex::new(Some(job)));
    let theirs = slot.clone();
    let spawned = std::thread::Builder::new().name(name.into()).spawn(move || {
        if let Some(job) = theirs.lock().take() {
            job();
        }
    });
    match spawned {
        Ok(handle) => Some(handle),
        Err(e) => {
            eprintln!("ompcluster: cannot start thread {name} ({e}); doing its work here");
            if let Some(job) = slot.lock().take() {
                job();
            }
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ckpt_veloc::ScratchBase;

    fn checkpointer(dir: &std::path::Path) -> Checkpointer {
        let mut c = StoreConfig::new(0, dir.join("persistent"));
        c.scratch = ScratchBase::Dir(dir.join("scratch"));
        let store: Arc<dyn CheckpointStore> = Arc::from(ckpt_veloc::open(&c).unwrap());
        Checkpointer::new(store, c)
    }

    /// A checkpoint whose saves failed publishes nothing, and the versions it was to save
    /// count as unsaved, so the next checkpoint saves them.
    #[test]
    fn failed_checkpoint_leaves_its_versions_unsaved() {
        let t = tempfile::tempdir().unwrap();
        let cp = checkpointer(t.path());
        let data = vec![5u8; 4096];
        let item = (7, data.as_ptr() as u64, data.len() as u64, 3);
        assert!(cp.saved_versions().is_empty());
        let id = cp.begin();
        cp.end_pause(id, &[item], vec![], Duration::ZERO, None, |_, saved| {
            saved();
            Err("rank 2: disk full".into())
        });
        cp.wait();
        let p = cp.published.lock();
        assert_eq!(p.checkpoints, 0);
        assert_eq!(p.errors.len(), 1, "{:?}", p.errors);
        drop(p);
        assert_eq!(cp.saved_versions().get(&7), None, "the failed save still counts as saved");

        // The same buffer in a checkpoint that works: saved by the head, published.
        let id = cp.begin();
        cp.end_pause(id, &[item], vec![item], Duration::ZERO, None, |own, saved| {
            saved();
            Ok(own.and_then(|h| h.wait()).map_err(|e| e.to_string())?.records)
        });
        cp.wait();
        assert_eq!(cp.published.lock().checkpoints, 1);
        assert_eq!(cp.saved_versions().get(&7), Some(&3));
        assert!(cp.holds(7, 3) && !cp.holds(7, 2), "recovery can load what was published");
        let loaded = ckpt_veloc::load_region(&t.path().join("persistent"), id, 7).unwrap();
        assert_eq!(loaded, data);
    }
}
