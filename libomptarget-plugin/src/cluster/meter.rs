//! What a run is measured by: the clock every `*_seconds` of the report and the trace counts
//! from, the counters of the report, the timeline (`OMPCLUSTER_TRACE`), and the verbose log
//! (`OMPCLUSTER_VERBOSE`) stamped with the same clock.
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
    /// Say what the device does on stderr (`OMPCLUSTER_VERBOSE`).
    verbose: bool,
}

impl Meter {
    pub(super) fn new(ranks: usize, traced: bool, verbose: bool) -> Self {
        let start = Instant::now();
        Meter { start, stats: Stats::new(ranks), trace: traced.then(|| Arc::new(timeline::Recorder::new(start))), verbose }
    }

    /// Is the verbose log on?
    pub(super) fn verbose(&self) -> bool {
        self.verbose
    }

    /// Now on the trace's clock, if a trace is recorded: the start of a span for
    /// [`Meter::trace`] (None costs nothing more).
    pub(super) fn trace_now(&self) -> Option<f64> {
        self.trace.as_ref().map(|t| t.now())
    }

    /// Record a span of `cat` on `rank`'s track from `since` (a [`Meter::trace_now`]) until
    /// now; `args` is only called when a trace is recorded.
    pub(super) fn trace(&self, since: Option<f64>, cat: timeline::Cat, rank: i32, name: impl Into<timeline::record::Name>, args: impl FnOnce() -> timeline::Args) {
        if let (Some(t), Some(since)) = (&self.trace, since) {
            t.span(cat, rank, name, since, args());
        }
    }

    pub(super) fn log(&self, what: std::fmt::Arguments<'_>) {
        if self.verbose {
            eprintln!("[ompcluster {:>9.3} ms] {what}", self.start.elapsed().as_secs_f64() * 1e3);
        }
    }
}
