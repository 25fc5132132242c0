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
use std::sync::atomic::{AtomicBool, AtomicU32};

/// Failures, recoveries, spares and buddy copies.
pub(super) struct Tolerance {
    /// The notification handler: its gate's read side is any offloading request, its write
    /// side a checkpoint or a recovery (see the `ft-handler` crate).
    pub(super) ft: Arc<Handler>,
    /// Failures are recovered from (fault tolerance on); otherwise a failure ends the job.
    pub(super) recovery: bool,
    /// Failures noticed and recoveries made, for the report.
    pub(super) failures: Mutex<Vec<FailureRecord>>,
    pub(super) recoveries: Mutex<Vec<RecoveryRecord>>,
    /// Attempts of the recovery in progress.
    pub(super) attempts: AtomicU32,
    /// Per rank: a spare worker that runs no region until it takes a dead worker's place
    /// (`OMPCLUSTER_FT_SPARES`).
    pub(super) idle_spare: Vec<AtomicBool>,
    /// Which spare took which dead worker's place (the recovery algorithm's record).
    pub(super) spares: Mutex<ft_handler::recovery::Spares>,
    /// Spares that took a dead worker's place, not yet in a recovery's report.
    pub(super) spare_log: Mutex<Vec<SpareRecord>>,
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
}
