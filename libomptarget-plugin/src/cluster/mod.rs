//! The cluster device, as the head sees it: every libomptarget request becomes events to the
//! workers. Data moves lazily: a host submit is staged in the head's own copy of the buffer
//! (at the same device address), and a buffer travels to a worker only when a kernel placed
//! there needs it, from the head or straight from the worker holding the latest version.
//!
//! Who owns which state, under which lock, changed by which views and touched by which
//! threads, the one lock order, and each file's view with the parts it borrows: `README.md`
//! beside this file. The state is in six parts (`link.rs`, `ledger.rs`, `offload.rs`,
//! `tolerance.rs`, `durability.rs`, `meter.rs`); the code that acts on it is in views, one
//! per file, each borrowing only the parts it uses ([`Holds`]). This file builds the cluster,
//! makes libomptarget's requests (a memory request's gate and retries are here, its work in
//! `memory.rs`) and shuts it down.
//!
//! Concurrency (design note): libomptarget calls in from many threads at once (the `nowait`
//! tasks run on hidden helper threads). The bookkeeping (`Buffers`) is behind one mutex that
//! is held only for decisions and small control sends, never across a bulk transfer or a
//! kernel. Two guarantees need care:
//! * An ALLOC for a worker is sent while holding the mutex, before any thread can see the
//!   buffer as backed there, so the worker always gets ALLOC before data for that range. A
//!   range is given back to the allocator only after the DELETEs for it were sent, so the
//!   worker always sees DELETE before the next ALLOC of the same range.
//! * Two threads needing the same buffer on the same worker do not both send it: the first
//!   marks it `incoming`, the second waits on `moved` until the copy arrived.
//!
//! Regions running at the same time that write one buffer share one worker's copy, or have
//! their changes merged or run again (`launch.rs`).

use crate::checkpoint::Checkpointer;
use crate::config::Config;
use crate::data::Buffers;
use crate::inject::Injector;
use event_system::comm::CommError;
use event_system::process::Victim;
use event_system::protocol::Event;
use event_system::{Comm, Fenced, Liveness, SymmetricHeap};
use scheduler::Scheduler;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use task_graph::TaskGraph;
use thiserror::Error;

/// A holder of part `P` of the cluster: the cluster itself, or a view that borrows `P`.
///
/// The code that acts on the cluster is in views: one type per file, `Copy`, holding a
/// reference to each part it uses (see `README.md`). A view is built by its `of` from any
/// holder of all the parts it borrows, so that a view can build another only if it borrows
/// every part that one does: the compiler checks that a view's fields list all it may change.
pub(super) trait Holds<'a, P: ?Sized>: Copy {
    /// The part.
    fn part(self) -> &'a P;
}

/// `holds!(View<'a>: field: Part, ...)`: `View` holds each `Part` in the field of that name
/// (`field.sub` for a part kept inside another).
macro_rules! holds {
    ($holder:ty: $($field:ident $(.$sub:ident)?: $part:ty),* $(,)?) => {
        $(impl<'a> $crate::cluster::Holds<'a, $part> for $holder {
            fn part(self) -> &'a $part {
                &self.$field $(.$sub)?
            }
        })*
    };
}

/// A view (see [`Holds`]):
///
/// ```ignore
/// view! {
///     /// What it does, and why it borrows what it borrows.
///     pub(super) struct Movement { link: Link, ledger: Ledger, offload: Offload, meter: Meter, inject: Injector }
///     also { tolerance.inject: Injector } // parts kept inside its parts, that it can lend too
/// }
/// ```
///
/// declares `Movement<'a>` (`Clone`, `Copy`) with a field `&'a Part` for each part listed,
/// says that it holds them (`holds!`), and gives it `Movement::of`, which builds it from any
/// holder of all those parts.
macro_rules! view {
    (
        $(#[$meta:meta])*
        $vis:vis struct $name:ident { $($field:ident: $part:ty),* $(,)? }
        $(also { $($outer:ident.$sub:ident: $inner:ty),* $(,)? })?
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy)]
        $vis struct $name<'a> {
            $($field: &'a $part,)*
        }

        holds!($name<'a>: $($field: $part,)* $($($outer.$sub: $inner,)*)?);

        impl<'a> $name<'a> {
            /// The view over the parts `c` holds (the cluster, or a view that borrows them all).
            $vis fn of<C>(c: C) -> Self
            where
                $(C: $crate::cluster::Holds<'a, $part>,)*
            {
                $name { $($field: c.part(),)* }
            }
        }
    };
}

mod blocks;
mod buddy;
mod durability;
mod checkpointing;
mod execute;
mod failures;
mod faults;
mod head_copies;
mod images;
mod launch;
mod ledger;
mod link;
mod memory;
mod merge;
mod meter;
mod movement;
mod offload;
mod on_head;
mod prune;
mod recovery;
mod replica_choice;
mod replicas;
mod requests;
mod rerun;
mod resume;
mod tails;
mod tolerance;

pub use buddy::BuddyStats;
pub use failures::{FailureRecord, RecoveryRecord, SpareRecord};
pub use resume::ResumeRecord;

use buddy::Buddy;
use checkpointing::Checkpoints;
use durability::Durability;
use failures::{Failures, HeadDevice};
use faults::Faults;
use images::Images;
use launch::Launcher;
use ledger::Ledger;
use link::Link;
use memory::Memory;
use meter::Meter;
use offload::Offload;
use requests::Requests;
use resume::Resumer;
use tolerance::Tolerance;

/// Liveness on the head: the failure detector's view, plus the ranks fenced here; a rank once
/// dead stays dead.
pub(crate) type HeadLiveness = Fenced<Arc<dyn Liveness>>;

/// Why a request failed. Each becomes OFFLOAD_FAIL plus one line on stderr.
#[derive(Debug, Error)]
pub enum ClusterError {
    /// Transport failure.
    #[error(transparent)]
    Comm(#[from] CommError),
    /// A worker refused an event.
    #[error("worker {rank}: {msg}")]
    Worker {
        /// Worker.
        rank: i32,
        /// Its message.
        msg: String,
    },
    /// A device address libomptarget gave us is not a live buffer.
    #[error("{0:#x} is not a device address of a live buffer (or the range runs past it)")]
    UnknownAddress(u64),
    /// Device heap error.
    #[error(transparent)]
    Heap(#[from] event_system::HeapError),
    /// No worker left.
    #[error("no live worker to run on")]
    NoWorker,
    /// The entry point is not one we handed out.
    #[error("unknown kernel entry {0:#x}")]
    UnknownKernel(usize),
    /// The device image is malformed.
    #[error("bad device image: {0}")]
    BadImage(String),
    /// The runtime already shut down.
    #[error("the cluster device has shut down")]
    Stopped,
    /// A worker reported that a peer of the request (the other side of an exchange) died.
    #[error("rank {0} is dead")]
    PeerDead(i32),
    /// A version a request needs has no live holder (its holders died; recovery rebuilds it).
    #[error("buffer {0:#x} has no live copy of its current version")]
    Lost(u64),
    /// Recovery could not rebuild what a failure destroyed.
    #[error("recovery failed: {0}")]
    Unrecoverable(String),
    /// Replicas of a region disagree and none has a majority (`replicas.rs`): it runs again,
    /// on more replicas, if the versions it started from are still somewhere. Each replica's
    /// worker and ballot, to name the losers once the run again decides.
    #[error("{why}")]
    Disagreed {
        /// What disagreed.
        why: String,
        /// Each replica's worker and what it wrote.
        ballots: Vec<(i32, replicas::Ballot)>,
        /// The range of the head's arena they allocated in: the run again allocates there
        /// too, so that its pointers compare with theirs (`Offload::grant`).
        arena: Option<event_system::protocol::Region>,
    },
    /// Voting, and ballots voided (`replicas.rs`, `SetRun::void`) left fewer than two: the
    /// region runs again.
    #[error("ballots of replicas of a region were voided (a region sharing their copies wrote them) too often")]
    Voided {
        /// Which regions of its reach the voided runs changed, for the kernel's write set
        /// (it runs again predicted to write them).
        changed: Vec<bool>,
    },
    /// Replicas of a region disagree and nothing can decide (`replicas.rs`): the program ends.
    #[error("{0}")]
    NoAgreement(String),
    /// A kernel's copy of a buffer changed under it before it started (see `launch.rs`).
    #[error("the copy of {0:#x} a region was placed on changed before it started, too often")]
    Unplaced(u64),
    /// A kernel's run is undone and must run again (see `launch.rs`); the error if it cannot.
    #[error("{0}")]
    RunAgain(Box<ClusterError>),
    /// Two regions changed one buffer concurrently on different workers.
    #[error(
        "regions running at the same time on workers {others:?} and {worker} both changed {what} at {addr:#x} ({size} bytes) in their own copies, which cannot be merged; {advice}"
    )]
    Conflict {
        /// What the buffer is: a device buffer, or the globals and statics of an image.
        what: String,
        /// How to avoid it.
        advice: &'static str,
        /// Buffer address.
        addr: u64,
        /// Its size.
        size: u64,
        /// The worker whose change came second.
        worker: i32,
        /// Where the other change is.
        others: Vec<i32>,
    },
}

type Result<T> = std::result::Result<T, ClusterError>;

/// How long the head waits at the end for dead workers on its host to be reaped, so that it
/// can remove what they left (`event_system::process::clean_after`).
const LEFTOVERS_BOUND: std::time::Duration = std::time::Duration::from_secs(1);


/// The head's state, split by what each part owns (the state table is in `README.md`
/// beside this file).
pub struct Cluster {
    /// The communicator, tags, who is alive, where each rank is (`link.rs`).
    link: Link,
    /// Buffers, versions, holders and the task record (`ledger.rs`).
    ledger: Ledger,
    /// Kernels, images, placement, the head's own device (`offload.rs`).
    offload: Offload,
    /// The handler, failures, recoveries, spares, buddy copies (`tolerance.rs`).
    tolerance: Tolerance,
    /// Checkpoints, the log, resuming (`durability.rs`).
    durability: Durability,
    /// The clock, the counters, the timeline (`meter.rs`).
    meter: Meter,
    cfg: Config,
    /// The device has shut down: requests are refused.
    stopped: Stopped,
}

holds!(&'a Cluster: link: Link, ledger: Ledger, offload: Offload, tolerance: Tolerance, tolerance.inject: Injector, durability: Durability, meter: Meter, cfg: Config, stopped: Stopped);

/// The device has shut down: requests are refused (set once, by [`Cluster::shutdown`]).
pub(super) struct Stopped(AtomicBool);

impl Stopped {
    /// Has the device shut down?
    pub(super) fn is_set(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// `Err(Stopped)` once the device has shut down.
    pub(super) fn check(&self) -> Result<()> {
        if self.is_set() {
            Err(ClusterError::Stopped)
        } else {
            Ok(())
        }
    }

    /// Shut down; returns whether it was already.
    fn set(&self) -> bool {
        self.0.swap(true, Ordering::AcqRel)
    }
}

impl Cluster {
    /// The head's cluster device over `comm` (rank 0), with the agreed heap.
    pub(crate) fn new(
        comm: Arc<Comm>,
        heap: SymmetricHeap,
        live: Arc<HeadLiveness>,
        recovery: bool,
        procs: Vec<(u64, Victim)>,
        cfg: Config,
        ckpt: Option<Checkpointer>,
    ) -> Self {
        let n = comm.size() as usize;
        let meter = Meter::new(n, cfg.trace.is_some(), cfg.verbose);
        if cfg.replicas > 1 {
            let policy = match cfg.replicate {
                crate::config::Replicate::All => ("all", 0),
                crate::config::Replicate::Auto { budget_percent } => ("auto", budget_percent),
            };
            let _ = meter.stats.replicas.policy.set(policy);
        }
        let (base, size) = heap.buffer_space();
        let mut buffers = Buffers::new(base, size);
        let retain = if recovery { cfg.ft_retain } else { 0 };
        buffers.set_retention_budget(retain);
        if cfg.tasks.is_some() {
            buffers.remember_sizes();
        }
        let graph = if cfg.tasks.is_some() { TaskGraph::with_log() } else { TaskGraph::new() };
        let (journal, replay, resume_record) = resume::start(&cfg, ckpt.as_ref());
        let inject = crate::inject::Injector::new(cfg.ft_inject.as_deref().and_then(|s| crate::inject::parse(s, Some(n as i32)).ok()).unwrap_or_default());
        Cluster {
            link: Link::new(comm, live, procs),
            ledger: Ledger::new(buffers, graph, prune::FIRST_PRUNE, retain > 0),
            offload: Offload::new(heap, Scheduler::new(cfg.policy), n, &cfg),
            tolerance: Tolerance::new(recovery, cfg.spares as usize, n, inject),
            durability: Durability::new(ckpt, journal, replay, resume_record),
            meter,
            stopped: Stopped(AtomicBool::new(false)),
            cfg,
        }
    }

    /// Has any rank died (or been fenced) in this run?
    pub(crate) fn any_failure(&self) -> bool {
        self.link.any_failure()
    }

    /// Start the handler thread, the buddy thread, the thread of faults injected by time and
    /// the prober that watches the workers on the head's host. Called once, when the cluster
    /// is in its final place. `on_fatal` ends the job when recovery is impossible.
    pub(crate) fn start_handler(&'static self, on_fatal: fn(&str) -> !) -> std::io::Result<()> {
        self.tolerance.ft.start(Arc::new(HeadDevice::new(self, on_fatal)))?;
        Buddy::of(self).start()?;
        Faults::of(self).start_timed();
        if self.cfg.replicas > 1 {
            tails::Collector::of(self).start()?;
        }
        Failures::of(self).start_prober()
    }

    /// A rank failed (see [`Failures::note_failure`]): the failure detector's callback.
    pub(crate) fn note_failure(&self, rank: i32, how: &str) {
        Failures::of(self).note_failure(rank, how)
    }

    /// Run the kernel `entry` with argument values `args` (see [`Launcher::launch`]).
    pub(crate) fn launch(&self, entry: usize, args: &[u64], begins: &[u64], hosts: &[u64], mapped_from: &[bool]) -> Result<()> {
        Launcher::of(self).launch(entry, args, begins, hosts, mapped_from)
    }

    /// Whether a `nowait` run of the kernel `entry` should run on the calling thread (see
    /// [`Launcher::expect_short`]).
    pub(crate) fn expect_short(&self, entry: usize) -> bool {
        Launcher::of(self).expect_short(entry)
    }

    /// Send a device image to every worker and build libomptarget's entry table (see
    /// [`Images::load_binary`]).
    pub(crate) fn load_binary(&self, image: &[u8], entries: &[crate::ctypes::OffloadEntry]) -> Result<*mut crate::ctypes::TargetTable> {
        Images::of(self).load_binary(image, entries)
    }

    /// Allocate a device buffer.
    pub(crate) fn alloc(&self, size: u64, host: u64) -> Result<u64> {
        let _gate = Requests::of(self).enter()?;
        Memory::of(self).alloc(size, host)
    }

    /// Allocate host memory for `llvm_omp_target_alloc_host` (see [`Memory::alloc_host`]).
    pub(crate) fn alloc_host(&self, size: u64) -> Result<u64> {
        self.stopped.check()?;
        Memory::of(self).alloc_host(size)
    }

    /// Free a device buffer, or host memory from [`Cluster::alloc_host`].
    pub(crate) fn delete(&self, addr: u64) -> Result<()> {
        if Memory::of(self).free_host(addr)? {
            return Ok(());
        }
        if self.stopped.is_set() {
            return Ok(()); // the workers are gone; the range dies with the process
        }
        let _gate = Requests::of(self).enter()?;
        Memory::of(self).remove_buffer(addr, |_| true)
    }

    /// Copy `len` host bytes at `host` to device address `tgt`.
    ///
    /// # Safety
    /// `host..host+len` must be readable.
    pub(crate) unsafe fn submit(&self, tgt: u64, host: *const u8, len: u64) -> Result<()> {
        if self.durability.fast_forward() {
            Resumer::of(self).live_for(&[tgt])?;
        }
        Requests::of(self).resilient(|| {
            let _gate = Requests::of(self).enter()?;
            // SAFETY: forwarded contract (each attempt reads the same host bytes again).
            unsafe { Memory::of(self).submit_inner(tgt, host, len) }
        })
    }

    /// Copy `len` bytes at device address `tgt` to host memory at `host`.
    ///
    /// # Safety
    /// `host..host+len` must be writable and not accessed by others meanwhile.
    pub(crate) unsafe fn retrieve(&self, host: *mut u8, tgt: u64, len: u64) -> Result<()> {
        // SAFETY: forwarded contract.
        if self.durability.fast_forward() && unsafe { Resumer::of(self).retrieve_from_log(host, tgt, len)? } {
            return Ok(());
        }
        Requests::of(self).resilient(|| {
            let _gate = Requests::of(self).enter()?;
            // SAFETY: forwarded contract (a repeated attempt overwrites the same host bytes).
            unsafe { Memory::of(self).retrieve_inner(host, tgt, len) }
        })
    }

    /// Device-to-device copy inside the cluster device (`omp_target_memcpy`).
    pub(crate) fn copy(&self, src: u64, dst: u64, len: u64) -> Result<()> {
        if self.durability.fast_forward() {
            Resumer::of(self).live_for(&[src, dst])?;
        }
        Requests::of(self).resilient(|| {
            let _gate = Requests::of(self).enter()?;
            Memory::of(self).copy_once(src, dst, len)
        })
    }

    /// SIGTERM: a checkpoint now (see [`Checkpoints::final_checkpoint`]).
    pub(crate) fn final_checkpoint(&self) {
        Checkpoints::of(self).final_checkpoint()
    }

    /// How many workers the job started with (spares included).
    pub(crate) fn worker_count(&self) -> usize {
        self.link.comm.size().saturating_sub(1) as usize
    }

    /// Now on the trace's clock, if a trace is recorded (see [`Meter::trace_now`]).
    pub(crate) fn trace_now(&self) -> Option<f64> {
        self.meter.trace_now()
    }

    /// Record a span on `rank`'s track from `since` until now (see [`Meter::trace`]).
    pub(crate) fn trace(&self, since: Option<f64>, cat: timeline::Cat, rank: i32, name: impl Into<timeline::record::Name>, args: impl FnOnce() -> timeline::Args) {
        self.meter.trace(since, cat, rank, name, args)
    }

    /// Write the full log of recorded tasks (`OMPCLUSTER_TASKS`): one JSON line per task, in
    /// record order, with the size of each buffer it read or wrote.
    fn write_task_log(&self, path: &std::path::Path) -> std::io::Result<()> {
        use std::io::Write as _;
        // The buffers, then the graph: the order a launch takes them in.
        let bufs = self.ledger.buffers.lock();
        let graph = self.ledger.graph.lock();
        let size = |id| bufs.size_of(id).unwrap_or(0);
        let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
        for line in graph.log(&size).into_iter().flatten() {
            serde_json::to_writer(&mut out, &line)?;
            out.write_all(b"\n")?;
        }
        out.flush()
    }

    /// Stop the workers and write the report, the graph and the task log. Idempotent.
    /// Returns the dead ranks out of the head's reach (frozen on another host), for the
    /// launcher (`exit_status.rs`); empty on a second call.
    pub(crate) fn shutdown(&self) -> Vec<i32> {
        Resumer::of(self).resume_ended();
        if let Some(cp) = &self.durability.ckpt {
            cp.wait(); // a flush in progress needs the workers
        }
        // Replicas still running (`tails.rs`) end first: they need the workers.
        self.tolerance.ft.wait_quiet();
        if self.stopped.set() {
            return Vec::new();
        }
        // A batch of buddy copies in progress finishes first (it talks to the workers).
        drop(self.tolerance.buddy_busy.lock());
        let workers: Vec<i32> = self.link.workers().collect();
        let messages = self.link.comm.messages();
        // Sent ahead of EXIT, on the same tag: the victim has it when EXIT comes.
        Faults::of(self).inject_due(|t| *t == crate::inject::Trigger::DuringExit);
        let mut tags = Vec::new();
        for &w in &workers {
            match self.link.post(w, Event::Exit) {
                Ok(tag) => tags.push((w, tag)),
                Err(e) => eprintln!("ompcluster: could not stop worker {w}: {e}"),
            }
        }
        for (w, tag) in tags {
            if let Err(e) = self.link.expect_ok(w, tag) {
                // It died on the way out: fenced, so that nobody waits for it any more.
                self.link.live.fence(w);
                eprintln!("ompcluster: worker {w} did not stop cleanly: {e}");
            }
        }
        // A rank that died (or froze) and is still a process on this host is killed, as
        // recovery would: mpirun waits for every process, a frozen one included.
        // One on another host is out of reach: the launcher is told (the status file), so
        // that it stops the job as soon as the program has ended instead of waiting for it.
        // What those on this host left (libomp's registration) is removed once they are
        // reaped (workers that killed others on their hosts do the same as they end).
        let host = self.link.head_host();
        let mut unreachable = Vec::new();
        let mut here = Vec::new();
        for r in self.link.dead_workers() {
            match self.link.process(r) {
                Some(&(h, victim)) if h == host => {
                    event_system::process::kill(victim);
                    here.push(victim);
                }
                _ => unreachable.push(r),
            }
        }
        event_system::process::clean_after_all(&here, LEFTOVERS_BOUND);
        if let Some(path) = &self.cfg.report {
            let report = self.run_report(workers.len(), messages);
            if let Err(e) = report.write(path) {
                eprintln!("ompcluster: cannot write report {}: {e}", path.display());
            }
        }
        if let (Some(path), Some(t)) = (&self.cfg.trace, &self.meter.trace) {
            if let Err(e) = t.write(path, self.link.comm.size()) {
                eprintln!("ompcluster: cannot write trace {}: {e}", path.display());
            }
        }
        if let Some(path) = &self.cfg.graph {
            if let Err(e) = std::fs::write(path, self.ledger.graph.lock().to_dot()) {
                eprintln!("ompcluster: cannot write task graph {}: {e}", path.display());
            }
        }
        if let Some(path) = &self.cfg.tasks {
            if let Err(e) = self.write_task_log(path) {
                eprintln!("ompcluster: cannot write task log {}: {e}", path.display());
            }
        }
        if let Some(cp) = &self.durability.ckpt {
            // The head's store is never dropped (the process ends in `exit`): remove its
            // scratch directory now.
            cp.store.close();
        }
        unreachable
    }

    /// The run report as it stands, for a job with `workers` workers at its end and the head's
    /// `messages` (sent, received).
    fn run_report(&self, workers: usize, messages: (u64, u64)) -> run_report::Report {
        let wall = self.meter.start.elapsed().as_secs_f64();
        let mut report = self.meter.stats.report(workers, wall);
        let (failures, recoveries) = Failures::of(self).ft_report();
        (report.head_messages_sent, report.head_messages_received) = messages;
        report.counts.tasks_reexecuted = recoveries.iter().map(|r| r.outcome.tasks_reexecuted).sum();
        report.replicas.reexecuted = recoveries.iter().map(|r| r.outcome.replicated_reexecuted).sum();
        report.failures = failures;
        report.buddy_copies = self.tolerance.buddy_stats.lock().clone();
        report.recoveries = recoveries;
        report.retained_bytes = self.ledger.buffers.lock().retained_bytes();
        report.tasks_recorded = self.ledger.graph.lock().len() as u64;
        report.head_max_rss_bytes = crate::report::max_rss_bytes();
        report.continued_on_head_at_seconds = self.offload.local_since();
        report.resume_log = self.durability.journal.as_ref().map(|j| j.stats());
        report.resume = self.durability.resume_record.lock().clone();
        if let Some(cp) = &self.durability.ckpt {
            let p = cp.published.lock();
            report.checkpoints = p.checkpoints;
            report.checkpoint_bytes = p.bytes;
            report.checkpoint_pauses_seconds = cp.pauses();
            report.checkpoint_pause_seconds = report.checkpoint_pauses_seconds.iter().sum();
            report.checkpoint_errors = p.errors.clone();
            report.checkpoint_save_seconds = p.save_seconds.clone();
            report.checkpoint_flush_seconds = p.flush_seconds.clone();
        }
        report
    }

    /// The head's watchdog found a thread of ours stopped (`runtime.rs`), and the job is about
    /// to end: write the report as it stands, with what the watchdog saw (`seen`, under
    /// `bound`), if one was asked for. The report is gathered on another thread and given
    /// [`STALL_REPORT_BOUND`]: the stopped thread may hold a lock it needs, and the job must
    /// end all the same (then no report, and a line saying so).
    pub(crate) fn report_stall(&'static self, seen: &[watchdog::Seen], bound: std::time::Duration) {
        let Some(path) = self.cfg.report.clone() else { return };
        let event = run_report::WatchdogEvent {
            rank: 0,
            at_seconds: self.meter.start.elapsed().as_secs_f64(),
            bound_seconds: bound.as_secs_f64(),
            threads: seen
                .iter()
                .map(|t| run_report::WatchedThread {
                    name: t.name.clone(),
                    state: t.state.name().to_string(),
                    doing: t.what.to_string(),
                    still_seconds: t.still_for.as_secs_f64(),
                    stopped: t.stopped,
                })
                .collect(),
        };
        let (tx, rx) = crossbeam_channel::bounded(1);
        let gather = move || {
            let mut report = self.run_report(self.link.workers().count(), self.link.comm.messages());
            report.watchdog.push(event);
            let _ = tx.send(report.write(&path).map_err(|e| format!("cannot write report {}: {e}", path.display())));
        };
        let written = match std::thread::Builder::new().name("ompc-stall-report".into()).spawn(gather) {
            Ok(_) => rx.recv_timeout(STALL_REPORT_BOUND).unwrap_or_else(|_| {
                Err(format!("the report was not written: gathering it took over {} s (the stopped thread may hold what it needs)", STALL_REPORT_BOUND.as_secs()))
            }),
            Err(e) => Err(format!("the report was not written: cannot start a thread for it ({e})")),
        };
        if let Err(e) = written {
            eprintln!("ompcluster: {e}");
        }
    }
}

/// How long the report of a job the watchdog ends may take to gather and write.
const STALL_REPORT_BOUND: std::time::Duration = std::time::Duration::from_secs(5);