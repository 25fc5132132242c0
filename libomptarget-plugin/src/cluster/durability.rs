//! Durability's state: the checkpoint store, the log published with each checkpoint, and a
//! resumed job's fast-forward (`resume.rs`).
//!
//! Threads: offloading threads (a checkpoint is due at a request; resuming skips regions),
//! the handler (recovery loads checkpointed versions), the checkpointer's background threads
//! (inside `Checkpointer`), the SIGTERM thread (a final checkpoint). Lock order (`resume.rs`):
//! the gate, then `replay`, then `adoptable`, then the ledger's `buffers`; `resume_record` is
//! innermost.

use super::ResumeRecord;
use super::resume::Replay;
use crate::checkpoint::Checkpointer;
use crate::journal::{Checkpointed, Entry, Journal, TaskEntry};
use parking_lot::Mutex;
use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Checkpoints, the log and resuming.
pub(super) struct Durability {
    pub(super) ckpt: Option<Checkpointer>,
    /// The log published with every checkpoint, for resuming (on with checkpoints).
    pub(super) journal: Option<Arc<Journal>>,
    /// A resumed job's fast-forward (`resume.rs`), and whether it is still fast-forwarding.
    pub(super) replay: Mutex<Replay>,
    replaying: AtomicBool,
    /// Versions get content keys (`journal.rs`): with the log, or when resuming.
    keyed: bool,
    /// A resumed job (`OMPCLUSTER_RESUME=1` with a log to fast-forward through).
    resumed: bool,
    /// What the checkpoint a resumed job resumed from holds, by address (`resume.rs`).
    pub(super) adoptable: Mutex<HashMap<u64, Checkpointed>>,
    /// What a resumed job did, for the report.
    pub(super) resume_record: Mutex<Option<ResumeRecord>>,
}

impl Durability {
    pub(super) fn new(ckpt: Option<Checkpointer>, journal: Option<Arc<Journal>>, mut replay: Replay, resume_record: Option<ResumeRecord>) -> Self {
        let fast_forward = matches!(replay, Replay::FastForward(_));
        let adoptable = match &mut replay {
            Replay::FastForward(log) => std::mem::take(&mut log.by_addr),
            Replay::Live => HashMap::default(),
        };
        Durability {
            replaying: AtomicBool::new(fast_forward),
            keyed: journal.is_some() || fast_forward,
            resumed: fast_forward,
            ckpt,
            journal,
            adoptable: Mutex::new(adoptable),
            replay: Mutex::new(replay),
            resume_record: Mutex::new(resume_record),
        }
    }

    /// Is the job fast-forwarding?
    pub(super) fn fast_forward(&self) -> bool {
        self.replaying.load(Ordering::Acquire)
    }

    /// Fast-forwarding is over (`resume.rs`).
    pub(super) fn stop_fast_forward(&self) {
        self.replaying.store(false, Ordering::Release);
    }

    /// Do versions get content keys (`journal.rs`)?
    pub(super) fn keyed(&self) -> bool {
        self.keyed
    }

    /// Is this a resumed job?
    pub(super) fn resumed(&self) -> bool {
        self.resumed
    }

    /// Wait until a checkpoint in progress has saved the head's staged copy of the buffer at
    /// `addr` (if it is saving it): call before changing or freeing that copy.
    pub(super) fn before_changing_staged(&self, addr: u64) {
        if let Some(cp) = &self.ckpt {
            watchdog::waiting("a checkpoint saving a buffer about to change", || cp.head_pending.wait(addr));
        }
    }

    /// The log entry of a region that ran cleanly (see `launch.rs`).
    pub(super) fn log_task(&self, t: TaskEntry) {
        if let Some(j) = &self.journal {
            j.push(Entry::Task(t));
        }
    }
}
