//! Fault tolerance's state on the head: the notification handler (whose gate pauses
//! offloading for a recovery or a checkpoint), the records of failures and recoveries, the
//! spares, buddy copies and the faults to inject.
//!
//! Threads: the handler (recovery), the prober and the detector's callbacks (failure
//! notices), offloading threads (a request that meets a dead rank records it), the buddy
//! thread. The records' mutexes are innermost (taken last, released before anything else);
//! `spares` is held by the handler across one recovery (only it takes it), and `buddy_busy`
//! by the buddy thread across a batch, before the gate (`README.md`, the lock order).

use super::{FailureRecord, RecoveryRecord, SpareRecord};
use ft_handler::Handler;
use parking_lot::Mutex;
use run_report::BuddyStats;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// Failures, recoveries, spares and buddy copies.
pub(super) struct Tolerance {
    /// The notification handler: its gate's read side is any offloading request, its write
    /// side a checkpoint or a recovery (see the `ft-handler` crate).
    pub(super) ft: Arc<Handler>,
    /// Failures are recovered from (fault tolerance on); otherwise a failure ends the job.
    recovery: bool,
    /// Failures noticed and recoveries made, for the report.
    pub(super) failures: Mutex<Vec<FailureRecord>>,
    pub(super) recoveries: Mutex<Vec<RecoveryRecord>>,
    /// Attempts of the recovery in progress.
    attempts: AtomicU32,
    /// Per rank: a spare worker that runs no region until it takes a dead worker's place
    /// (`OMPCLUSTER_FT_SPARES`).
    idle_spare: Vec<AtomicBool>,
    /// Which spare took which dead worker's place (the recovery algorithm's record).
    pub(super) spares: Mutex<ft_handler::recovery::Spares>,
    /// Spares that took a dead worker's place, not yet in a recovery's report.
    spare_log: Mutex<Vec<SpareRecord>>,
    /// Buddy copies made so far (`buddy.rs`).
    pub(super) buddy_stats: Mutex<BuddyStats>,
    /// Held by the buddy thread for each batch of copies; shutdown takes it once it has set
    /// `stopped`, to wait for a batch in progress.
    pub(super) buddy_busy: Mutex<()>,
    /// Faults to inject (`OMPCLUSTER_FT_INJECT`).
    pub(super) inject: crate::inject::Injector,
}

impl Tolerance {
    /// With `recovery` on, the last `spares` of `ranks` ranks start as idle spares (never all
    /// the workers).
    pub(super) fn new(recovery: bool, spares: usize, ranks: usize, inject: crate::inject::Injector) -> Self {
        let spares = if recovery { spares } else { 0 };
        Tolerance {
            ft: Arc::new(Handler::new()),
            recovery,
            failures: Mutex::new(Vec::new()),
            recoveries: Mutex::new(Vec::new()),
            attempts: AtomicU32::new(0),
            idle_spare: (0..ranks).map(|r| AtomicBool::new(r > 0 && r + spares >= ranks && spares < ranks - 1)).collect(),
            spares: Mutex::new(Default::default()),
            spare_log: Mutex::new(Vec::new()),
            buddy_stats: Mutex::new(BuddyStats::default()),
            buddy_busy: Mutex::new(()),
            inject,
        }
    }

    /// Are failures recovered from (fault tolerance on)?
    pub(super) fn recovery(&self) -> bool {
        self.recovery
    }

    /// A recovery starts: its attempt's number, from 1 (counted since the last one succeeded).
    pub(super) fn next_attempt(&self) -> u32 {
        self.attempts.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// A recovery succeeded: the next one starts from its first attempt.
    pub(super) fn reset_attempts(&self) {
        self.attempts.store(0, Ordering::Relaxed);
    }

    /// Is rank `r` a spare that runs no region yet?
    pub(super) fn is_idle_spare(&self, r: i32) -> bool {
        self.idle_spare[r as usize].load(Ordering::Relaxed)
    }

    /// Spare rank `r` runs regions from now on.
    pub(super) fn leave_spares(&self, r: i32) {
        self.idle_spare[r as usize].store(false, Ordering::Relaxed);
    }

    /// A spare took a dead worker's place.
    pub(super) fn log_spare(&self, rec: SpareRecord) {
        self.spare_log.lock().push(rec);
    }

    /// The spares that took a dead worker's place since the last call.
    pub(super) fn take_spare_log(&self) -> Vec<SpareRecord> {
        std::mem::take(&mut *self.spare_log.lock())
    }
}
