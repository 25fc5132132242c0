//! What a run is measured by: the clock every `*_seconds` of the report and the trace counts
//! from, the counters of the report, and the timeline (`OMPCLUSTER_TRACE`).
//!
//! Threads: any. The counters are atomics; the recorder locks inside (only when a trace is
//! recorded).

use crate::report::Stats;
use std::sync::Arc;
use std::time::Instant;

/// The clock, the counters and the timeline.
pub(super) struct Meter {
    pub(super) start: Instant,
    pub(super) stats: Stats,
    /// The run's timeline, if one is recorded (`OMPCLUSTER_TRACE`).
    pub(super) trace: Option<Arc<timeline::Recorder>>,
}

impl Meter {
    pub(super) fn new(ranks: usize, traced: bool) -> Self {
        let start = Instant::now();
        Meter { start, stats: Stats::new(ranks), trace: traced.then(|| Arc::new(timeline::Recorder::new(start))) }
    }
}
