//! Counters of a run and the JSON report written at exit (`OMPCLUSTER_REPORT`).

use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counters updated by the cluster device (lock-free; read once at exit).
#[derive(Debug)]
pub(crate) struct Stats {
    per_worker: Vec<AtomicU64>,
    submitted: AtomicU64,
    retrieved: AtomicU64,
    exchanged: AtomicU64,
    merges: AtomicU64,
}

impl Stats {
    pub(crate) fn new(ranks: usize) -> Self {
        Stats {
            per_worker: (0..ranks).map(|_| AtomicU64::new(0)).collect(),
            submitted: AtomicU64::new(0),
            retrieved: AtomicU64::new(0),
            exchanged: AtomicU64::new(0),
            merges: AtomicU64::new(0),
        }
    }
    pub(crate) fn add_task(&self, worker: i32) {
        self.per_worker[worker as usize].fetch_add(1, Ordering::Relaxed);
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

/// The run report.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Workers at the end of the run.
    pub workers: usize,
    /// Target regions executed.
    pub tasks_executed: u64,
    /// Worker rank (as a string) -> regions it executed.
    pub tasks_per_worker: BTreeMap<String, u64>,
    /// Bytes sent from the head to workers.
    pub bytes_submitted: u64,
    /// Bytes sent from workers to the head.
    pub bytes_retrieved: u64,
    /// Bytes sent from worker to worker.
    pub bytes_exchanged: u64,
    /// Changes to one buffer made at the same time on different workers and merged (see
    /// the README, "Placement").
    pub merges: u64,
    /// MPI messages the head sent (control messages and data fragments; the EXIT at the end
    /// not counted).
    pub head_messages_sent: u64,
    /// MPI messages the head received.
    pub head_messages_received: u64,
    /// Time from plugin start-up to shutdown.
    pub wall_seconds: f64,
    /// Checkpoints completed (flushed and published).
    pub checkpoints: u64,
    /// Bytes written by completed checkpoints.
    pub checkpoint_bytes: u64,
    /// Total time offloading was paused for checkpoints.
    pub checkpoint_pause_seconds: f64,
    /// The pause of each checkpoint taken, in order.
    pub checkpoint_pauses_seconds: Vec<f64>,
    /// Per completed checkpoint: seconds from the end of its pause until every saving rank had
    /// copied its regions to scratch (in the background, each buffer before anything changes it).
    pub checkpoint_save_seconds: Vec<f64>,
    /// Per completed checkpoint: seconds from then until it was durable and published (the
    /// background flush of every saving rank).
    pub checkpoint_flush_seconds: Vec<f64>,
    /// Checkpoints that failed, and why.
    pub checkpoint_errors: Vec<String>,
    /// Ranks that failed: each with when the head learnt of it and how.
    pub failures: Vec<crate::cluster::FailureRecord>,
    /// Recoveries: each with how long offloading was held and what was re-run or restored.
    pub recoveries: Vec<crate::cluster::RecoveryRecord>,
    /// Tasks run again by all recoveries.
    pub tasks_reexecuted: u64,
    /// Buddy copies the head made of versions only workers held (`OMPCLUSTER_FT_BUDDY_*`).
    pub buddy_copies: crate::cluster::BuddyStats,
    /// Workers still alive at the end.
    pub workers_alive_at_end: usize,
    /// Bytes the head kept only for recovery at the end (`OMPCLUSTER_FT_RETAIN` bounds it).
    pub retained_bytes: u64,
    /// Tasks the record still held at the end (the rest were pruned: recovery could no longer
    /// need them; tasks that made no version are never kept).
    pub tasks_recorded: u64,
    /// The head process's peak resident memory (getrusage).
    pub head_max_rss_bytes: u64,
    /// When every worker had died and the head started running the target regions itself,
    /// seconds since start-up (`tasks_per_worker["0"]` counts what it ran).
    pub continued_on_head_at_seconds: Option<f64>,
    /// How the workers found what kernels wrote.
    pub write_detection: WriteDetection,
    /// What the log for resuming holds (with checkpoints on): entries and bytes published.
    pub resume_log: Option<crate::journal::JournalStats>,
    /// A resumed job (`ompcluster-run --resume`): what it skipped, where it switched to live and why.
    pub resume: Option<crate::cluster::ResumeRecord>,
}

/// How the workers find what a kernel wrote (`OMPCLUSTER_WRITE_DETECTION`; see
/// `event_system::worker::written`).
#[derive(Debug, Clone, Default, Serialize)]
pub struct WriteDetection {
    /// Workers that track written pages.
    pub pages: Vec<i32>,
    /// Workers that hash every buffer a kernel can reach.
    pub hashing: Vec<i32>,
    /// The head's own mechanism, with the reason when it hashes (workers on the head's node
    /// have the same).
    pub head: String,
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

impl Report {
    pub(crate) fn from_stats(s: &Stats, workers: usize, wall_seconds: f64) -> Self {
        let tasks_per_worker: BTreeMap<String, u64> = s
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
            tasks_per_worker,
            bytes_submitted: s.submitted.load(Ordering::Relaxed),
            bytes_retrieved: s.retrieved.load(Ordering::Relaxed),
            bytes_exchanged: s.exchanged.load(Ordering::Relaxed),
            merges: s.merges.load(Ordering::Relaxed),
            head_messages_sent: 0,
            head_messages_received: 0,
            wall_seconds,
            checkpoints: 0,
            checkpoint_bytes: 0,
            checkpoint_pause_seconds: 0.0,
            checkpoint_pauses_seconds: Vec::new(),
            checkpoint_save_seconds: Vec::new(),
            checkpoint_flush_seconds: Vec::new(),
            checkpoint_errors: Vec::new(),
            failures: Vec::new(),
            recoveries: Vec::new(),
            tasks_reexecuted: 0,
            buddy_copies: Default::default(),
            workers_alive_at_end: workers,
            retained_bytes: 0,
            tasks_recorded: 0,
            head_max_rss_bytes: 0,
            continued_on_head_at_seconds: None,
            write_detection: WRITE_DETECTION.get().cloned().unwrap_or_default(),
            resume_log: None,
            resume: None,
        }
    }

    /// Write as JSON, atomically (a temporary file in the same directory, then rename).
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
        serde_json::to_writer_pretty(&mut tmp, self)?;
        tmp.write_all(b"\n")?;
        tmp.as_file().sync_all()?;
        tmp.persist(path).map_err(|e| e.error)?;
        Ok(())
    }
}
