//! The ledger: the device's buffers with their versions and holders (`Buffers`, no MPI, unit
//! tested in `data.rs`), the condition variable that announces their changes, and the task
//! record recovery re-runs from.
//!
//! Threads: offloading threads (every request), the handler (recovery), the buddy thread
//! (buddy copies, pruning), checkpoints. Lock order: `buffers`, then `graph`; never the
//! reverse. Neither is held across a bulk transfer or a kernel; `moved` is waited on with
//! `buffers` held and notified after every change that may let a waiting thread go on.

use crate::data::Buffers;
use parking_lot::{Condvar, Mutex, MutexGuard, WaitTimeoutResult};
use rustc_hash::FxHashMap as HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use task_graph::TaskGraph;

/// [`Ledger::moved`]: a wait on it is a wait on other threads (a copy on its way, another
/// region's kernel, a recovery), each bounded by the failure detector, so it marks a thread
/// whose beat is its own (region threads, the handler) waiting for the watchdog.
pub(super) struct Moved(Condvar);

/// What a thread waiting on [`Ledger::moved`] waits for, for the watchdog.
const WAITING_ON_BUFFERS: &str = "copies, kernels or moves of other regions on its buffers";

impl Moved {
    pub(super) fn wait(&self, bufs: &mut MutexGuard<'_, Buffers>) {
        watchdog::waiting(WAITING_ON_BUFFERS, || self.0.wait(bufs));
    }

    pub(super) fn wait_until(&self, bufs: &mut MutexGuard<'_, Buffers>, until: Instant) -> WaitTimeoutResult {
        watchdog::waiting(WAITING_ON_BUFFERS, || self.0.wait_until(bufs, until))
    }

    pub(super) fn notify_all(&self) -> usize {
        self.0.notify_all()
    }
}

/// [`Ledger::buffers`]: a region thread queued for it while its holder is in a marked wait
/// (a checkpoint still saving a staged copy, a kernel on the head) is waiting on that holder,
/// not stopped: its slow path marks it so for the watchdog (`watchdog::lock`).
pub(super) struct Table(Mutex<Buffers>);

impl Table {
    pub(super) fn lock(&self) -> MutexGuard<'_, Buffers> {
        watchdog::lock(&self.0, "the buffer table, held by another thread")
    }
}

/// Buffers, versions, holders and the task record.
pub(super) struct Ledger {
    pub(super) buffers: Table,
    /// Notified when a copy arrived, a kernel ended, a buffer was released (with `buffers`).
    pub(super) moved: Moved,
    pub(super) graph: Mutex<TaskGraph>,
    /// Bytes of all live device buffers (for the checkpoint interval).
    device_bytes: AtomicU64,
    /// Host allocations (`alloc_host`): address -> extent.
    pub(super) host_allocs: Mutex<HashMap<u64, u64>>,
    /// Prune the task record when it holds this many tasks (`prune.rs`).
    prune_at: AtomicU64,
    /// See [`Ledger::retains`].
    retains: bool,
}

impl Ledger {
    pub(super) fn new(buffers: Buffers, graph: TaskGraph, prune_at: u64, retains: bool) -> Self {
        Ledger {
            buffers: Table(Mutex::new(buffers)),
            moved: Moved(Condvar::new()),
            graph: Mutex::new(graph),
            device_bytes: AtomicU64::new(0),
            host_allocs: Mutex::new(HashMap::default()),
            prune_at: AtomicU64::new(prune_at),
            retains,
        }
    }

    /// Does the head keep data for recovery (fault tolerance on and `OMPCLUSTER_FT_RETAIN`
    /// not 0): copies of host data and of images' initial data, deleted buffers recorded
    /// tasks read, partial updates? With 0 it keeps nothing: the baseline that measures what
    /// keeping costs (a lost version then often has no source, and the job stops saying so).
    pub(super) fn retains(&self) -> bool {
        self.retains
    }

    /// Bytes of all live device buffers.
    pub(super) fn device_bytes(&self) -> u64 {
        self.device_bytes.load(Ordering::Relaxed)
    }

    /// `size` more bytes of live device buffers.
    pub(super) fn add_device_bytes(&self, size: u64) {
        self.device_bytes.fetch_add(size, Ordering::Relaxed);
    }

    /// `size` fewer bytes of live device buffers.
    pub(super) fn sub_device_bytes(&self, size: u64) {
        self.device_bytes.fetch_sub(size, Ordering::Relaxed);
    }

    /// How many tasks the record may hold before it is pruned.
    pub(super) fn prune_at(&self) -> u64 {
        self.prune_at.load(Ordering::Relaxed)
    }

    /// Prune the record next when it holds `tasks` tasks.
    pub(super) fn set_prune_at(&self, tasks: u64) {
        self.prune_at.store(tasks, Ordering::Relaxed);
    }
}
