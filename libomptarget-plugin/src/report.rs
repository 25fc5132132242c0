//! Counters of a run, and what the head adds to them for the run report written at exit
//! (`OMPCLUSTER_REPORT`, whose types are the `run-report` crate's).

use run_report::{Counts, Report, WriteDetection};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counters updated by the cluster device (lock-free; read once at exit).
#[derive(Debug)]
pub(crate) struct Stats {
    per_worker: Vec<AtomicU64>,
    submitted: AtomicU64,
    retrieved: AtomicU64,
    exchanged: AtomicU64,
    merges: AtomicU64,
    most_in_flight: AtomicU64,
    /// What replicas did (`cluster/replicas.rs`).
    pub(crate) replicas: Replicas,
}

/// Counters of replicas and votes (the report's `replicas`).
#[derive(Debug, Default)]
pub(crate) struct Replicas {
    pub(crate) regions: AtomicU64,
    pub(crate) extra_runs: AtomicU64,
    pub(crate) taken_from_other: AtomicU64,
    pub(crate) copies_kept: AtomicU64,
    pub(crate) votes: AtomicU64,
    pub(crate) corrections: AtomicU64,
    pub(crate) tiebreaks: AtomicU64,
    pub(crate) unvoted: AtomicU64,
    pub(crate) passed_over: AtomicU64,
    pub(crate) chosen_unplaced: AtomicU64,
    pub(crate) vote_skipped: AtomicU64,
    /// Replica runs still going when their region went on (`cluster/tails.rs`), and those
    /// whose copies then became holders.
    pub(crate) tails: AtomicU64,
    pub(crate) tails_kept: AtomicU64,
    /// Copies kept (among `copies_kept`) as stale copies of a version a later one replaced
    /// before their tail was settled.
    pub(crate) kept_stale: AtomicU64,
    /// Test only (`flip:`): runs sent with a bit to flip.
    pub(crate) flips_injected: AtomicU64,
    /// Sharing copies with other regions (`cluster/launch.rs`): runs that shared one, runs
    /// again for changing one, ballots voided for it.
    pub(crate) shared_runs: AtomicU64,
    pub(crate) shared_reruns: AtomicU64,
    pub(crate) ballots_voided: AtomicU64,
    /// Kernel time of the runs whose result was taken, and of the other replicas' runs (ns).
    pub(crate) region_ns: AtomicU64,
    pub(crate) replica_ns: AtomicU64,
    /// `OMPCLUSTER_FT_REPLICATE` and its budget (set once, at start).
    pub(crate) policy: std::sync::OnceLock<(&'static str, u32)>,
    /// Taken alone, innermost.
    pub(crate) record: parking_lot::Mutex<VoteRecord>,
}

/// What voting found (see [`Replicas::record`]).
#[derive(Debug, Default)]
pub(crate) struct VoteRecord {
    pub(crate) disagreements: Vec<run_report::Disagreement>,
    /// Rank -> votes it lost.
    pub(crate) lost: BTreeMap<i32, u64>,
    /// Workers retired for losing votes.
    pub(crate) retired: Vec<i32>,
    /// Kernel name -> regions of it replicated.
    pub(crate) by_kernel: BTreeMap<String, u64>,
}

impl Replicas {
    /// Votes lost by `rank` so far, this one included.
    pub(crate) fn lose_vote(&self, rank: i32) -> u64 {
        let mut r = self.record.lock();
        let n = r.lost.entry(rank).or_default();
        *n += 1;
        *n
    }

    fn report(&self) -> run_report::ReplicaStats {
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let r = self.record.lock();
        run_report::ReplicaStats {
            regions_replicated: n(&self.regions),
            replica_runs: n(&self.extra_runs),
            taken_from_other: n(&self.taken_from_other),
            copies_kept: n(&self.copies_kept),
            votes: n(&self.votes),
            corrections: n(&self.corrections),
            tiebreaks: n(&self.tiebreaks),
            unvoted: n(&self.unvoted),
            disagreements: r.disagreements.clone(),
            lost_by_rank: r.lost.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            retired: r.retired.clone(),
            mode: self.policy.get().map(|p| p.0.to_string()).unwrap_or_default(),
            budget_percent: self.policy.get().map_or(0, |p| p.1),
            passed_over: n(&self.passed_over),
            chosen_unplaced: n(&self.chosen_unplaced),
            vote_skipped: n(&self.vote_skipped),
            tails: n(&self.tails),
            tails_kept: n(&self.tails_kept),
            kept_stale: n(&self.kept_stale),
            flips_injected: n(&self.flips_injected),
            shared_runs: n(&self.shared_runs),
            shared_reruns: n(&self.shared_reruns),
            ballots_voided: n(&self.ballots_voided),
            // Filled in from the recoveries (`cluster/mod.rs`).
            reexecuted: 0,
            kernel_seconds: n(&self.region_ns) as f64 * 1e-9,
            replica_kernel_seconds: n(&self.replica_ns) as f64 * 1e-9,
            replicated_by_kernel: r.by_kernel.clone(),
        }
    }
}

impl Stats {
    pub(crate) fn new(ranks: usize) -> Self {
        Stats {
            per_worker: (0..ranks).map(|_| AtomicU64::new(0)).collect(),
            submitted: AtomicU64::new(0),
            retrieved: AtomicU64::new(0),
            exchanged: AtomicU64::new(0),
            merges: AtomicU64::new(0),
            most_in_flight: AtomicU64::new(0),
            replicas: Replicas::default(),
        }
    }
    /// `n` regions are in flight now.
    pub(crate) fn note_in_flight(&self, n: u32) {
        self.most_in_flight.fetch_max(u64::from(n), Ordering::Relaxed);
    }
    pub(crate) fn add_task(&self, worker: i32) {
        self.per_worker[worker as usize].fetch_add(1, Ordering::Relaxed);
    }
    /// Regions run so far (re-runs by recovery not counted).
    pub(crate) fn tasks(&self) -> u64 {
        self.per_worker.iter().map(|n| n.load(Ordering::Relaxed)).sum()
    }
    pub(crate) fn add_submitted(&self, n: u64) {
        self.submitted.fetch_add(n, Ordering::Relaxed);
    }
    pub(crate) fn add_retrieved(&self, n: u64) {
        self.retrieved.fetch_add(n, Ordering::Relaxed);
    }
    pub(crate) fn add_exchanged(&self, n: u64) {
        self.exchanged.fetch_add(n, Ordering::Relaxed);
    }
    pub(crate) fn add_merge(&self) {
        self.merges.fetch_add(1, Ordering::Relaxed);
    }
}

static WRITE_DETECTION: std::sync::OnceLock<WriteDetection> = std::sync::OnceLock::new();

/// Notes which ranks track pages (`tracking[r]`, rank 0 the head); says so on stderr if
/// `say`.
pub(crate) fn set_write_detection(tracking: &[bool], say: bool) {
    let w = WriteDetection {
        pages: (1..tracking.len()).filter(|&r| tracking[r]).map(|r| r as i32).collect(),
        hashing: (1..tracking.len()).filter(|&r| !tracking[r]).map(|r| r as i32).collect(),
        head: event_system::worker::written::mechanism(),
    };
    if say {
        eprintln!("ompcluster: write detection: pages on workers {:?}, hashing on workers {:?}; on the head's node: {}", w.pages, w.hashing, w.head);
    }
    let _ = WRITE_DETECTION.set(w);
}

/// This process's peak resident memory, bytes.
pub(crate) fn max_rss_bytes() -> u64 {
    // SAFETY: getrusage fills the struct it is given; zeroed is a valid initial value.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return 0;
    }
    (u.ru_maxrss.max(0) as u64) * 1024
}

impl Stats {
    /// The report of a run whose counters these are, `workers` workers at its end, and
    /// `wall_seconds` long; the caller fills in the rest.
    pub(crate) fn report(&self, workers: usize, wall_seconds: f64) -> Report {
        let tasks_per_worker: BTreeMap<String, u64> = self
            .per_worker
            .iter()
            .enumerate()
            .map(|(r, n)| (r, n.load(Ordering::Relaxed)))
            // The head is listed only if it ran regions itself (no worker left).
            .filter(|&(r, n)| r > 0 || n > 0)
            .map(|(r, n)| (r.to_string(), n))
            .collect();
        Report {
            workers,
            tasks_executed: tasks_per_worker.values().sum(),
            counts: Counts {
                tasks_per_worker,
                tasks_reexecuted: 0,
                bytes_submitted: self.submitted.load(Ordering::Relaxed),
                bytes_retrieved: self.retrieved.load(Ordering::Relaxed),
                bytes_exchanged: self.exchanged.load(Ordering::Relaxed),
            },
            merges: self.merges.load(Ordering::Relaxed),
            most_regions_in_flight: self.most_in_flight.load(Ordering::Relaxed),
            wall_seconds,
            workers_alive_at_end: workers,
            write_detection: WRITE_DETECTION.get().cloned().unwrap_or_default(),
            replicas: self.replicas.report(),
            ..Report::default()
        }
    }
}
