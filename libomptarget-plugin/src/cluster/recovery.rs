//! Recovery from the death of workers: the primitives the recovery algorithm drives.
//!
//! The algorithm (what was lost, where each version comes from, the order of re-runs,
//! planning again, the fatal cases, spares) is `ft_handler::recovery`; reasons and
//! measurements are in `docs/recovery.md`. The handler thread calls [`Cluster::recover`] with
//! the gate held exclusively, so no offloading request is in flight; it records the failures,
//! runs the algorithm over [`Rebuild`] (this device's implementation of its primitives:
//! fencing, forgetting the dead's copies, where versions are, placing and running re-runs over
//! MPI, restoring versions from checkpoints), then puts the copies it rescued where they
//! belong and writes the report's record. A rank that dies meanwhile makes it return
//! [`RecoverError::NewFailure`]; the handler calls it again with the larger set (what was
//! rebuilt so far stays rebuilt).

use super::execute::Execute;
use super::*;
use crate::config::Reexec;
use ft_handler::decide::{self, Copies};
use ft_handler::recovery::{self as algo, BatchDone, Restored, Stop, View};
use ft_handler::{Device, RecoverError};
use task_graph::Mark;

/// How often the head looks whether the worker processes on its host still exist.
const PROBE_PERIOD: std::time::Duration = std::time::Duration::from_millis(20);


pub use run_report::{FailureRecord, RecoveryRecord, SpareRecord};

/// The cluster device as the handler sees it.
pub(crate) struct HeadDevice {
    c: &'static Cluster,
    /// What to do when recovery is impossible; never returns (given by the runtime).
    on_fatal: fn(&str) -> !,
}

impl Device for HeadDevice {
    fn dead(&self) -> BTreeSet<i32> {
        let mut d = self.c.live.dead_ranks();
        d.remove(&HEAD);
        d
    }

    fn noticed(&self, dead: &BTreeSet<i32>) {
        self.c.tell_workers(dead);
    }

    fn recover(&self, dead: &BTreeSet<i32>) -> std::result::Result<(), RecoverError> {
        if self.c.inject.panic_due_in_recovery() {
            panic!("injected panic (OMPCLUSTER_FT_INJECT=panic:during=recovery)");
        }
        self.c.recover(dead)
    }

    fn fatal(&self, why: &str) {
        // The runtime's answer: the head's end ends the job (the workers leave when they see
        // it gone).
        (self.on_fatal)(why)
    }
}

/// The primitives of the recovery algorithm (`ft_handler::recovery::Primitives`) over this
/// device, for one call of [`Cluster::recover`]: `side` holds the copies rescued from workers
/// before re-runs overwrote them, for the whole call (an attempt that stops to plan again may
/// already have overwritten where they came from).
struct Rebuild<'a> {
    c: &'a Cluster,
    side: Side,
    /// Rebuild only the current versions of these buffers (ids) that no rank holds (a resumed
    /// job, `resume.rs`), not every one.
    only: Option<&'a BTreeSet<u64>>,
}

/// Where versions are, for the plan: the buffer, side and record locks are held.
struct HeadView<'a> {
    copies: HeadCopies<'a>,
}

impl View for HeadView<'_> {
    fn available(&self, a: Access) -> bool {
        decide::available(&self.copies, a)
    }

    fn describe(&self, a: Access) -> Option<String> {
        self.copies.bufs.by_id(a.buffer).map(|b| format!("buffer {:#x} ({} bytes) version {}", b.addr, b.size, a.version))
    }

    fn copies(&self, a: Access) -> String {
        let c = &self.copies;
        if c.side.contains_key(&a) {
            "rescued".to_string()
        } else if c.bufs.kept(a).is_some() {
            "kept apart".to_string()
        } else {
            copies_of(c.bufs, a.buffer)
        }
    }

    fn checkpoints_on(&self) -> bool {
        self.copies.ckpt.is_some()
    }
}

/// Where copies are, for recovery's decisions (`ft_handler::decide`): the buffer and side
/// locks are held.
struct HeadCopies<'a> {
    bufs: &'a Buffers,
    /// Copies rescued by this recovery.
    side: &'a HashMap<Access, Arc<Vec<u8>>>,
    ckpt: Option<&'a Checkpointer>,
    /// Checkpointed versions known damaged.
    bad: &'a BTreeSet<Access>,
}

impl Copies for HeadCopies<'_> {
    fn buffer(&self, id: u64) -> Option<(u64, u64)> {
        self.bufs.by_id(id).map(|b| (b.size, b.version))
    }

    fn version_on(&self, id: u64, r: i32) -> Option<u64> {
        self.bufs.by_id(id)?.version_on(r)
    }

    fn holders(&self, a: Access) -> Vec<i32> {
        self.bufs.by_id(a.buffer).map_or(Vec::new(), |b| b.ranks_with(a.version).collect())
    }

    fn held_apart(&self, a: Access) -> bool {
        self.side.contains_key(&a) || self.bufs.kept(a).is_some()
    }

    fn checkpointed(&self, a: Access) -> bool {
        !self.bad.contains(&a) && self.ckpt.is_some_and(|c| c.holds(a.buffer, a.version))
    }
}

impl algo::Primitives for Rebuild<'_> {
    fn fence_and_forget(&self, dead: &BTreeSet<i32>) -> std::result::Result<BTreeSet<Access>, RecoverError> {
        let c = self.c;
        let live: Vec<i32> = c.workers().collect();
        c.fence(dead, &live)?;
        let mut lost = c.buffers.lock().forget_ranks(dead);
        lost.retain(|a| self.only.is_none_or(|o| o.contains(&a.buffer)));
        c.inject_due(|t| *t == crate::inject::Trigger::DuringRecovery);
        for &r in dead {
            c.inject.rearm(r, crate::inject::Trigger::DuringRecovery);
        }
        Ok(lost)
    }

    fn idle_spares(&self) -> Vec<i32> {
        self.c.workers().filter(|&w| self.c.idle_spare[w as usize].load(Ordering::Relaxed)).collect()
    }

    fn leave_spares(&self, r: i32, replacing: Option<i32>) {
        let c = self.c;
        c.idle_spare[r as usize].store(false, Ordering::Relaxed);
        if let Some(dead) = replacing {
            let at_seconds = c.start.elapsed().as_secs_f64();
            eprintln!("ompcluster: spare rank {r} takes the place of rank {dead} at {at_seconds:.3} s");
            c.spare_log.lock().push(SpareRecord { spare: r, replaced: dead, at_seconds });
        }
    }

    fn targets(&self) -> std::result::Result<Vec<i32>, RecoverError> {
        let c = self.c;
        if c.workers().next().is_none() {
            c.continue_on_head().map_err(|e| RecoverError::Fatal(format!("every worker died and the head cannot run the target regions itself: {e}")))?;
        }
        Ok(c.targets().collect())
    }

    fn unheld(&self) -> BTreeSet<Access> {
        self.c.buffers.lock().unheld().filter(|a| self.only.is_none_or(|o| o.contains(&a.buffer))).collect()
    }

    fn with_view<R>(&self, bad: &BTreeSet<Access>, f: impl FnOnce(&TaskGraph, &dyn View) -> R) -> R {
        // The order every path takes these locks in: buffers, side, record.
        let bufs = self.c.buffers.lock();
        let side = self.side.lock();
        let graph = self.c.graph.lock();
        f(&graph, &HeadView { copies: HeadCopies { bufs: &bufs, side: &side, ckpt: self.c.ckpt.as_ref(), bad } })
    }

    fn with_copies<R>(&self, f: impl FnOnce(&dyn Copies) -> R) -> R {
        let bufs = self.c.buffers.lock();
        let side = self.side.lock();
        f(&HeadCopies { bufs: &bufs, side: &side, ckpt: self.c.ckpt.as_ref(), bad: &BTreeSet::new() })
    }

    fn short_kernel_s(&self) -> f64 {
        SHORT_KERNEL_NS as f64 * 1e-9
    }

    fn run_batch(&self, tasks: &[&TaskRecord], w: i32, rescue: &[Access]) -> std::result::Result<BatchDone, Stop> {
        self.c.rerun_batch(tasks, w, rescue, &self.side)
    }

    fn restore(&self, a: Access) -> std::result::Result<Option<Restored>, Stop> {
        let c = self.c;
        let (addr, kept) = {
            let bufs = c.buffers.lock();
            match bufs.by_id(a.buffer) {
                Some(b) if b.ranks_with(a.version).next().is_none() && !self.side.lock().contains_key(&a) => (b.addr, bufs.kept(a)),
                _ => return Ok(None),
            }
        };
        let (bytes, from) = match kept {
            Some(bytes) => (bytes, Restored::Copy),
            None => (Arc::new(c.load_checkpointed(a)?), Restored::Checkpoint),
        };
        c.put_on_head(a, addr, &bytes).map_err(fatal)?;
        Ok(Some(from))
    }

    fn rerun_done(&self, tasks: &[TaskRecord]) {
        let mut g = self.c.graph.lock();
        for t in tasks {
            g.mark(t.id, Mark::Reexecuted);
        }
    }

    fn verbose(&self) -> bool {
        self.c.cfg.verbose
    }

    fn log(&self, what: std::fmt::Arguments<'_>) {
        self.c.log(what);
    }

    fn warn(&self, what: std::fmt::Arguments<'_>) {
        eprintln!("ompcluster: {what}");
    }
}

/// Copies that recovery rescued from a worker before overwriting them (the only copy of a
/// version still needed), kept on the head until recovery ends.
type Side = Mutex<HashMap<Access, Arc<Vec<u8>>>>;

/// Where one version comes from, for one re-run task's worker.
#[derive(Debug, Clone)]
enum Source {
    /// Already there.
    Present,
    /// A live rank's copy (the head's staged copy if HEAD).
    Copy(i32),
    /// A copy recovery rescued.
    Side(Arc<Vec<u8>>),
    /// Zeros (version 0).
    Zeros,
    /// A published checkpoint.
    Checkpoint,
}

impl Cluster {
    /// Start the handler thread, and the prober that watches the workers on the head's host.
    /// Called once, when the cluster is in its final place. `on_fatal` ends the job when
    /// recovery is impossible.
    pub(crate) fn start_handler(&'static self, on_fatal: fn(&str) -> !) -> std::io::Result<()> {
        self.ft.start(Arc::new(HeadDevice { c: self, on_fatal }))?;
        self.start_buddy()?;
        self.start_timed_faults();
        let host = self.procs[HEAD as usize].0;
        let local: Vec<(i32, Victim)> =
            (1..self.comm.size()).filter(|&r| self.procs[r as usize].0 == host).map(|r| (r, self.procs[r as usize].1)).collect();
        if local.is_empty() {
            return Ok(());
        }
        std::thread::Builder::new().name("ompc-ft-prober".into()).spawn(move || self.probe(&local)).map(|_| ())
    }

    /// A worker process on the head's host that has ended is dead now, not only after the
    /// heartbeat timeout: look every [`PROBE_PERIOD`] (a read of `/proc/PID/stat` each).
    /// It runs until the process ends: during shutdown too, where a dead worker must not
    /// make the head wait for the heartbeat timeout (it is then only fenced, not recovered).
    fn probe(&self, local: &[(i32, Victim)]) {
        loop {
            for &(r, v) in local {
                if !self.live.is_dead(r) && event_system::process::is_gone(v) {
                    if self.stopped.load(Ordering::Acquire) {
                        self.live.fence(r);
                    } else {
                        self.note_failure(r, "its process ended: seen by the head on their shared host");
                    }
                }
            }
            std::thread::sleep(PROBE_PERIOD);
        }
    }

    /// A rank failed (the failure detector said so, or a peer reported it): record and report
    /// the first notice of each rank and tell the handler. Called on the heartbeat thread: no
    /// MPI here, and no lock held across anything but the record (the handler thread tells
    /// the workers, see [`Cluster::tell_workers`]).
    pub(crate) fn note_failure(&self, rank: i32, how: &str) {
        if rank == HEAD || self.stopped.load(Ordering::Acquire) {
            return;
        }
        self.note_dead(rank, how);
        self.ft.notify(rank);
    }

    /// Fence `rank` and, the first time, record and report its failure (no MPI).
    fn note_dead(&self, rank: i32, how: &str) {
        self.live.fence(rank);
        let mut f = self.failures.lock();
        if !f.iter().any(|x| x.rank == rank) {
            let at = self.start.elapsed().as_secs_f64();
            eprintln!("ompcluster: worker rank {rank} failed ({how}) at {at:.3} s; recovering");
            let latency = self.since_injected(rank);
            if let Some(t) = &self.trace {
                t.instant(Cat::Failure, HEAD, format!("rank {rank} failed"), vec![("rank", json!(rank)), ("noticed_by", json!(how))]);
            }
            f.push(FailureRecord { rank, at_seconds: at, noticed_by: how.to_string(), detection_latency_seconds: latency });
        }
    }

    /// Tell the live workers (FAILED), once per dead rank, that the `dead` ranks died: a
    /// transfer of theirs with a dead rank ends now rather than at their own heartbeat
    /// timeout (3 s by default), and with it the request recovery waits for. The handler
    /// thread calls it before it waits for the requests in flight.
    pub(super) fn tell_workers(&self, dead: &BTreeSet<i32>) {
        let new: Vec<i32> = {
            let mut told = self.told.lock();
            dead.iter().copied().filter(|&r| r != HEAD && told.insert(r)).collect()
        };
        if new.is_empty() {
            return;
        }
        for w in self.workers() {
            // A worker that cannot be told is dead too, or notices by itself.
            let _ = self.post(w, Event::Failed { ranks: new.clone() });
        }
    }

    /// [`Cluster::note_dead`] and [`Cluster::tell_workers`] (on a thread that may use MPI).
    pub(super) fn record_failure(&self, rank: i32, how: &str) {
        self.note_dead(rank, how);
        self.tell_workers(&[rank].into());
    }

    /// Rebuild what the `dead` ranks took with them (see the module's documentation).
    pub(super) fn recover(&self, dead: &BTreeSet<i32>) -> std::result::Result<(), RecoverError> {
        // A resumed job: what the checkpoint it resumed from holds is loaded, not re-run.
        if self.resumed {
            for &r in dead {
                self.record_failure(r, "declared dead");
            }
            self.adopt_checkpointed(None)?;
        }
        self.recover_only(dead, None)
    }

    /// [`Cluster::recover`], rebuilding of the versions no rank holds only those of the
    /// buffers `only` names (all, if None).
    pub(super) fn recover_only(&self, dead: &BTreeSet<i32>, only: Option<&BTreeSet<u64>>) -> std::result::Result<(), RecoverError> {
        let t0 = Instant::now();
        let traced = self.trace_now();
        let at_seconds = self.start.elapsed().as_secs_f64();
        for &r in dead {
            self.record_failure(r, "declared dead");
        }
        let attempts = self.attempts.fetch_add(1, Ordering::Relaxed) + 1;
        let policy = algo::Policy { parallel: self.cfg.ft_reexec == Reexec::Parallel, ..Default::default() };
        let ops = Rebuild { c: self, side: Mutex::new(HashMap::default()), only };
        // (`spares` is held across the algorithm: only this thread takes it.)
        let outcome = algo::recover(&ops, dead, policy, &mut self.spares.lock());
        let out = match outcome {
            Ok(out) => out,
            Err(e) => {
                if let RecoverError::NewFailure(r) = e {
                    self.record_failure(r, "declared dead during recovery");
                }
                return Err(e);
            }
        };
        // Rescued copies that are still the only copy of a current version go to the head's
        // copy; those a later recovery may need again are kept apart (within the budget).
        for (a, bytes) in ops.side.into_inner() {
            let addr = {
                let mut bufs = self.buffers.lock();
                match bufs.by_id(a.buffer) {
                    Some(b) if b.version == a.version && b.holders.is_empty() && bufs.get(b.addr).is_some() => b.addr,
                    _ => {
                        if self.lineage_needs(&bufs, a, &mut { u64::MAX }) {
                            bufs.keep(a, bytes);
                        }
                        continue;
                    }
                }
            };
            self.put_on_head(a, addr, &bytes).map_err(new_failure)?;
        }
        self.release_retired_on_workers()?;
        self.attempts.store(0, Ordering::Relaxed);
        let rec = RecoveryRecord {
            dead: dead.iter().copied().collect(),
            at_seconds,
            paused_seconds: t0.elapsed().as_secs_f64(),
            rerun_rate_per_second: if out.rerun_seconds > 0.0 { out.tasks_reexecuted as f64 / out.rerun_seconds } else { 0.0 },
            spares: std::mem::take(&mut *self.spare_log.lock()),
            attempts,
            outcome: out,
        };
        let out = &rec.outcome;
        if dead.is_empty() {
            // A resumed job switching to live (`resume.rs`) says what it did itself.
        } else { eprintln!(
            "ompcluster: recovered from the loss of rank{} {} in {:.3} s: {} buffer version(s) lost; {} task(s) re-run on ranks {:?}{}; {} version(s) from checkpoints, {} from buddy copies, {} from live copies, {} rebuilt",
            if dead.len() > 1 { "s" } else { "" },
            dead.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", "),
            rec.paused_seconds,
            out.versions_lost,
            out.tasks_reexecuted,
            out.survivors,
            if out.tasks_reexecuted > 0 { format!(" ({:.0} per second)", rec.rerun_rate_per_second) } else { String::new() },
            out.from_checkpoints,
            out.from_buddy_copies,
            out.from_live_copies,
            out.rebuilt,
        ); }
        self.trace(traced, Cat::Recovery, HEAD, "recovery", || {
            vec![
                ("dead", json!(rec.dead)),
                ("versions_lost", json!(rec.outcome.versions_lost)),
                ("tasks_reexecuted", json!(rec.outcome.tasks_reexecuted)),
                ("from_checkpoints", json!(rec.outcome.from_checkpoints)),
            ]
        });
        self.recoveries.lock().push(rec);
        Ok(())
    }

    /// Fence the dead: every survivor stops waiting for them (each answers once it has taken
    /// that in), and each dead process still there is killed by the head or a live worker on
    /// its host, so that one that was only frozen can never act again (and mpirun sees it
    /// end). A dead rank that reads the notice leaves by itself.
    fn fence(&self, dead: &BTreeSet<i32>, survivors: &[i32]) -> std::result::Result<(), RecoverError> {
        let list: Vec<i32> = dead.iter().copied().collect();
        let mut kills: BTreeMap<i32, Vec<Victim>> = BTreeMap::new();
        for &r in dead {
            let Some(&(host, victim)) = self.procs.get(r as usize) else { continue };
            if host == self.procs[HEAD as usize].0 {
                event_system::process::kill(victim);
            } else if let Some(&w) = survivors.iter().find(|&&w| self.procs.get(w as usize).is_some_and(|p| p.0 == host)) {
                kills.entry(w).or_default().push(victim);
            }
            let _ = self.post(r, Event::Fence { ranks: list.clone(), kill: Vec::new() });
        }
        let mut tags = Vec::new();
        for &w in survivors.iter().filter(|&&w| w != HEAD) {
            let kill = kills.remove(&w).unwrap_or_default();
            tags.push((w, self.post(w, Event::Fence { ranks: list.clone(), kill }).map_err(new_failure)?));
        }
        for (w, tag) in tags {
            self.expect_ok(w, tag).map_err(new_failure)?;
        }
        Ok(())
    }

    /// Re-run the tasks of `batch` on worker `w`, in order: rescue what must be, install the
    /// first task's inputs there at the versions it first read, then run them (their output
    /// is not printed again). A batch of several (a chain: see `ft_handler::recovery`) sends all its
    /// EXECUTEs before waiting for the first reply. If a task changed a buffer its first run
    /// did not (not deterministic), the tasks after it may have read that change: they are
    /// undone (their copies forgotten) and [`BatchDone::done`] says how many are done.
    fn rerun_batch(&self, batch: &[&TaskRecord], w: i32, rescue: &[Access], side: &Side) -> std::result::Result<BatchDone, Stop> {
        let first = batch[0];
        let mut out = BatchDone::default();
        let regions = self.install_inputs(first, w, rescue, side, &mut out)?;
        if batch.len() == 1 {
            let written = written_of(first);
            let changed = self.run_task(first, w, regions, &written)?;
            self.record_rerun(first, w, &changed, &written);
            out.done = 1;
            return Ok(out);
        }
        self.log(format_args!("RERUN tasks #{}..#{} ({} in a chain) on {w}", first.id, batch[batch.len() - 1].id, batch.len()));
        let mut sent = Vec::with_capacity(batch.len());
        for (k, t) in batch.iter().enumerate() {
            let regions = if k == 0 {
                regions.clone()
            } else {
                let bufs = self.buffers.lock();
                t.reads
                    .iter()
                    .map(|a| bufs.by_id(a.buffer).map(|b| Region { addr: b.addr, size: b.size }).ok_or_else(|| fatal(ClusterError::Lost(a.buffer))))
                    .collect::<std::result::Result<Vec<_>, _>>()?
            };
            let written = written_of(t);
            let n = regions.len();
            let run = Execute { image: t.image, kernel: t.index, args: &t.args, regions, assume_written: written.clone(), send_back: vec![false; n], replay: Vec::new(), short: true, quiet: true };
            sent.push((self.post_execute(w, run).map_err(new_failure)?, written));
        }
        out.done = batch.len();
        for (k, (t, (posted, written))) in batch.iter().zip(sent).enumerate() {
            let ran = self.await_executed(posted);
            let changed = self.rerun_ran(t, w, ran)?;
            if k < out.done {
                if self.record_rerun(t, w, &changed, &written) {
                    out.done = k + 1;
                }
            } else {
                // Undone: what it changed on `w` holds no recorded version.
                let mut bufs = self.buffers.lock();
                for (a, c) in t.reads.iter().zip(&changed) {
                    if let Some(addr) = bufs.by_id(a.buffer).filter(|_| *c).map(|b| b.addr) {
                        bufs.drop_copy(addr, w);
                    }
                }
            }
        }
        Ok(out)
    }

    /// Make `t`'s inputs present on `w` at the versions it first read (rescuing the copies
    /// `rescue` lists first); returns their regions, counting where they came from in `out`.
    fn install_inputs(&self, t: &TaskRecord, w: i32, rescue: &[Access], side: &Side, out: &mut BatchDone) -> std::result::Result<Vec<Region>, Stop> {
        if w == HEAD {
            // Its inputs are installed in the head's own copies: a checkpoint still saving one
            // of them must finish first.
            let addrs: Vec<u64> = {
                let bufs = self.buffers.lock();
                t.reads.iter().filter_map(|a| bufs.by_id(a.buffer).map(|b| b.addr)).collect()
            };
            for addr in addrs {
                self.before_changing_staged(addr);
            }
        }
        for a in rescue {
            let region = match self.buffers.lock().by_id(a.buffer) {
                Some(b) => Region { addr: b.addr, size: b.size },
                None => continue,
            };
            let bytes = self.fetch(region, w).map_err(new_failure)?;
            side.lock().insert(*a, Arc::new(bytes));
            self.log(format_args!("RESCUE buffer {} version {} from rank {w}", a.buffer, a.version));
        }
        let mut regions = Vec::with_capacity(t.reads.len());
        for a in &t.reads {
            let (region, source, buddy) = {
                let mut bufs = self.buffers.lock();
                let source = {
                    let side = side.lock();
                    let copies = HeadCopies { bufs: &bufs, side: &side, ckpt: self.ckpt.as_ref(), bad: &BTreeSet::new() };
                    match decide::source(&copies, *a, w).ok_or_else(|| fatal(ClusterError::Lost(a.buffer)))? {
                        decide::Source::Present => Source::Present,
                        decide::Source::Copy(r) => Source::Copy(r),
                        decide::Source::Apart => Source::Side(side.get(a).cloned().or_else(|| bufs.kept(*a)).expect("held apart")),
                        decide::Source::Zeros => Source::Zeros,
                        decide::Source::Checkpoint => Source::Checkpoint,
                    }
                };
                let b = bufs.by_id_mut(a.buffer).ok_or_else(|| fatal(ClusterError::Lost(a.buffer)))?;
                let region = Region { addr: b.addr, size: b.size };
                let buddy = matches!(source, Source::Copy(HEAD)) && b.buddy == Some(a.version);
                if !b.backed.contains(&w) {
                    self.back_on(b, w).map_err(new_failure)?;
                }
                (region, source, buddy)
            };
            regions.push(region);
            if self.cfg.verbose {
                let from = match &source {
                    Source::Present => "present".to_string(),
                    Source::Copy(r) if buddy => format!("rank {r}'s buddy copy"),
                    Source::Copy(r) => format!("rank {r}'s copy"),
                    Source::Side(_) => "a rescued or kept copy".to_string(),
                    Source::Zeros => "zeros".to_string(),
                    Source::Checkpoint => "a checkpoint".to_string(),
                };
                self.log(format_args!("RERUN task #{} on {w}: buffer {} version {} from {from}", t.id, a.buffer, a.version));
            }
            match source {
                Source::Present => continue,
                Source::Side(bytes) => {
                    // SAFETY: the bytes are kept alive by the Arc, which is leaked on a dead
                    // peer (MPI may still read them).
                    let res = unsafe { self.submit_from(region, bytes.as_ptr(), w) };
                    if res.is_err() {
                        std::mem::forget(bytes);
                    }
                    res.map_err(new_failure)?;
                    out.from_live_copies += 1;
                }
                Source::Copy(r) => {
                    self.copy_between(region, r, w).map_err(new_failure)?;
                    if buddy {
                        out.from_buddy_copies += 1;
                    } else {
                        out.from_live_copies += 1;
                    }
                }
                Source::Zeros => {
                    let zeros = vec![0u8; region.size as usize];
                    // SAFETY: a private vector of the region's size, leaked on a dead peer.
                    let res = unsafe { self.submit_from(region, zeros.as_ptr(), w) };
                    if res.is_err() {
                        std::mem::forget(zeros);
                    }
                    res.map_err(new_failure)?;
                }
                Source::Checkpoint if w != HEAD => {
                    // The worker reads it itself (in parallel with other workers' re-runs).
                    let rec = self.ckpt.as_ref().and_then(|c| c.record(a.buffer, a.version)).ok_or(Stop::Replan(*a))?;
                    let tag = self.post_restore(w, region, &rec).map_err(new_failure)?;
                    if let Err(why) = self.restored(w, tag).map_err(new_failure)? {
                        // Its copy on `w` may hold part of the file: not a version any more.
                        self.buffers.lock().drop_copy(region.addr, w);
                        return Err(Stop::BadCheckpoint(*a, format!("rank {w}: {why}")));
                    }
                    out.from_checkpoints += 1;
                    self.graph.lock().mark(t.id, Mark::FromCheckpoint);
                }
                Source::Checkpoint => {
                    let bytes = self.load_checkpointed(*a)?;
                    if bytes.len() as u64 != region.size {
                        return Err(Stop::BadCheckpoint(*a, format!("{} bytes, expected {}", bytes.len(), region.size)));
                    }
                    // SAFETY: a private vector of the region's size, leaked on a dead peer.
                    let res = unsafe { self.submit_from(region, bytes.as_ptr(), w) };
                    if res.is_err() {
                        std::mem::forget(bytes);
                    }
                    res.map_err(new_failure)?;
                    out.from_checkpoints += 1;
                    self.graph.lock().mark(t.id, Mark::FromCheckpoint);
                }
            }
            self.buffers.lock().install(a.buffer, w, a.version);
        }
        Ok(regions)
    }

    /// Run task `t` on `w` over `regions` (its inputs, installed); which regions changed.
    fn run_task(&self, t: &TaskRecord, w: i32, regions: Vec<Region>, written: &[bool]) -> std::result::Result<Vec<bool>, Stop> {
        Ok(match &t.op {
            task_graph::Op::Kernel => self.rerun_kernel(t, w, regions, written)?,
            task_graph::Op::HostUpdate { offset, bytes } => {
                let at = regions.first().map_or(0, |r| r.addr) + offset;
                // SAFETY: the recorded bytes stay alive (the record holds them; a clone of
                // the Arc is leaked on a dead peer).
                let res = unsafe { self.submit_from(Region { addr: at, size: bytes.len() as u64 }, bytes.as_ptr(), w) };
                if res.is_err() {
                    std::mem::forget(bytes.clone());
                }
                res.map_err(new_failure)?;
                written.to_vec()
            }
            &task_graph::Op::DeviceCopy { src, dst, size } if w == HEAD => {
                let bytes = self.fetch(Region { addr: src, size }, HEAD).map_err(fatal)?;
                // SAFETY: both buffers are installed on the head above; recovery holds the gate.
                unsafe { self.write_on_head(dst, &bytes) };
                written.to_vec()
            }
            &task_graph::Op::DeviceCopy { src, dst, size } => {
                let tag = self.post(w, Event::Copy { src, dst, size }).map_err(new_failure)?;
                self.expect_ok(w, tag).map_err(new_failure)?;
                written.to_vec()
            }
        })
    }

    /// Record what re-running `t` on `w` made: the versions it wrote are on `w` now. Returns
    /// whether it changed a buffer its first run did not (not deterministic): that copy then
    /// holds no recorded version.
    fn record_rerun(&self, t: &TaskRecord, w: i32, changed: &[bool], written: &[bool]) -> bool {
        let mut unexpected = false;
        let mut bufs = self.buffers.lock();
        for ((a, &c), &wr) in t.reads.iter().zip(changed).zip(written) {
            if wr {
                let v = t.writes.iter().find(|x| x.buffer == a.buffer).expect("written").version;
                bufs.install(a.buffer, w, v);
            } else if c {
                unexpected = true;
                if let Some(b) = bufs.by_id(a.buffer) {
                    let addr = b.addr;
                    bufs.drop_copy(addr, w);
                }
            }
        }
        drop(bufs);
        if w != t.worker {
            self.graph.lock().mark(t.id, Mark::Moved);
        }
        unexpected
    }

    /// Load version `a` from the published checkpoints; if none holds it (any more), the plan
    /// that counted on it is out of date.
    fn load_checkpointed(&self, a: Access) -> std::result::Result<Vec<u8>, Stop> {
        match &self.ckpt {
            Some(c) if c.holds(a.buffer, a.version) => c.load(a.buffer, a.version).map_err(|e| Stop::BadCheckpoint(a, e)),
            _ => Err(Stop::Replan(a)),
        }
    }

    /// Make the head's copy of the live buffer at `addr` hold version `a` (`bytes`).
    pub(super) fn put_on_head(&self, a: Access, addr: u64, bytes: &[u8]) -> Result<()> {
        let mut bufs = self.buffers.lock();
        self.stage_on_head(&mut bufs, addr)?;
        if bufs.get(addr).and_then(|b| b.version_on(HEAD)) != Some(a.version) {
            self.keep_head_version(&mut bufs, addr);
        }
        self.before_changing_staged(addr);
        let n = bytes.len().min(bufs.get(addr).map_or(0, |b| b.size as usize));
        // SAFETY: the head backed this buffer's pages just above; no request is in flight
        // (recovery holds the gate) and a checkpoint saving them finished (waited above).
        unsafe { self.write_on_head(addr, &bytes[..n]) };
        bufs.install(a.buffer, HEAD, a.version);
        Ok(())
    }

    /// Run the kernel of task `t` on `w` over `regions` (its reads); which regions changed.
    fn rerun_kernel(&self, t: &TaskRecord, w: i32, regions: Vec<Region>, written: &[bool]) -> std::result::Result<Vec<bool>, Stop> {
        decide::same_allocations(t, w == HEAD, None).map_err(|why| Stop::Recover(RecoverError::Fatal(why)))?;
        // Its allocations take the addresses of its first run's (see `worker/device_alloc.rs`).
        let replay: Vec<Region> = t.allocs.iter().map(|&(addr, size)| Region { addr, size }).collect();
        self.log(format_args!("RERUN task #{} ({}) on {w}, {} device allocation(s) given again", t.id, t.kernel, replay.len()));
        let n = regions.len();
        let run = Execute { image: t.image, kernel: t.index, args: &t.args, regions, assume_written: written.to_vec(), send_back: vec![false; n], replay, short: false, quiet: true };
        let ran = self.execute(w, run);
        self.rerun_ran(t, w, ran)
    }

    /// Check what re-running task `t` on `w` gave: which of its regions changed. Its device
    /// allocations must be its first run's.
    fn rerun_ran(&self, t: &TaskRecord, w: i32, ran: Result<Executed>) -> std::result::Result<Vec<bool>, Stop> {
        let ran = ran.map_err(|e| match e {
            ClusterError::Worker { rank, msg } => fatal(ClusterError::Worker { rank, msg: format!("re-running task #{} ({}): {msg}", t.id, t.kernel) }),
            e => fatal(e),
        })?;
        let again: Vec<(u64, u64)> = ran.allocated.iter().map(|a| (a.region.addr, a.span)).collect();
        decide::same_allocations(t, false, Some(&again)).map_err(|why| Stop::Recover(RecoverError::Fatal(why)))?;
        self.trace(ran.traced.map(|(sent, _)| sent), Cat::Rerun, w, t.kernel.clone(), || vec![("task", json!(t.id))]);
        Ok(ran.changed)
    }

    /// Retired buffers that recovery backed on workers (to re-run tasks that read them) are
    /// released there again.
    fn release_retired_on_workers(&self) -> std::result::Result<(), RecoverError> {
        let mut bufs = self.buffers.lock();
        let ids: Vec<u64> = bufs.retired_ids().collect();
        for id in ids {
            let Some(b) = bufs.by_id_mut(id) else { continue };
            let region = Region { addr: b.addr, size: b.span };
            let on: Vec<i32> = b.backed.iter().copied().filter(|&r| r != HEAD).collect();
            b.backed.retain(|&r| r == HEAD);
            b.holders.retain(|&r| r == HEAD);
            b.stale.retain(|&r, _| r == HEAD);
            for r in on {
                match self.post(r, Event::Delete(region)) {
                    Ok(_) | Err(ClusterError::Comm(CommError::PeerDead(_))) => {}
                    Err(e) => return Err(new_failure(e)),
                }
            }
        }
        Ok(())
    }

    /// Failures and recoveries so far, for the report.
    pub(super) fn ft_report(&self) -> (Vec<FailureRecord>, Vec<RecoveryRecord>) {
        (self.failures.lock().clone(), self.recoveries.lock().clone())
    }
}

/// Where the copies of buffer `id` are, for the verbose log.
fn copies_of(bufs: &Buffers, id: u64) -> String {
    match bufs.by_id(id) {
        Some(b) => format!("holders {:?} of version {}, stale {:?}", b.holders, b.version, b.stale),
        None => "freed".to_string(),
    }
}

/// The flags an EXECUTE's `assume_written` takes for re-running `t`: for each buffer it
/// reads, whether its first run wrote it.
fn written_of(t: &TaskRecord) -> Vec<bool> {
    t.reads.iter().map(|a| t.writes.iter().any(|x| x.buffer == a.buffer)).collect()
}

/// A request of recovery failed: a new failure if a rank died (recovery starts again with
/// it), else the end.
pub(super) fn new_failure(e: ClusterError) -> RecoverError {
    match e {
        ClusterError::Comm(CommError::PeerDead(r)) | ClusterError::PeerDead(r) => RecoverError::NewFailure(r),
        e => RecoverError::Fatal(e.to_string()),
    }
}

fn fatal(e: ClusterError) -> Stop {
    Stop::Recover(new_failure(e))
}

