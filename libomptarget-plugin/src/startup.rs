//! Start-up under a bound. Until the failure detector runs, a rank that dies or freezes leaves
//! the others waiting inside MPI (its own start, `MPI_Init`, and the collectives of `init`),
//! where nothing can notice it. Each rank therefore starts a watchdog before MPI does: if
//! start-up is not done within `OMPCLUSTER_START_TIMEOUT` seconds (60 by default), the rank
//! says where it waits and leaves. Rank 0 also names what became of the others, from the
//! progress files each rank writes beside the launcher's status file (ranks on its node
//! only: the directory is the launcher's, on the launcher's node), and tells the launcher to
//! stop the job.
//!
//! Design note (threads): one thread per rank, `ompc-startup`, from [`begin`] until [`done`]
//! or the bound. The rank's main thread moves [`Stage`] forward (an atomic, plus the progress
//! file) and calls [`done`], which wakes the watchdog through a condition variable; the
//! watchdog only reads. On the bound it leaves the process with `_exit` (`runtime::leave`):
//! the main thread is stuck inside MPI and cannot be asked to return.

use parking_lot::{Condvar, Mutex};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

/// Where a rank's start-up is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub(crate) enum Stage {
    /// `MPI_Init`: MPI's own start, with every rank.
    Mpi = 1,
    /// The check that every rank runs the same build (the first exchange, `same_build.rs`).
    SameBuild,
    /// The agreement on the device heap's base (a collective).
    HeapBase,
    /// The runtime's communicator (`MPI_Comm_dup`, a collective).
    Communicator,
    /// Exchanging hosts and pids (a collective).
    Processes,
    /// Opening the checkpoint store (collectives).
    CheckpointStore,
    /// Starting the failure detector (its ring, a collective).
    Detector,
    /// Done: failures are the detector's from here on.
    Started,
}

impl Stage {
    fn of(n: u8) -> Option<Stage> {
        use Stage::*;
        [Mpi, SameBuild, HeapBase, Communicator, Processes, CheckpointStore, Detector, Started].into_iter().find(|s| *s as u8 == n)
    }

    fn what(self) -> &'static str {
        match self {
            Stage::Mpi => "MPI's start-up (MPI_Init)",
            Stage::SameBuild => "the check that every rank runs the same build",
            Stage::HeapBase => "the agreement on the device heap's base",
            Stage::Communicator => "the creation of the runtime's communicator",
            Stage::Processes => "the exchange of hosts and process ids",
            Stage::CheckpointStore => "the opening of the checkpoint store",
            Stage::Detector => "the start of the failure detector",
            Stage::Started => "nothing (started)",
        }
    }
}

/// What a rank whose progress file says `stage` still had to finish when it ended, for the
/// launcher (`rank 0 ended during ...`); None for a number that is no stage, or `Started`.
pub fn unfinished_stage(stage: u8) -> Option<&'static str> {
    Stage::of(stage).filter(|s| *s != Stage::Started).map(Stage::what)
}

/// The progress file of a rank, read: its pid and its stage's number.
pub fn read_progress(text: &str) -> Option<(u32, u8)> {
    let mut it = text.split_whitespace();
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

static STAGE: AtomicU8 = AtomicU8::new(0);
static DONE: Mutex<bool> = Mutex::new(false);
static WAKE: Condvar = Condvar::new();

/// This rank's number and the job's size, from Open MPI's environment (MPI is not up yet).
fn rank_and_size() -> (i32, i32) {
    let get = |v: &str| std::env::var(v).ok().and_then(|s| s.parse().ok());
    (get("OMPI_COMM_WORLD_RANK").unwrap_or(0), get("OMPI_COMM_WORLD_SIZE").unwrap_or(0))
}

/// The progress file of `rank`, beside the launcher's status file (none without a launcher).
fn progress_file(rank: i32) -> Option<PathBuf> {
    let status = std::env::var_os("OMPCLUSTER_EXIT_STATUS_FILE").filter(|p| !p.is_empty())?;
    Some(PathBuf::from(status).parent()?.join(format!("rank-{rank}")))
}

/// How much longer than rank 0 the other ranks wait: rank 0 looks at them before they leave.
const WORKERS_LATER: Duration = Duration::from_secs(5);

/// Start the watchdog: this rank's start-up must be [`done`] within `bound` (rank 0; the
/// others [`WORKERS_LATER`] more).
pub(crate) fn begin(bound: Duration) {
    enter(Stage::Mpi);
    let until = Instant::now() + bound + if rank_and_size().0 == 0 { Duration::ZERO } else { WORKERS_LATER };
    let spawned = std::thread::Builder::new().name("ompc-startup".into()).spawn(move || {
        let mut done = DONE.lock();
        while !*done {
            if WAKE.wait_until(&mut done, until).timed_out() && !*done {
                drop(done);
                give_up(bound);
            }
        }
    });
    if let Err(e) = spawned {
        eprintln!("ompcluster: cannot watch this rank's start-up ({e}): a rank lost while the job starts may hang it");
    }
}

/// This rank's start-up reached `stage`.
pub(crate) fn enter(stage: Stage) {
    STAGE.store(stage as u8, Ordering::Release);
    if let Some(f) = progress_file(rank_and_size().0) {
        // Written whole, then renamed over the last one: a rank killed in the middle of a
        // plain write (truncate, then write) left an empty file, and rank 0 could not name it
        // (CI, stop 48: a SIGKILL 120 ms after the rank appeared). The directory is the
        // launcher's private one (0700), so the fixed name beside it is safe.
        // (The launcher's directory may be on another node: then there is none here.)
        let part = f.with_extension("new");
        if std::fs::write(&part, format!("{} {}\n", std::process::id(), stage as u8)).is_ok() {
            let _ = std::fs::rename(&part, &f);
        }
    }
}

/// This rank's start-up is over (started, or given up on by `init` itself): the watchdog ends.
pub(crate) fn done() {
    enter(Stage::Started);
    *DONE.lock() = true;
    WAKE.notify_all();
}

/// What became of `rank` as its progress file and `/proc` tell (None: still waiting, or
/// started).
fn fate(rank: i32) -> Option<String> {
    let Some(text) = progress_file(rank).and_then(|f| std::fs::read_to_string(f).ok()) else {
        return Some(format!("rank {rank} never began the runtime's start-up (it did not start or ended before, or it runs on another node)"));
    };
    let (pid, stage) = read_progress(&text)?;
    let stage = Stage::of(stage)?;
    match event_system::process::state(pid) {
        None | Some('Z') | Some('X') => Some(format!("rank {rank} (pid {pid}) ended during {}", stage.what())),
        Some('T') | Some('t') => Some(format!("rank {rank} (pid {pid}) is frozen (stopped) in {}", stage.what())),
        Some(_) => None,
    }
}

/// The bound passed: say where this rank waits and what became of the others (rank 0), tell
/// the launcher, leave.
fn give_up(bound: Duration) -> ! {
    let (rank, size) = rank_and_size();
    let stage = Stage::of(STAGE.load(Ordering::Acquire)).unwrap_or(Stage::Mpi);
    let lost: Vec<(i32, String)> = (0..size).filter(|&r| r != rank).filter_map(|r| fate(r).map(|f| (r, f))).collect();
    let mut report = format!(
        "ompcluster: rank {rank}: the job did not start within {} s (OMPCLUSTER_START_TIMEOUT): this rank still waits in {}; a rank probably died or froze as the job started; leaving\n",
        bound.as_secs(),
        stage.what()
    );
    if rank == 0 {
        for (_, f) in &lost {
            report.push_str(&format!("ompcluster: {f}\n"));
        }
        let ranks: Vec<i32> = if lost.is_empty() { (1..size).collect() } else { lost.iter().map(|&(r, _)| r).collect() };
        // The launcher prints it (mpirun, stuck too, may never pass on what this rank prints).
        if !crate::exit_status::write_startup_failure(1, &ranks, &report) {
            eprint!("{report}");
        }
    } else if lost.iter().any(|&(r, _)| r == 0) {
        // Rank 0 cannot speak for the job.
        eprint!("{report}");
    }
    crate::runtime::leave(1)
}
