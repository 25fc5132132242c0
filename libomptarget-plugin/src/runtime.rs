//! Start-up and shutdown of a rank: MPI, the agreed device heap, and the role (head or worker).

use crate::cluster::Cluster;
use crate::config::Config;
use event_system::{Comm, Fenced, Liveness, SymmetricHeap};
use ft_detector::{Detector, Notice, ProcState};
use mpi::collective::SystemOperation;
use mpi::traits::*;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// What this rank is.
#[allow(clippy::large_enum_variant)] // one instance, in a static: boxing would gain nothing
pub(crate) enum Runtime {
    /// Rank 0: runs `main`, owns the cluster device.
    Head(Cluster),
    /// Ranks 1..N-1: wait for `register_lib`, then serve events.
    Worker(Mutex<Option<WorkerParts>>),
}

/// What a worker needs to serve: transport, heap, checkpoint store.
type WorkerParts = (Arc<Comm>, SymmetricHeap, Option<Arc<dyn ckpt_veloc::CheckpointStore>>);

/// The head's claim on the checkpoint directory, held until the process ends.
static JOB_CLAIM: OnceLock<ckpt_veloc::JobClaim> = OnceLock::new();

static RUNTIME: OnceLock<Runtime> = OnceLock::new();
static REGISTERED: AtomicUsize = AtomicUsize::new(0);
static DETECTOR: OnceLock<Arc<Detector>> = OnceLock::new();
/// Set once this rank starts leaving: deaths declared from then on are ranks leaving too.
static SHUTTING_DOWN: AtomicBool = AtomicBool::new(false);

/// Liveness as the failure detector sees it: every wait of the runtime gives up on a rank
/// the detector declared dead.
struct DetectorLiveness(Arc<Detector>);

impl Liveness for DetectorLiveness {
    fn is_dead(&self, rank: i32) -> bool {
        self.0.state(rank) == ProcState::Dead
    }
}

/// A worker's liveness: as the detector's, but the head counts as dead only once the detector
/// has held it dead for `grace` (its timeout) without a break. A head declared dead while it
/// was only late (its heartbeats held up on a crowded host) learns of it and announces that it
/// runs, and the detector re-admits it within a few heartbeats; a worker that had left on the
/// first word would be lost for nothing (seen with `-np 17` on 2 cores: every worker left and
/// the head ran the rest of the program alone). A head that did die is left a `grace` later.
struct PatientAboutHead {
    detector: DetectorLiveness,
    grace: std::time::Duration,
    /// Since when the detector holds the head dead, if it does.
    since: Mutex<Option<std::time::Instant>>,
}

impl Liveness for PatientAboutHead {
    fn is_dead(&self, rank: i32) -> bool {
        let dead = self.detector.is_dead(rank);
        if rank != event_system::HEAD {
            return dead;
        }
        let mut since = self.since.lock();
        if !dead {
            *since = None;
            return false;
        }
        since.get_or_insert_with(std::time::Instant::now).elapsed() >= self.grace
    }
}

/// A write to a dead peer's TCP connection (Open MPI's TCP transport, between nodes) raises
/// SIGPIPE in the writing thread, whose default action ends the process silently: a survivor,
/// the head included, died after a worker on another node did. With fault tolerance on, every
/// rank ignores SIGPIPE (the write fails with EPIPE, which Open MPI handles as the peer's
/// failure). README, Limits: a program writing to a closed pipe sees EPIPE instead of dying.
/// A handler the program installs later replaces this.
fn survive_broken_connections() {
    // SAFETY: setting a signal's disposition to SIG_IGN has no memory effects; called once at
    // start-up, before the program's main.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
}

/// Print a start-up error once (on rank 0, or wherever the rank is unknown), then exit.
fn startup_error(msg: std::fmt::Arguments<'_>) -> ! {
    let rank = std::env::var("OMPI_COMM_WORLD_RANK").unwrap_or_default();
    if rank.is_empty() || rank == "0" {
        eprintln!("ompcluster: {msg}");
    }
    std::process::exit(2);
}

/// A notice of the failure detector (on its heartbeat thread: nothing here blocks).
///
/// On the head, a worker's failure goes to the cluster device's handler, which recovers. On a
/// worker, learning that it was itself declared dead (it was frozen, and woke up) means the
/// job has gone on without it: it leaves at once, so that nothing it does later can matter.
fn on_notice(me: i32, notice: Notice, timeout_ms: u128) {
    let Notice::Failure(dead) = notice else { return };
    if SHUTTING_DOWN.load(Ordering::Acquire) {
        return;
    }
    match RUNTIME.get() {
        Some(Runtime::Head(c)) if dead != 0 => {
            c.note_failure(dead, &format!("declared dead by the failure detector after {timeout_ms} ms without a heartbeat"))
        }
        Some(Runtime::Head(_)) => {
            // The head itself (it ran all along: the detector re-admits it as it announces so;
            // the workers wait for that, `PatientAboutHead`).
            eprintln!("ompcluster: the failure detector declared the head (rank 0) dead after {timeout_ms} ms without its heartbeat, but it runs: it was only late, and is re-admitted");
        }
        Some(Runtime::Worker(_)) if dead == me => {
            eprintln!("ompcluster worker {me}: this rank was declared dead while it was not responding; the job went on without it, leaving");
            event_system::flush_stderr();
            // At once, without running destructors (they belong to a `main` this rank never
            // ran) or touching MPI again.
            leave(0)
        }
        _ => {}
    }
}

/// On the head, once the device is in use: learn the exit status before libomptarget
/// unregisters its images at exit (which stops the workers and finalizes MPI, a wait that
/// [`finalize`] bounds by leaving with this status). `exit` calls its handlers in reverse
/// order of registration, and the one that unregisters the images was registered after
/// `exit_status::keep`'s (clang's `omp_offloading.descriptor_reg` registers it once
/// `__tgt_register_lib` has returned); this one comes later still.
pub(crate) fn device_in_use() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    if !matches!(RUNTIME.get(), Some(Runtime::Head(_))) {
        return;
    }
    ONCE.call_once(|| {
        crate::exit_status::note_at_exit();
    });
}

/// Recovery is impossible (`HeadDevice::fatal`): end the job.
fn cannot_recover(why: &str) -> ! {
    internal_error(format_args!("cannot recover: {why}"))
}

/// End the job after an internal error of this plugin (a panic of ours, caught at a
/// boundary), as when recovery is impossible (`HeadDevice::fatal`): C streams flushed, one
/// line on stderr, status 4 written for the launcher (on the head), then `MPI_Abort`.
///
/// On the head the line is `ompcluster: {what}; ending the job`: the head's end ends the job
/// (the workers leave when they see it gone). On a worker it is `ompcluster worker R: {what};
/// this worker stops`: with fault tolerance on, mpirun runs in its recovery mode, where
/// `MPI_Abort` ends the calling rank only, and the head takes that for the worker's failure
/// and recovers without it (with fault tolerance off, `MPI_Abort` ends the whole job).
/// Without MPI (not initialised yet, or finalised already) this process alone leaves, with
/// status 4. Never returns; a second caller (another thread meeting an error meanwhile) waits
/// for the end without a second message.
pub(crate) fn internal_error(what: std::fmt::Arguments<'_>) -> ! {
    use std::io::Write as _;
    static ENDING: AtomicBool = AtomicBool::new(false);
    if ENDING.swap(true, Ordering::AcqRel) {
        loop {
            std::thread::park();
        }
    }
    let rank = std::env::var("OMPI_COMM_WORLD_RANK").unwrap_or_default();
    let (who, outcome) = match RUNTIME.get() {
        Some(Runtime::Worker(_)) => (format!("ompcluster worker {rank}"), "this worker stops"),
        Some(Runtime::Head(_)) => ("ompcluster".to_string(), "ending the job"),
        // Before the role is known (a panic before or during start-up): every rank may say it.
        None if rank.is_empty() || rank == "0" => ("ompcluster".to_string(), "ending the job"),
        None => (format!("ompcluster rank {rank}"), "ending the job"),
    };
    // SAFETY: flushing all C streams is always allowed.
    unsafe { libc::fflush(std::ptr::null_mut()) };
    // One write, so that ranks failing at once do not interleave their lines; and not
    // `eprintln!`, which would panic if stderr were gone.
    let _ = std::io::stderr().write_all(format!("{who}: {what}; {outcome}\n").as_bytes());
    // A worker's stderr is captured (see event-system's `output.rs`): out before it leaves.
    event_system::flush_stderr();
    crate::exit_status::write(4);
    let (mut initialized, mut finalized) = (0, 0);
    // SAFETY: both may be called at any time, from any thread, before MPI_Init and after
    // MPI_Finalize too; they only write the flag.
    unsafe {
        mpi::ffi::MPI_Initialized(&mut initialized);
        mpi::ffi::MPI_Finalized(&mut finalized);
    }
    if initialized != 0 && finalized == 0 {
        // SAFETY: MPI is initialised and not finalised; MPI_Abort ends this process (and,
        // outside mpirun's recovery mode, every process of the job).
        unsafe { mpi::ffi::MPI_Abort(mpi::ffi::RSMPI_COMM_WORLD, 4) };
    }
    // At once, without the program's exit handlers (libomptarget's would call into this
    // plugin again).
    leave(4)
}

/// Leave this process now with `code`, without running exit handlers or destructors: C
/// streams flushed, and libomp's registration of the process removed (libomp's own shutdown,
/// which removes it, does not run; see `event_system::process::libomp_registration`).
pub(crate) fn leave(code: i32) -> ! {
    event_system::process::remove_own_registration();
    // SAFETY: flushing every C stream is always allowed; `_exit` ends the process without
    // running anything else of it.
    unsafe {
        libc::fflush(std::ptr::null_mut());
        libc::_exit(code)
    }
}

/// This host, as a number every rank on it computes alike (a hash of its name).
fn host_id() -> u64 {
    use std::hash::{Hash, Hasher};
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is writable for its length; gethostname NUL-terminates when it fits.
    unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let name = buf.split(|&b| b == 0).next().unwrap_or_default();
    // DefaultHasher::new() uses fixed keys: the same value in every process.
    let mut h = std::hash::DefaultHasher::new();
    name.hash(&mut h);
    h.finish()
}

/// The runtime, if initialised.
pub(crate) fn get() -> Option<&'static Runtime> {
    RUNTIME.get()
}

/// Initialise MPI (thread level MULTIPLE), agree on a heap base, and take a role.
pub(crate) fn init() -> Result<(), String> {
    if RUNTIME.get().is_some() {
        return Ok(());
    }
    let cfg = Config::from_env().unwrap_or_else(|e| startup_error(format_args!("invalid setting {e}")));
    let ft_cfg = ft_detector::Config::from_env().unwrap_or_else(|e| startup_error(format_args!("invalid setting: {e}")));
    let rank_hint: u32 = std::env::var("OMPI_COMM_WORLD_RANK").ok().and_then(|r| r.parse().ok()).unwrap_or(0);
    let cp_cfg = ckpt_veloc::StoreConfig::from_env(rank_hint)
        .unwrap_or_else(|e| startup_error(format_args!("invalid checkpoint setting: {e}")));
    if cfg.resume && !cp_cfg.enabled {
        startup_error(format_args!("{}", crate::config::RESUME_NEEDS_CHECKPOINTS));
    }
    // From here to the failure detector, a lost rank leaves the others waiting inside MPI:
    // the watchdog bounds that (`startup.rs`). Over on every way out of this function.
    use crate::startup::{enter, Stage};
    crate::startup::begin(cfg.start_timeout);
    struct Over;
    impl Drop for Over {
        fn drop(&mut self) {
            crate::startup::done();
        }
    }
    let _over = Over;
    let (universe, level) = mpi::initialize_with_threading(mpi::Threading::Multiple)
        .ok_or("MPI was already initialised: a program run by ompcluster-run must not call MPI_Init itself")?;
    if level != mpi::Threading::Multiple {
        eprintln!("ompcluster: the MPI library does not provide MPI_THREAD_MULTIPLE (got {level:?})");
        std::process::exit(2);
    }
    let world = universe.world();
    if world.size() < 2 {
        // Nothing to offload to: leave MPI initialised (finalised at exit) and let the stock
        // plugin take the program.
        std::mem::forget(universe);
        return Err("fewer than 2 ranks: the cluster device is off (use ompcluster-run -np N with N >= 2)".into());
    }
    // The first exchange: every rank runs the same build (`same_build.rs`). A rank of another
    // build would misread every message after this one.
    enter(Stage::SameBuild);
    {
        let me = world.rank();
        let other = cfg.ft_inject.as_deref().and_then(|s| crate::inject::parse(s, Some(world.size())).ok()).is_some_and(|f| {
            crate::inject::Injector::new(f).claims_other_build(me)
        });
        let mine = crate::same_build::Claim::mine(other).words();
        let mut all = vec![0u64; crate::same_build::WORDS * world.size() as usize];
        world.all_gather_into(&mine[..], &mut all[..]);
        if let Err((ranks, report)) = crate::same_build::check(&all) {
            if me == 0 {
                // Through the launcher's start-up report (as the watchdog's, `startup.rs`),
                // else on stderr.
                if !crate::exit_status::write_startup_failure(2, &ranks, &report) {
                    eprint!("{report}");
                }
            }
            // Every rank leaves now, waiting for no other (a rank of another build may do
            // anything next): no hang.
            leave(2)
        }
    }
    enter(Stage::HeapBase);
    let heap = SymmetricHeap::reserve_agreed(cfg.heap_size, |ok| {
        let mine = i32::from(ok);
        let mut all = 0i32;
        world.all_reduce_into(&mine, &mut all, SystemOperation::min());
        all == 1
    })
    .map_err(|e| e.to_string())?;
    enter(Stage::Communicator);
    let comm = Arc::new(Comm::duplicate_world(cfg.fragment).map_err(|e| e.to_string())?);
    if comm.rank() == 0 {
        // From here on, the launcher learns the head's exit status, also of a start-up error.
        crate::exit_status::keep();
    }
    if let Some(spec) = &cfg.ft_inject {
        if let Err(e) = crate::inject::parse(spec, Some(comm.size())) {
            startup_error(format_args!("invalid setting OMPCLUSTER_FT_INJECT: {e}"));
        }
    }
    // How this rank finds what kernels write (`OMPCLUSTER_WRITE_DETECTION`), decided before
    // any buffer is backed.
    use event_system::worker::written;
    let required = written::init(cfg.write_detection);
    if let Err(e) = &required {
        eprintln!("ompcluster: rank {}: {e}", comm.rank());
    }
    // Every rank's host and process, so that a rank declared dead can be fenced for good
    // (killed by a live rank on its host), whether it tracks written pages, and, with
    // replicas, a worker's default team size (`same_sums.rs`; 0 from the head).
    enter(Stage::Processes);
    use event_system::worker::same_sums;
    let (procs, tracking, teams) = {
        let me = event_system::process::me();
        let team = if cfg.replicas > 1 && world.rank() != 0 { same_sums::default_team_size() } else { 0 };
        let mine = [host_id(), u64::from(me.pid), me.start, u64::from(written::tracking()), u64::from(team)];
        let mut all = vec![0u64; 5 * world.size() as usize];
        world.all_gather_into(&mine[..], &mut all[..]);
        let procs = all.chunks_exact(5).map(|c| (c[0], event_system::process::Victim { pid: c[1] as u32, start: c[2] })).collect::<Vec<_>>();
        let tracking: Vec<bool> = all.chunks_exact(5).map(|c| c[3] == 1).collect();
        // Validated: a size no libomp would give counts as unknown.
        let teams: Vec<u32> = all.chunks_exact(5).skip(1).map(|c| u32::try_from(c[4]).ok().filter(|&t| t <= 1 << 16).unwrap_or(0)).collect();
        (procs, tracking, teams)
    };
    if cfg.replicas > 1 {
        agree_on_sums(world.rank(), cfg.vote, &teams);
    }
    if cfg.write_detection == written::Detection::Pages && tracking.iter().skip(1).any(|&t| !t) {
        startup_error(format_args!("OMPCLUSTER_WRITE_DETECTION=pages, but page tracking does not work on every worker (each says why above)"));
    }
    crate::report::set_write_detection(&tracking, cfg.verbose && comm.rank() == 0);
    // Every rank opens its checkpoint store now, so that an unusable directory stops the job
    // before `main`, with the reason, rather than at the first checkpoint.
    let mut cp_cfg = cp_cfg;
    cp_cfg.rank = comm.rank() as u32;
    // One job token for all ranks: rank 0's.
    enter(Stage::CheckpointStore);
    world.process_at_rank(0).broadcast_into(&mut cp_cfg.job);
    let store: Option<Arc<dyn ckpt_veloc::CheckpointStore>> = if cp_cfg.enabled {
        // The head claims the persistent directory for this job (another running job there
        // is refused; what an earlier job left is removed), before any rank can save.
        let opened = ckpt_veloc::open(&cp_cfg).and_then(|s| {
            if comm.rank() == 0 {
                // The store's own persistent directory: with VeloC, the one its configuration names.
                let var = match s.kind() {
                    ckpt_veloc::StoreKind::Embedded => ckpt_veloc::vars::PERSISTENT,
                    ckpt_veloc::StoreKind::Veloc => ckpt_veloc::vars::VELOC_PERSISTENT,
                };
                // A resumed job keeps what the earlier one left: it resumes from it.
                let claim = match cfg.resume {
                    true => ckpt_veloc::claim_for_resume(s.persistent_dir(), var)?,
                    false => ckpt_veloc::claim_for_job(s.persistent_dir(), var)?,
                };
                if !claim.cleared.removed_versions.is_empty() {
                    eprintln!(
                        "ompcluster: removed {} checkpoint(s) an earlier job left in {}",
                        claim.cleared.removed_versions.len(),
                        s.persistent_dir().display()
                    );
                }
                let _ = JOB_CLAIM.set(claim);
            }
            Ok(s)
        });
        match opened {
            Ok(s) => Some(Arc::from(s)),
            Err(e) => {
                eprintln!("ompcluster: rank {}: cannot use the checkpoint directories: {e}", comm.rank());
                None
            }
        }
    } else {
        None
    };
    let cp_on_sigterm = cp_cfg.enabled && cfg.cp_on_sigterm;
    let mine = i32::from(!cp_cfg.enabled || store.is_some());
    let mut all = 0i32;
    world.all_reduce_into(&mine, &mut all, SystemOperation::min());
    if all != 1 {
        // SAFETY: MPI is initialised; every rank reached this point and leaves together.
        unsafe { mpi::ffi::MPI_Finalize() };
        std::process::exit(2);
    }
    let timeout_ms = ft_cfg.timeout.as_millis();
    let recovery = ft_cfg.enabled;
    if recovery {
        survive_broken_connections();
    }
    enter(Stage::Detector);
    let det = Arc::new(Detector::start(&world, ft_cfg).map_err(|e| format!("cannot start the failure detector: {e}"))?);
    let me = comm.rank();
    det.on_notice(move |n| on_notice(me, n, timeout_ms));
    let _ = DETECTOR.set(det.clone());
    // MPI is finalised explicitly at shutdown (see `finalize`), not when `universe` drops.
    std::mem::forget(universe);
    let live: Arc<dyn Liveness> = Arc::new(DetectorLiveness(det));
    let watch = cfg.watchdog;
    let parks = cfg.ft_inject.as_deref().and_then(|s| crate::inject::parse(s, Some(comm.size())).ok()).map_or(Vec::new(), |f| {
        crate::inject::Injector::new(f).parks_of(comm.rank())
    });
    let rt = if comm.rank() == 0 {
        let ckpt = store.map(|s| crate::checkpoint::Checkpointer::new(s, cp_cfg));
        let live = Arc::new(Fenced::new(live, comm.size() as usize));
        Runtime::Head(Cluster::new(comm, heap, live, recovery, procs, cfg, ckpt))
    } else {
        Runtime::Worker(Mutex::new(Some((comm, heap, store))))
    };
    let _ = RUNTIME.set(rt);
    start_watchdog(watch, parks);
    if let Some(Runtime::Head(c)) = RUNTIME.get() {
        if recovery {
            c.start_handler(cannot_recover).map_err(|e| format!("cannot start the recovery handler thread: {e}"))?;
        }
    }
    // A final checkpoint on SIGTERM (`sigterm.rs`): the head takes it, the workers wait.
    if cp_on_sigterm {
        let installed = match RUNTIME.get() {
            Some(Runtime::Head(c)) => crate::sigterm::install_head(|| c.final_checkpoint()),
            _ => crate::sigterm::install_worker(),
        };
        if let Err(e) = installed {
            eprintln!("ompcluster: rank {me}: cannot handle SIGTERM ({e}): no final checkpoint on SIGTERM");
        }
    }
    Ok(())
}

/// With replicas, make every worker sum as the others do (`same_sums.rs`): libomp's
/// reductions in a fixed order, and one team size where the workers' defaults (`teams`)
/// differ. The head says what it cannot make agree.
fn agree_on_sums(me: i32, vote: bool, teams: &[u32]) {
    use event_system::worker::same_sums;
    let pinned = same_sums::agreed_team_size(teams);
    if me != 0 {
        same_sums::sum_in_fixed_order();
        same_sums::pin_team_size(pinned);
        return;
    }
    if pinned > 0 {
        let most = teams.iter().max().copied().unwrap_or(0);
        eprintln!(
            "ompcluster: the workers' default team sizes differ ({pinned} to {most} threads): with replicas, kernels run teams of {pinned} where they do not say otherwise, so that replicas of a reduction sum alike (OMP_NUM_THREADS sets one size everywhere)"
        );
    }
    if let Some((var, val)) = same_sums::user_choice() {
        let tree = ["tree", "true", "1", "yes", "on"].iter().any(|t| val.trim().eq_ignore_ascii_case(t));
        if vote && !tree {
            eprintln!("ompcluster: warning: {var}={val}: parallel reductions combine their threads' shares in the order the threads finish, so replicas of such regions may disagree (OMPCLUSTER_FT_VOTE=1)");
        }
    }
}

/// Start the watchdog over this rank's threads (the `watchdog` crate; `bound`: none, no
/// watchdog): a thread of ours that stops moving while it has work is an internal error (the
/// head writes the report with what the watchdog saw and ends the job, a worker stops and
/// the head recovers from its loss). And park the
/// threads the test-only injection names (`park:`, `inject.rs`), each `ms` after now.
fn start_watchdog(bound: Option<std::time::Duration>, parks: Vec<(&'static str, u64)>) {
    if let Some(bound) = bound {
        let started = watchdog::start(bound, move |seen| {
            if let Some(Runtime::Head(c)) = RUNTIME.get() {
                c.report_stall(seen, bound);
            }
            let threads: Vec<String> = seen.iter().map(ToString::to_string).collect();
            internal_error(format_args!("the runtime made no progress for {} s (OMPCLUSTER_WATCHDOG): {}", bound.as_secs(), threads.join("; ")))
        });
        if let Err(e) = started {
            eprintln!("ompcluster: cannot start the watchdog ({e}): a thread of ours that stops may hang the job");
        }
    }
    for (name, ms) in parks {
        let _ = std::thread::Builder::new().name("ompc-ft-park".into()).spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(ms));
            // The thread may not hold its beat yet (the buddy thread starts with the first
            // region): until it does, for at most a minute.
            let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
            while watchdog::global().park(name) == 0 && std::time::Instant::now() < until {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        });
    }
}

/// A library registers its images. On a worker, this is where it becomes a worker for good.
pub(crate) fn register_lib() {
    match RUNTIME.get() {
        Some(Runtime::Head(_)) => {
            REGISTERED.fetch_add(1, Ordering::AcqRel);
        }
        Some(Runtime::Worker(parts)) => {
            let Some((comm, heap, store)) = parts.lock().take() else { return };
            let sink = store.clone().map(|s| Arc::new(crate::checkpoint::WorkerSink(s)) as Arc<dyn event_system::CheckpointSink>);
            let rank = comm.rank();
            let live: Arc<dyn Liveness> = match DETECTOR.get() {
                Some(d) => Arc::new(PatientAboutHead { detector: DetectorLiveness(d.clone()), grace: d.config().timeout, since: Mutex::new(None) }),
                None => Arc::new(event_system::NeverDead),
            };
            let code = match event_system::worker::run(comm, heap, live, sink) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("ompcluster worker {rank}: {e}");
                    1
                }
            };
            // Closed here, not left to the last reference: this process ends with `_exit`.
            // (The VeloC store leaves its node session, the last rank of a node stopping the
            // job's daemon there; the embedded store removes its scratch directory.)
            if let Some(s) = &store {
                s.close();
            }
            finalize();
            // Without running the program's destructors, which belong to a `main` this rank
            // never ran.
            leave(code);
        }
        None => {}
    }
}

/// A library unregisters; the last one stops the workers.
pub(crate) fn unregister_lib() {
    if let Some(Runtime::Head(c)) = RUNTIME.get() {
        if REGISTERED.fetch_sub(1, Ordering::AcqRel) == 1 {
            // `nowait` regions still queued finish first (they need the workers).
            crate::queues::pool().wait_idle();
            SHUTTING_DOWN.store(true, Ordering::Release);
            // (The first shutdown stops the workers; this is the only call.)
            crate::exit_status::note_unreachable(c.shutdown());
            finalize();
        }
    }
}

fn finalize() {
    SHUTTING_DOWN.store(true, Ordering::Release);
    let mut failed = false;
    if let Some(d) = DETECTOR.get() {
        failed = !d.dead_ranks().is_empty();
        if let Err(e) = d.stop() {
            eprintln!("ompcluster: failure detector: {e}");
        }
    }
    match RUNTIME.get() {
        Some(Runtime::Head(c)) => failed |= c.any_failure(),
        Some(Runtime::Worker(_)) => failed |= event_system::worker::saw_failures(),
        None => {}
    }
    // SAFETY: flushing all C streams (kernel printf output) is always allowed.
    unsafe { libc::fflush(std::ptr::null_mut()) };
    if failed {
        // MPI_Finalize waits for every rank, dead ones included: leave without it (mpirun
        // runs in its recovery mode, where that is allowed).
        return;
    }
    if DETECTOR.get().is_some_and(|d| d.is_enabled()) {
        // A rank may die while the job ends, unknown to this one yet: MPI_Finalize would then
        // wait for ever. Leave after a bound (mpirun is in its recovery mode).
        let _ = std::thread::Builder::new().name("ompc-finalize".into()).spawn(|| {
            std::thread::sleep(FINALIZE_BOUND);
            // The launcher learns the status here: the handler that writes it at exit does
            // not run after `_exit`.
            let status = crate::exit_status::noted();
            crate::exit_status::write(status);
            // With the status the program exited with (noted at `exit`,
            // `exit_status::note_at_exit`; 0 on a worker).
            leave(status)
        });
    }
    // SAFETY: MPI was initialised by `init`; every request of this rank is complete, and no
    // plugin call touches MPI after the runtime is stopped.
    unsafe { mpi::ffi::MPI_Finalize() };
}

/// Longest wait for `MPI_Finalize` with fault tolerance on.
const FINALIZE_BOUND: std::time::Duration = std::time::Duration::from_secs(5);

/// Is this an x86-64 ELF shared object (what clang-16 emits for x86_64-pc-linux-gnu)?
pub(crate) fn is_x86_64_shared_object(bytes: &[u8]) -> bool {
    const ET_DYN: u16 = 3;
    const EM_X86_64: u16 = 62;
    bytes.len() >= 64
        && bytes[..4] == *b"\x7fELF"
        && bytes[4] == 2 // 64-bit
        && bytes[5] == 1 // little endian
        && u16::from_le_bytes([bytes[16], bytes[17]]) == ET_DYN
        && u16::from_le_bytes([bytes[18], bytes[19]]) == EM_X86_64
}
