//! Consistent, incremental checkpoints of device data, orchestrated by the head.
//!
//! Design note (concurrency). Every offloading request of the head runs under the read side
//! of `Cluster::gate`; a checkpoint takes the write side, so new requests wait and the ones in
//! flight (kernels included) finish first. While the gate is held, each holder of a buffer's
//! current version only copies it to its scratch directory (the head for buffers it stages,
//! a worker for the others); then the gate is released and the slow flush to the persistent
//! directory runs on a background thread. A checkpoint counts (manifest published, report
//! counters) only once every saver's flush is durable. At most one flush is in progress: a
//! checkpoint that falls due meanwhile is taken at the next request after it finished, so
//! manifests are published in order and each one lists every region (incremental saves point
//! to older files).

use ckpt_veloc::{CheckpointMap, CheckpointStore, RegionRecord, StoreConfig};
use event_system::CheckpointSink;
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The head's checkpoint state.
pub(crate) struct Checkpointer {
    pub(crate) store: Arc<dyn CheckpointStore>,
    pub(crate) cfg: StoreConfig,
    inner: Mutex<Inner>,
    flushing: Arc<AtomicBool>,
    flusher: Mutex<Option<JoinHandle<()>>>,
    pub(crate) published: Arc<Mutex<Published>>,
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
    pub(crate) errors: Vec<String>,
    /// Per completed checkpoint: time from the end of its pause to its publication.
    pub(crate) flush_seconds: Vec<f64>,
}

/// One region a saver must save: (buffer id, address, size, version).
pub(crate) type SaveItem = (u64, u64, u64, u64);

impl Checkpointer {
    pub(crate) fn new(store: Arc<dyn CheckpointStore>, cfg: StoreConfig) -> Self {
        Checkpointer {
            store,
            cfg,
            inner: Mutex::new(Inner { next_ckpt: 1, last: Some(Instant::now()), ..Default::default() }),
            flushing: Arc::new(AtomicBool::new(false)),
            flusher: Mutex::new(None),
            published: Arc::new(Mutex::new(Published::default())),
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

    /// Start a checkpoint: its id, and the version already saved of each buffer.
    pub(crate) fn begin(&self) -> (u64, HashMap<u64, u64>) {
        let mut i = self.inner.lock();
        let id = i.next_ckpt;
        i.next_ckpt += 1;
        (id, i.saved.clone())
    }

    /// The pause is over: remember what was saved and how long it took; start the flush.
    /// `flush_all` runs on the background thread and returns every saver's records.
    pub(crate) fn end_pause(
        &self,
        ckpt: u64,
        saved: &[SaveItem],
        pause: Duration,
        flush_all: impl FnOnce() -> Result<Vec<RegionRecord>, String> + Send + 'static,
    ) {
        {
            let mut i = self.inner.lock();
            for &(id, _, _, version) in saved {
                i.saved.insert(id, version);
            }
            i.pauses.push(pause.as_secs_f64());
            i.last = Some(Instant::now());
        }
        self.flushing.store(true, Ordering::Release);
        let flushing = self.flushing.clone();
        let published = self.published.clone();
        let dir = self.store.persistent_dir().to_path_buf();
        let keep = self.cfg.keep;
        let handle = std::thread::Builder::new()
            .name("ompc-ckpt-flush".into())
            .spawn(move || {
                let started = Instant::now();
                let result = flush_all().and_then(|records| {
                    let mut p = published.lock();
                    let bytes: u64 = records.iter().map(|r| r.size).sum();
                    let deleted = p.deleted.clone();
                    p.map.record(records.into_iter().filter(|r| !deleted.contains(&r.region)));
                    for d in deleted {
                        p.map.forget(d);
                    }
                    p.deleted.clear();
                    p.map.publish(&dir, ckpt, keep).map_err(|e| e.to_string())?;
                    p.checkpoints += 1;
                    p.bytes += bytes;
                    p.flush_seconds.push(started.elapsed().as_secs_f64());
                    Ok(())
                });
                if let Err(e) = result {
                    eprintln!("ompcluster: checkpoint {ckpt} failed: {e}");
                    published.lock().errors.push(format!("checkpoint {ckpt}: {e}"));
                }
                flushing.store(false, Ordering::Release);
            })
            .expect("spawn the checkpoint flush thread");
        if let Some(old) = self.flusher.lock().replace(handle) {
            let _ = old.join();
        }
    }

    /// A buffer was freed: it leaves the next manifest.
    pub(crate) fn forget(&self, id: u64) {
        self.inner.lock().saved.remove(&id);
        self.published.lock().deleted.insert(id);
    }

    /// Wait for the flush in progress (at exit).
    pub(crate) fn wait(&self) {
        if let Some(h) = self.flusher.lock().take() {
            let _ = h.join();
        }
        self.store.wait_all();
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

    fn flush(&self, ckpt: u64) -> Result<Vec<u8>, String> {
        let outcome = self.0.flush(ckpt).and_then(|h| h.wait()).map_err(|e| e.to_string())?;
        serde_json::to_vec(&outcome.records).map_err(|e| e.to_string())
    }
}
