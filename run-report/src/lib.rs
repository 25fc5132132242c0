//! The run report (`OMPCLUSTER_REPORT`): what a job did, written by the head at its end as
//! JSON. One set of types for every side: the plugin fills and writes a [`Report`]; the tests,
//! `ompcluster-trace` and the benchmark scripts read the same fields. A recovery's record
//! holds the recovery algorithm's own [`Outcome`] (ft-handler makes it), not a copy of it.
//!
//! The JSON field names are the schema the docs (README, `OMPCLUSTER_REPORT`; `docs/recovery.md`,
//! "The report") and the benchmark scripts rely on: a field renamed here is renamed for the
//! plugin and the tests at once, and must be renamed there too.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;

/// The run report.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Report {
    /// Workers at the end of the run.
    pub workers: usize,
    /// What moved and ran: the counts the timeline's summary gives too.
    #[serde(flatten)]
    pub counts: Counts,
    /// Target regions executed.
    pub tasks_executed: u64,
    /// Most target regions placed on workers and not yet done at one moment (re-runs by
    /// recovery not counted).
    #[serde(default)]
    pub most_regions_in_flight: u64,
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
    pub failures: Vec<FailureRecord>,
    /// Recoveries: each with how long offloading was held and what was re-run or restored.
    pub recoveries: Vec<RecoveryRecord>,
    /// Buddy copies the head made of versions only workers held (`OMPCLUSTER_FT_BUDDY_*`).
    pub buddy_copies: BuddyStats,
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
    pub resume_log: Option<JournalStats>,
    /// A resumed job (`ompcluster-run --resume`): what it skipped, where it switched to live and why.
    pub resume: Option<ResumeRecord>,
    /// Replicas and votes (`OMPCLUSTER_FT_REPLICAS`, `OMPCLUSTER_FT_VOTE`).
    #[serde(default)]
    pub replicas: ReplicaStats,
    /// The head's watchdog found one of its threads stopped (`OMPCLUSTER_WATCHDOG`): the job
    /// ended there, and this report was written as it ended.
    #[serde(default)]
    pub watchdog: Vec<WatchdogEvent>,
}

/// A watchdog's finding: threads of a rank that was ended because one of them stopped moving
/// while it had work.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WatchdogEvent {
    /// The rank whose threads these are.
    pub rank: i32,
    /// When, seconds since start-up.
    pub at_seconds: f64,
    /// The bound (`OMPCLUSTER_WATCHDOG`), seconds.
    pub bound_seconds: f64,
    /// Every thread that was not idle, the stopped ones first.
    pub threads: Vec<WatchedThread>,
}

/// One thread in a [`WatchdogEvent`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WatchedThread {
    /// Its name (`ompc-ft-prober`, `ft-heartbeat`...).
    pub name: String,
    /// `running` or `waiting`.
    pub state: String,
    /// What it said it was doing.
    pub doing: String,
    /// Seconds since it last moved.
    pub still_seconds: f64,
    /// Running and still for the bound or longer: what ended the rank.
    pub stopped: bool,
}

/// What replicas of regions did (`OMPCLUSTER_FT_REPLICAS=k`, `OMPCLUSTER_FT_VOTE=1`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplicaStats {
    /// Regions run on more than one worker.
    pub regions_replicated: u64,
    /// Runs besides the one whose result was taken (k - 1 per replicated region).
    pub replica_runs: u64,
    /// Regions whose result was taken from a replica other than the first-placed one (the
    /// first-placed one failed, or lost the vote).
    pub taken_from_other: u64,
    /// Copies of versions replicas made that became holders (a failure of the worker whose
    /// result was taken then costs no re-run of that region), or stale copies of a version a
    /// later one replaced (`kept_stale`).
    pub copies_kept: u64,
    /// Regions whose result a majority of at least two replicas agreed on.
    pub votes: u64,
    /// Regions where at least one replica's result differed from the one taken.
    pub corrections: u64,
    /// Regions run again because their replicas disagreed with no majority.
    pub tiebreaks: u64,
    /// With voting, regions whose result no majority checked: one worker was left, or the
    /// other replicas' workers died while it ran.
    pub unvoted: u64,
    /// With voting, regions of kernels named in `OMPCLUSTER_FT_VOTE_SKIP` (taken from the
    /// first replica, unvoted).
    #[serde(default)]
    pub vote_skipped: u64,
    /// Without voting: replica runs still going when their region went on with another
    /// replica's result (the program did not wait for them).
    #[serde(default)]
    pub tails: u64,
    /// Of those, the runs that wrote the same bytes as the result taken and whose copies
    /// became holders of its versions once they ended.
    #[serde(default)]
    pub tails_kept: u64,
    /// Of `copies_kept`, those kept as stale copies of a version a later region had already
    /// replaced when their tail was settled: sources for recovery's re-runs of what came after.
    #[serde(default)]
    pub kept_stale: u64,
    /// Test only (`OMPCLUSTER_FT_INJECT=flip:...`): runs that had a bit of what they wrote
    /// flipped (a flip whose rank runs no region after its trigger never fires).
    #[serde(default)]
    pub flips_injected: u64,
    /// Runs of regions with replicas that shared a copy with another region's kernel (both
    /// only expected to read it): replicas need not wait for a worker no other region uses.
    #[serde(default)]
    pub shared_runs: u64,
    /// Runs that changed a copy a run of another region with replicas shared, which they were
    /// not expected to write: undone and run again rather than recorded.
    #[serde(default)]
    pub shared_reruns: u64,
    /// With voting: ballots left out of the tally (losing no vote) because a change their run
    /// was not expected to make was to a copy another region's kernel used meanwhile.
    #[serde(default)]
    pub ballots_voided: u64,
    /// Tasks of regions placed with replicas that recoveries ran again (their versions held
    /// by dead workers only: a replica's run failed or was not kept, its copy was overwritten
    /// or forgotten since, or more workers were lost than the region had runs; a task a
    /// recovery ran again counts again if a later one runs it too). The sum of the
    /// recoveries' `replicated_reexecuted`.
    #[serde(default)]
    pub reexecuted: u64,
    /// Each disagreement, in order.
    pub disagreements: Vec<Disagreement>,
    /// Rank (as a string) -> votes it lost.
    pub lost_by_rank: BTreeMap<String, u64>,
    /// Workers retired for losing `OMPCLUSTER_FT_VOTE_RETIRE` votes.
    pub retired: Vec<i32>,
    /// Which regions got replicas (`OMPCLUSTER_FT_REPLICATE`): `all` or `auto` (empty with
    /// `OMPCLUSTER_FT_REPLICAS=1`).
    #[serde(default)]
    pub mode: String,
    /// With `auto`: the budget of replicas' kernel time, percent of the regions' own.
    #[serde(default)]
    pub budget_percent: u32,
    /// With `auto`: regions (with a known run time) it chose not to replicate.
    #[serde(default)]
    pub passed_over: u64,
    /// With `auto`: regions it chose that no second worker could take (run once, their
    /// credit given back: see `docs/recovery.md`, what limits how many regions get replicas).
    #[serde(default)]
    pub chosen_unplaced: u64,
    /// Kernel time of every region's run whose result was taken, seconds.
    #[serde(default)]
    pub kernel_seconds: f64,
    /// Kernel time of the other replicas' runs, seconds (the budget's measure).
    #[serde(default)]
    pub replica_kernel_seconds: f64,
    /// Kernel name -> regions of it replicated.
    #[serde(default)]
    pub replicated_by_kernel: BTreeMap<String, u64>,
}

/// Replicas of one region that wrote different results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Disagreement {
    /// The region's kernel.
    pub kernel: String,
    /// The workers whose results were taken (empty: no majority).
    pub majority: Vec<i32>,
    /// The workers whose results differed from it (every replica, with no majority).
    pub losers: Vec<i32>,
    /// When, seconds since start-up.
    pub at_seconds: f64,
}

/// What ran where and what moved: in the report, and in the timeline's summary of a trace
/// (`ompcluster-trace summary`), which counts the same things from the recorded spans.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Counts {
    /// Rank (as a string) -> target regions it ran (not counting re-runs by recovery). The
    /// head is listed only if it ran regions itself (no worker left).
    pub tasks_per_worker: BTreeMap<String, u64>,
    /// Tasks run again by all recoveries.
    pub tasks_reexecuted: u64,
    /// Bytes sent from the head to workers.
    pub bytes_submitted: u64,
    /// Bytes sent from workers to the head.
    pub bytes_retrieved: u64,
    /// Bytes sent from worker to worker.
    pub bytes_exchanged: u64,
}

/// How the workers find what a kernel wrote (`OMPCLUSTER_WRITE_DETECTION`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteDetection {
    /// Workers that track written pages.
    pub pages: Vec<i32>,
    /// Workers that hash every buffer a kernel can reach.
    pub hashing: Vec<i32>,
    /// The head's own mechanism, with the reason when it hashes (workers on the head's node
    /// have the same).
    pub head: String,
}

/// One failure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FailureRecord {
    /// The rank.
    pub rank: i32,
    /// When the head learnt of it, seconds since start-up.
    pub at_seconds: f64,
    /// How: the failure detector, or a peer's report (the other side of an exchange).
    pub noticed_by: String,
    /// Seconds from the failure to the head's notice, where the failure's time is known
    /// (failures injected with `OMPCLUSTER_FT_INJECT`).
    pub detection_latency_seconds: Option<f64>,
}

/// A spare worker that took a dead worker's place.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpareRecord {
    /// The spare's rank.
    pub spare: i32,
    /// The dead worker whose place it took.
    pub replaced: i32,
    /// When, seconds since start-up.
    pub at_seconds: f64,
}

/// What one recovery did, as the recovery algorithm (ft-handler) counts it.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// Versions the dead held that no live rank had.
    pub versions_lost: u64,
    /// Tasks run again.
    pub tasks_reexecuted: u64,
    /// Of those, tasks whose region ran with replicas (`OMPCLUSTER_FT_REPLICAS`).
    #[serde(default)]
    pub replicated_reexecuted: u64,
    /// Versions restored from checkpoints (inputs of re-runs included).
    #[serde(rename = "buffers_from_checkpoints")]
    pub from_checkpoints: u64,
    /// Versions copied from the head's buddy copies.
    #[serde(rename = "buffers_from_buddy_copies")]
    pub from_buddy_copies: u64,
    /// Versions copied from live ranks to where a re-run task needed them.
    #[serde(rename = "buffers_from_live_copies")]
    pub from_live_copies: u64,
    /// Lost versions rebuilt by re-running tasks.
    #[serde(rename = "buffers_rebuilt")]
    pub rebuilt: u64,
    /// Seconds spent re-running tasks (installing their inputs included).
    pub rerun_seconds: f64,
    /// Tasks or chains handed to a worker together (a chain of in-place updates is one).
    pub rerun_batches: u64,
    /// The most batches running at once (1 with `OMPCLUSTER_FT_REEXEC=sequential`).
    #[serde(default)]
    pub most_batches_at_once: u64,
    /// Spares that took a dead worker's place: (spare, dead worker). The report lists them
    /// with their times ([`RecoveryRecord::spares`]).
    #[serde(skip)]
    pub spares: Vec<(i32, i32)>,
    /// Plans the successful attempt made (more than 1 when a version a plan counted on was
    /// gone, or a checkpoint it chose turned out damaged).
    pub plans: u32,
    /// Where tasks could be re-run.
    pub survivors: Vec<i32>,
}

/// One completed recovery.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RecoveryRecord {
    /// Every rank dead when it completed.
    pub dead: Vec<i32>,
    /// When it started, seconds since start-up.
    pub at_seconds: f64,
    /// How long the program's offloading was held, seconds.
    pub paused_seconds: f64,
    /// What the recovery algorithm did.
    #[serde(flatten)]
    pub outcome: Outcome,
    /// Tasks re-run per second of `rerun_seconds`.
    pub rerun_rate_per_second: f64,
    /// Spare workers that took the place of dead ones.
    pub spares: Vec<SpareRecord>,
    /// Attempts (more than 1 if ranks died during it).
    pub attempts: u32,
}

/// Buddy copies made.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
pub struct BuddyStats {
    /// Versions copied to the head.
    pub copies: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Seconds spent copying.
    pub seconds: f64,
    /// Copies not made because the head would have backed more than `OMPCLUSTER_FT_BUDDY_MEMORY`.
    pub over_budget: u64,
}

/// What the log for resuming holds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalStats {
    /// Entries (regions and retrieves) written.
    pub entries: u64,
    /// Bytes of log segments written.
    pub bytes: u64,
}

/// What a resumed job did.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ResumeRecord {
    /// The checkpoint it resumed from (None: nothing could be resumed).
    pub checkpoint: Option<u64>,
    /// Regions not run: the log held them.
    pub regions_skipped: u64,
    /// Retrieves answered from the log.
    pub retrieves_from_log: u64,
    /// The region (record index) at which it switched to live, if it did.
    pub switched_live_at_region: Option<u64>,
    /// When it switched, seconds since start-up.
    pub switched_live_at_seconds: Option<f64>,
    /// Why it switched (or why nothing was resumed).
    pub reason: String,
    /// Versions adopted from the checkpoint: read by the workers, each straight into its
    /// memory and checked against its checksum, all at once, when the job first needed them.
    pub versions_adopted: u64,
    /// Versions recovery loaded from the checkpoint (adopted ones, lost again with a worker).
    pub versions_loaded: u64,
    /// Versions rebuilt by re-running logged regions at the switch.
    pub versions_rebuilt: u64,
    /// Regions the first job had run at the checkpoint resumed from.
    pub first_job_regions: u64,
    /// Seconds into the first job at that checkpoint.
    pub first_job_seconds: f64,
    /// Seconds of kernels the skipped regions took in the first job.
    pub skipped_kernel_seconds: f64,
    /// When fast-forwarding ended (every logged region skipped, or the program took another
    /// path), seconds since start-up.
    pub fast_forward_ended_at_seconds: Option<f64>,
    /// The first job's time at its checkpoint less the time this job took to get there: what
    /// resuming saved (when fast-forwarding ended with every logged region skipped).
    pub seconds_saved: Option<f64>,
}

impl Report {
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

    /// Parse a report.
    pub fn parse(json: &str) -> Result<Report, String> {
        serde_json::from_str(json).map_err(|e| format!("bad report: {e}\n{json}"))
    }

    /// Read a report file.
    pub fn read(path: &Path) -> Result<Report, String> {
        let s = std::fs::read_to_string(path).map_err(|e| format!("cannot read the report {}: {e}", path.display()))?;
        Report::parse(&s)
    }

    /// Number of workers that executed at least one region.
    pub fn busy_workers(&self) -> usize {
        self.counts.tasks_per_worker.values().filter(|&&n| n > 0).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The JSON keeps the flat field names the docs and scripts read, and reads back whole.
    #[test]
    fn written_and_read_back_with_the_documented_names() {
        let mut r = Report { workers: 3, tasks_executed: 5, ..Report::default() };
        r.counts.tasks_per_worker.insert("1".into(), 5);
        r.counts.bytes_exchanged = 42;
        r.recoveries.push(RecoveryRecord {
            dead: vec![2],
            outcome: Outcome { from_checkpoints: 3, rebuilt: 1, spares: vec![(3, 2)], survivors: vec![1, 3], ..Outcome::default() },
            spares: vec![SpareRecord { spare: 3, replaced: 2, at_seconds: 0.5 }],
            ..RecoveryRecord::default()
        });
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.json");
        r.write(&path).unwrap();
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(v["tasks_per_worker"]["1"], 5);
        assert_eq!(v["bytes_exchanged"], 42);
        let rec = &v["recoveries"][0];
        assert_eq!(rec["buffers_from_checkpoints"], 3);
        assert_eq!(rec["buffers_rebuilt"], 1);
        assert_eq!(rec["spares"][0]["replaced"], 2);
        assert!(rec.get("outcome").is_none() && rec.get("from_checkpoints").is_none());
        let back = Report::read(&path).unwrap();
        assert_eq!(back.busy_workers(), 1);
        let mut expected = r.recoveries[0].clone();
        expected.outcome.spares.clear(); // listed with their times in `spares`
        assert_eq!(back.recoveries[0], expected);
        assert_eq!(back.counts, r.counts);
    }

    #[test]
    fn a_report_missing_a_field_is_refused() {
        assert!(Report::parse("{\"workers\": 3}").unwrap_err().contains("missing field"));
    }
}
