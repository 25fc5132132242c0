//! Recovery from the death of workers, by lineage (algorithm and reasons: `docs/recovery.md`).
//!
//! The handler thread (`ft-handler`) calls [`Cluster::recover`] with the gate held
//! exclusively, so no offloading request is in flight. Recovery
//! 0. if no worker is left, makes the head run the target regions itself (`on_head.rs`):
//!    the steps below then re-run the lost tasks on the head,
//! 1. fences the dead ranks (every live worker stops waiting for them; a frozen one that
//!    wakes up exits),
//! 2. forgets every copy the dead held and lists the versions lost: current versions of
//!    live buffers that no live rank holds,
//! 3. finds by lineage ([`task_graph::TaskGraph::lost_work`]) where each lost version comes
//!    from: a live copy of that exact version (a worker's, or the head's), a published
//!    checkpoint, a version the head kept apart, or re-running the task that produced it,
//!    whose inputs are found the same way,
//! 4. re-runs that minimal set of tasks in dependence order, independent ones at the same time
//!    on different survivors, installing each task's inputs at the versions it first read, on
//!    a worker where that overwrites no copy still needed,
//! 5. loads the lost versions that only a checkpoint (or a version kept apart) holds into the
//!    head's copies.
//!
//! A rank that dies meanwhile makes it return [`RecoverError::NewFailure`]; the handler calls
//! it again with the larger set (what was rebuilt so far stays rebuilt). A damaged checkpoint
//! file is taken as unavailable and the plan is made again without it.

use super::*;
use crate::config::Reexec;
use ft_handler::{Device, RecoverError};
use serde::Serialize;
use task_graph::{LostWork, Mark};

/// How often the head looks whether the worker processes on its host still exist.
const PROBE_PERIOD: std::time::Duration = std::time::Duration::from_millis(20);

/// Most times one recovery plans again because a version vanished under it.
const MAX_REPLANS: u32 = 8;

/// The record is first pruned when it holds this many tasks (then when it has doubled).
pub(super) const FIRST_PRUNE: u64 = 4096;

/// One failure, for the report.
#[derive(Debug, Clone, Serialize)]
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

/// One completed recovery, for the report.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RecoveryRecord {
    /// Every rank dead when it completed.
    pub dead: Vec<i32>,
    /// When it started, seconds since start-up.
    pub at_seconds: f64,
    /// How long the program's offloading was held, seconds.
    pub paused_seconds: f64,
    /// Versions the dead held that no live rank had.
    pub versions_lost: u64,
    /// Tasks run again.
    pub tasks_reexecuted: u64,
    /// Buffer versions loaded from checkpoints.
    pub buffers_from_checkpoints: u64,
    /// Buffer versions copied from live ranks to where a re-run task needed them.
    pub buffers_from_live_copies: u64,
    /// Lost versions rebuilt by re-running tasks.
    pub buffers_rebuilt: u64,
    /// Attempts (more than 1 if ranks died during it).
    pub attempts: u32,
    /// Plans its last attempt made (more than 1 if a version a plan counted on was gone when a
    /// re-run task needed it).
    pub plans: u32,
}

/// The cluster device as the handler sees it.
pub(crate) struct HeadDevice(pub(crate) &'static Cluster);

impl Device for HeadDevice {
    fn dead(&self) -> BTreeSet<i32> {
        let mut d = self.0.live.dead_ranks();
        d.remove(&HEAD);
        d
    }

    fn recover(&self, dead: &BTreeSet<i32>) -> std::result::Result<(), RecoverError> {
        self.0.recover(dead)
    }

    fn fatal(&self, why: &str) {
        // SAFETY: flushing all C streams is always allowed.
        unsafe { libc::fflush(std::ptr::null_mut()) };
        eprintln!("ompcluster: cannot recover: {why}; ending the job");
        crate::runtime::write_exit_status(4);
        // SAFETY: MPI is initialised; MPI_Abort ends every process of the job.
        unsafe { mpi::ffi::MPI_Abort(mpi::ffi::RSMPI_COMM_WORLD, 4) };
    }
}

/// Why one attempt to rebuild stopped.
enum Stop {
    /// A checkpoint file holding this version could not be loaded (why): plan again without it.
    BadCheckpoint(Access, String),
    /// This version, which the plan counted on, is gone (a failure or an overwrite since):
    /// plan again.
    Replan(Access),
    /// Give up this attempt (a new failure) or for good.
    Recover(RecoverError),
}

impl From<RecoverError> for Stop {
    fn from(e: RecoverError) -> Self {
        Stop::Recover(e)
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
    /// Called once, when the cluster is in its final place.
    pub(crate) fn start_handler(&'static self) -> std::io::Result<()> {
        self.ft.start(Arc::new(HeadDevice(self)))?;
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

    /// A rank failed (the failure detector said so, or a peer reported it): tell the handler,
    /// and record and report the first notice of each rank.
    pub(crate) fn note_failure(&self, rank: i32, how: &str) {
        if rank == HEAD || self.stopped.load(Ordering::Acquire) {
            return;
        }
        self.record_failure(rank, how);
        self.ft.notify(rank);
    }

    /// Fence `rank` and, the first time, record and report its failure, and tell the live
    /// workers (FAILED): a transfer of theirs with the dead rank ends now rather than at their
    /// own heartbeat timeout (3 s by default), and with it the request recovery waits for.
    pub(super) fn record_failure(&self, rank: i32, how: &str) {
        self.live.fence(rank);
        let mut f = self.failures.lock();
        if !f.iter().any(|x| x.rank == rank) {
            for w in self.workers() {
                // A worker that cannot be told is dead too, or notices by itself.
                let _ = self.post(w, Event::Failed { ranks: vec![rank] });
            }
            let at = self.start.elapsed().as_secs_f64();
            eprintln!("ompcluster: worker rank {rank} failed ({how}) at {at:.3} s; recovering");
            let latency = self.since_injected(rank);
            if let Some(t) = &self.trace {
                t.instant(Cat::Failure, HEAD, format!("rank {rank} failed"), vec![("rank", json!(rank)), ("noticed_by", json!(how))]);
            }
            f.push(FailureRecord { rank, at_seconds: at, noticed_by: how.to_string(), detection_latency_seconds: latency });
        }
    }

    /// Rebuild what the `dead` ranks took with them (see the module's documentation).
    pub(super) fn recover(&self, dead: &BTreeSet<i32>) -> std::result::Result<(), RecoverError> {
        let t0 = Instant::now();
        let traced = self.trace_now();
        let at_seconds = self.start.elapsed().as_secs_f64();
        for &r in dead {
            self.record_failure(r, "declared dead");
        }
        if self.workers().next().is_none() {
            self.continue_on_head().map_err(|e| RecoverError::Fatal(format!("every worker died (ranks {dead:?}) and the head cannot run the target regions itself: {e}")))?;
        }
        let survivors: Vec<i32> = self.targets().collect();
        self.fence(dead, &survivors)?;
        let lost = self.buffers.lock().forget_ranks(dead);
        self.inject_due(|t| *t == crate::inject::Trigger::DuringRecovery);
        for &r in dead {
            self.inject.rearm(r, crate::inject::Trigger::DuringRecovery);
        }
        let attempts = self.attempts.fetch_add(1, Ordering::Relaxed) + 1;
        let mut rec = RecoveryRecord { at_seconds, versions_lost: lost.len() as u64, attempts, ..Default::default() };
        let mut bad = BTreeSet::new();
        let mut replans = 0;
        // Copies rescued from workers: kept for the whole recovery (an attempt that stops to
        // plan again may already have overwritten where they came from).
        let side: Side = Mutex::new(HashMap::default());
        loop {
            // What is lost now: the first loss, and anything an interrupted attempt left with
            // no holder (it is then in `side`, or a checkpoint, or rebuilt again).
            let mut lost_now = lost.clone();
            lost_now.extend(self.buffers.lock().unheld());
            let work = self.plan(&lost_now, &bad, dead, &side)?;
            match self.rebuild(&work, &lost_now, &survivors, &mut rec, &side) {
                Ok(()) => break,
                Err(Stop::BadCheckpoint(a, why)) => {
                    if !bad.insert(a) {
                        return Err(RecoverError::Fatal(format!("the checkpoint of buffer #{} version {} is unusable ({why}) and was chosen again", a.buffer, a.version)));
                    }
                    eprintln!("ompcluster: the checkpoint of buffer #{} version {} is unusable ({why}); rebuilding it another way", a.buffer, a.version);
                }
                Err(Stop::Replan(a)) => {
                    replans += 1;
                    if replans > MAX_REPLANS {
                        return Err(RecoverError::Fatal(format!(
                            "version {} of buffer #{} kept disappearing while recovery rebuilt it ({MAX_REPLANS} plans)",
                            a.version, a.buffer
                        )));
                    }
                    let now = copies_of(&self.buffers.lock(), a.buffer);
                    self.log(format_args!("RECOVERY replans: buffer {} version {} is no longer where the plan found it (now: {now})", a.buffer, a.version));
                }
                Err(Stop::Recover(e)) => {
                    if let RecoverError::NewFailure(r) = e {
                        self.record_failure(r, "declared dead during recovery");
                    }
                    return Err(e);
                }
            }
        }
        // Rescued copies that are still the only copy of a current version go to the head's
        // copy; those a later recovery may need again are kept apart (within the budget).
        for (a, bytes) in side.into_inner() {
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
        rec.dead = dead.iter().copied().collect();
        rec.plans = replans + 1;
        rec.paused_seconds = t0.elapsed().as_secs_f64();
        eprintln!(
            "ompcluster: recovered from the loss of rank{} {} in {:.3} s: {} buffer version(s) lost; {} task(s) re-run on ranks {:?}; {} version(s) from checkpoints, {} from live copies, {} rebuilt",
            if dead.len() > 1 { "s" } else { "" },
            dead.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", "),
            rec.paused_seconds,
            rec.versions_lost,
            rec.tasks_reexecuted,
            survivors,
            rec.buffers_from_checkpoints,
            rec.buffers_from_live_copies,
            rec.buffers_rebuilt,
        );
        self.trace(traced, Cat::Recovery, HEAD, "recovery", || {
            vec![
                ("dead", json!(rec.dead)),
                ("versions_lost", json!(rec.versions_lost)),
                ("tasks_reexecuted", json!(rec.tasks_reexecuted)),
                ("from_checkpoints", json!(rec.buffers_from_checkpoints)),
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

    /// Is `a` available without re-running anything: a live copy, zeros, a version kept
    /// apart, or a checkpoint?
    fn available(&self, bufs: &Buffers, a: Access, bad: &BTreeSet<Access>) -> bool {
        a.version == 0
            || bufs.by_id(a.buffer).is_some_and(|b| b.ranks_with(a.version).next().is_some())
            || bufs.kept(a).is_some()
            || (!bad.contains(&a) && self.ckpt.as_ref().is_some_and(|c| c.holds(a.buffer, a.version)))
    }

    /// The lineage search, and why it fails if it does.
    fn plan(&self, lost: &BTreeSet<Access>, bad: &BTreeSet<Access>, dead: &BTreeSet<i32>, side: &Side) -> std::result::Result<LostWork, RecoverError> {
        let rescued: BTreeSet<Access> = side.lock().keys().copied().collect();
        let bufs = self.buffers.lock();
        let graph = self.graph.lock();
        let work = graph.lost_work(lost, &|a| rescued.contains(&a) || self.available(&bufs, a, bad));
        let describe = |a: &Access| match bufs.by_id(a.buffer) {
            Some(b) => format!("buffer {:#x} ({} bytes) version {}", b.addr, b.size, a.version),
            None => format!("buffer #{} version {} (freed by the program)", a.buffer, a.version),
        };
        if let Some(a) = work.unrecoverable.first() {
            let why = match bufs.by_id(a.buffer) {
                None => "the program freed it and the head kept no copy".to_string(),
                Some(_) => format!(
                    "no live rank holds it, no published checkpoint holds it{}, and no recorded task produced it (host data the head did not keep: see OMPCLUSTER_FT_RETAIN)",
                    if self.ckpt.is_none() { " (checkpoints are off: OMPCLUSTER_CP_ENABLE=1)" } else { "" }
                ),
            };
            return Err(RecoverError::Fatal(format!(
                "{} was lost with rank(s) {:?} and cannot be rebuilt: {why} ({} version(s) in all)",
                describe(a),
                dead,
                work.unrecoverable.len()
            )));
        }
        if self.cfg.verbose {
            self.log(format_args!("RECOVERY plan: re-run tasks {:?}", work.tasks));
            for a in &work.restore {
                let at = if rescued.contains(a) {
                    "rescued".to_string()
                } else if bufs.kept(*a).is_some() {
                    "kept apart".to_string()
                } else {
                    copies_of(&bufs, a.buffer)
                };
                self.log(format_args!("RECOVERY plan: buffer {} version {} from {at}", a.buffer, a.version));
            }
        }
        for &id in &work.tasks {
            let t = graph.task(id).expect("lost_work returns recorded tasks");
            if let Some(a) = t.reads.iter().find(|a| bufs.by_id(a.buffer).is_none()) {
                return Err(RecoverError::Fatal(format!(
                    "task #{id} ({}) must run again to rebuild lost data, but it read {}, which no longer exists",
                    t.kernel,
                    describe(a)
                )));
            }
        }
        Ok(work)
    }

    /// Re-run `work.tasks` and restore the lost versions only checkpoints hold.
    fn rebuild(&self, work: &LostWork, lost: &BTreeSet<Access>, survivors: &[i32], rec: &mut RecoveryRecord, side: &Side) -> std::result::Result<(), Stop> {
        let tasks: Vec<TaskRecord> = {
            let g = self.graph.lock();
            work.tasks.iter().map(|&id| g.task(id).expect("planned from the record").clone()).collect()
        };
        let deps = dependences(&tasks);
        let parallel = match self.cfg.ft_reexec {
            Reexec::Parallel => survivors.len(),
            Reexec::Sequential => 1,
        };
        let (tx, rx) = crossbeam_channel::unbounded();
        let mut done = vec![false; tasks.len()];
        let mut started = vec![false; tasks.len()];
        let mut busy: BTreeSet<i32> = BTreeSet::new();
        let mut stop: Option<Stop> = None;
        let mut from_ckpt = 0u64;
        let mut from_copies = 0u64;
        std::thread::scope(|s| {
            let mut running = 0usize;
            loop {
                if stop.is_none() {
                    for i in 0..tasks.len() {
                        if running >= parallel {
                            break;
                        }
                        if started[i] || !deps[i].iter().all(|&j| done[j]) {
                            continue;
                        }
                        let pending: Vec<&TaskRecord> = (0..tasks.len()).filter(|&k| !started[k] && k != i).map(|k| &tasks[k]).collect();
                        let Some((w, rescue)) = self.place(&tasks[i], survivors, &busy, &pending, side) else { continue };
                        started[i] = true;
                        busy.insert(w);
                        running += 1;
                        let (tx, t) = (tx.clone(), &tasks[i]);
                        s.spawn(move || {
                            let _ = tx.send((i, w, self.rerun(t, w, &rescue, side)));
                        });
                    }
                }
                if running == 0 {
                    break;
                }
                let (i, w, res) = rx.recv().expect("a re-run thread always answers");
                running -= 1;
                busy.remove(&w);
                match res {
                    Ok((ck, copies)) => {
                        done[i] = true;
                        from_ckpt += ck;
                        from_copies += copies;
                    }
                    Err(e) => {
                        stop.get_or_insert(e);
                    }
                }
            }
        });
        if let Some(e) = stop {
            return Err(e);
        }
        if let Some(i) = done.iter().position(|d| !d) {
            return Err(Stop::Recover(RecoverError::Fatal(format!(
                "task #{} ({}) could not be re-run: the tasks it waits for did not finish",
                tasks[i].id, tasks[i].kernel
            ))));
        }
        // Lost versions that no task rebuilt and no live rank holds (an earlier attempt may
        // have rebuilt some) come from checkpoints: into the head's copy.
        for a in work.restore.iter().filter(|a| lost.contains(a)) {
            let (addr, kept) = {
                let bufs = self.buffers.lock();
                match bufs.by_id(a.buffer) {
                    Some(b) if b.ranks_with(a.version).next().is_none() && !side.lock().contains_key(a) => (b.addr, bufs.kept(*a)),
                    _ => continue,
                }
            };
            let bytes = match kept {
                Some(bytes) => {
                    from_copies += 1;
                    bytes
                }
                None => {
                    from_ckpt += 1;
                    Arc::new(self.load_checkpointed(*a)?)
                }
            };
            self.put_on_head(*a, addr, &bytes).map_err(fatal)?;
        }
        let mut g = self.graph.lock();
        for t in &tasks {
            g.mark(t.id, Mark::Reexecuted);
        }
        rec.tasks_reexecuted += tasks.len() as u64;
        rec.buffers_from_checkpoints += from_ckpt;
        rec.buffers_from_live_copies += from_copies;
        rec.buffers_rebuilt += tasks.iter().flat_map(|t| &t.writes).filter(|a| lost.contains(a)).count() as u64;
        Ok(())
    }

    /// The survivor to re-run `t` on (not busy), and the copies there that must be rescued
    /// first: installing `t`'s inputs at the versions it first read overwrites them, and so
    /// does `t` itself where it rewrites an input in place, and each is the only copy of a
    /// version still needed (the current version, or an input of a task still `pending`: the
    /// record lists a region that read a version after one that rewrote it when the two
    /// shared a copy and the reader ended last). Prefers fewest bytes to rescue, then most
    /// inputs already there.
    fn place(&self, t: &TaskRecord, survivors: &[i32], busy: &BTreeSet<i32>, pending: &[&TaskRecord], side: &Side) -> Option<(i32, Vec<Access>)> {
        let bufs = self.buffers.lock();
        let side = side.lock();
        let needed_later = |a: Access| pending.iter().any(|p| p.reads.contains(&a));
        // A copy must be rescued before it is overwritten if it is the only copy of the
        // current version, or if a task still to run needs its version and neither the head
        // nor a checkpoint has that (another worker's copy might be overwritten too). A copy on
        // a worker busy with another re-run does not count as another copy: that task may be
        // overwriting it right now (with the bookkeeping not yet updated).
        let precious = |b: &Buffer, v: u64, w: i32| {
            let a = Access { buffer: b.id, version: v };
            let kept = side.contains_key(&a) || bufs.kept(a).is_some() || self.ckpt.as_ref().is_some_and(|c| c.holds(b.id, v));
            let safe_elsewhere = b.ranks_with(v).any(|r| r != w && (r == HEAD || !busy.contains(&r)));
            let current_here_only = v == b.version && !safe_elsewhere;
            let needed = needed_later(a) && !b.ranks_with(v).any(|r| r == HEAD && r != w);
            !kept && (current_here_only || needed)
        };
        survivors
            .iter()
            .copied()
            .filter(|w| !busy.contains(w))
            .filter_map(|w| {
                let (mut present, mut rescue_bytes, mut rescue) = (0u64, 0u64, Vec::new());
                for a in &t.reads {
                    let b = bufs.by_id(a.buffer)?;
                    match b.version_on(w) {
                        Some(v) if v == a.version => {
                            present += b.size;
                            // The task rewrites this copy in place: the version it read is
                            // then gone from here.
                            if t.writes.iter().any(|x| x.buffer == b.id) && precious(b, v, w) {
                                rescue_bytes += b.size;
                                rescue.push(*a);
                            }
                        }
                        Some(v) if precious(b, v, w) => {
                            rescue_bytes += b.size;
                            rescue.push(Access { buffer: b.id, version: v });
                        }
                        _ => {}
                    }
                }
                Some(((std::cmp::Reverse(rescue_bytes), present, w == t.worker, std::cmp::Reverse(w)), (w, rescue)))
            })
            .max_by_key(|(k, _)| *k)
            .map(|(_, v)| v)
    }

    /// Re-run task `t` on worker `w`: install its inputs there at the versions it first read,
    /// run its kernel (its output is not printed again), record the versions it produced.
    /// Returns how many inputs came from checkpoints and how many from live copies.
    fn rerun(&self, t: &TaskRecord, w: i32, rescue: &[Access], side: &Side) -> std::result::Result<(u64, u64), Stop> {
        let (mut from_ckpt, mut from_copies) = (0, 0);
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
            let (region, source) = {
                let mut bufs = self.buffers.lock();
                let kept = bufs.kept(*a);
                let b = bufs.by_id_mut(a.buffer).ok_or_else(|| fatal(ClusterError::Lost(a.buffer)))?;
                let region = Region { addr: b.addr, size: b.size };
                let source = if b.version_on(w) == Some(a.version) {
                    Source::Present
                } else if let Some(r) = b.ranks_with(a.version).filter(|&r| r != w).min_by_key(|&r| (r == HEAD, r)) {
                    Source::Copy(r)
                } else if let Some(bytes) = side.lock().get(a).cloned().or(kept) {
                    Source::Side(bytes)
                } else if a.version == 0 {
                    Source::Zeros
                } else {
                    Source::Checkpoint
                };
                if !b.backed.contains(&w) {
                    let b = bufs.by_id_mut(a.buffer).expect("found above");
                    self.back_on(b, w).map_err(new_failure)?;
                }
                (region, source)
            };
            regions.push(region);
            if self.cfg.verbose {
                let from = match &source {
                    Source::Present => "present".to_string(),
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
                    from_copies += 1;
                }
                Source::Copy(r) => {
                    self.copy_between(region, r, w).map_err(new_failure)?;
                    from_copies += 1;
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
                    from_ckpt += 1;
                    self.graph.lock().mark(t.id, Mark::FromCheckpoint);
                }
            }
            self.buffers.lock().install(a.buffer, w, a.version);
        }
        let written: Vec<bool> = t.reads.iter().map(|a| t.writes.iter().any(|x| x.buffer == a.buffer)).collect();
        let changed = match &t.op {
            task_graph::Op::Kernel => self.rerun_kernel(t, w, regions, &written)?,
            task_graph::Op::HostUpdate { offset, bytes } => {
                let at = regions.first().map_or(0, |r| r.addr) + offset;
                // SAFETY: the recorded bytes stay alive (the record holds them; a clone of
                // the Arc is leaked on a dead peer).
                let res = unsafe { self.submit_from(Region { addr: at, size: bytes.len() as u64 }, bytes.as_ptr(), w) };
                if res.is_err() {
                    std::mem::forget(bytes.clone());
                }
                res.map_err(new_failure)?;
                written.clone()
            }
            &task_graph::Op::DeviceCopy { src, dst, size } if w == HEAD => {
                let bytes = self.fetch(Region { addr: src, size }, HEAD).map_err(fatal)?;
                // SAFETY: both buffers are installed on the head above; recovery holds the gate.
                unsafe { self.write_on_head(dst, &bytes) };
                written.clone()
            }
            &task_graph::Op::DeviceCopy { src, dst, size } => {
                let tag = self.post(w, Event::Copy { src, dst, size }).map_err(new_failure)?;
                self.expect_ok(w, tag).map_err(new_failure)?;
                written.clone()
            }
        };
        let mut bufs = self.buffers.lock();
        for ((a, c), wr) in t.reads.iter().zip(changed).zip(&written) {
            if *wr {
                let v = t.writes.iter().find(|x| x.buffer == a.buffer).expect("written").version;
                bufs.install(a.buffer, w, v);
            } else if c {
                // Not deterministic: it changed a buffer its first run did not. That copy now
                // holds no recorded version.
                if let Some(b) = bufs.by_id(a.buffer) {
                    let addr = b.addr;
                    bufs.drop_copy(addr, w);
                }
            }
        }
        drop(bufs);
        let mut g = self.graph.lock();
        if w != t.worker {
            g.mark(t.id, Mark::Moved);
        }
        Ok((from_ckpt, from_copies))
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
    fn put_on_head(&self, a: Access, addr: u64, bytes: &[u8]) -> Result<()> {
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
        let differs = |what: &str| {
            Stop::Recover(RecoverError::Fatal(format!(
                "task #{} ({}) allocated device memory (malloc or new in the region) and must run again, but {what}: \
                 its objects cannot be rebuilt where the program's pointers expect them",
                t.id, t.kernel
            )))
        };
        if w == HEAD {
            if !t.allocs.is_empty() {
                return Err(differs("the head, which runs the regions now that no worker is left, allocates from its own memory"));
            }
            let sent = self.trace_now();
            let changed = self.run_here(t.image, t.index, &t.args, &regions, written, true).map_err(fatal)?.changed;
            self.trace(sent, Cat::Rerun, w, t.kernel.clone(), || vec![("task", json!(t.id))]);
            return Ok(changed);
        }
        // Its allocations take the addresses of its first run's (see `worker/device_alloc.rs`).
        let replay: Vec<Region> = t.allocs.iter().map(|&(addr, size)| Region { addr, size }).collect();
        self.log(format_args!("RERUN task #{} ({}) on {w}, {} device allocation(s) given again", t.id, t.kernel, replay.len()));
        let send_back = vec![false; regions.len()];
        let event = Event::Execute { image: t.image, kernel: t.index, args: t.args.clone(), regions, assume_written: written.to_vec(), short: false, replay, send_back };
        let sent = self.trace_now();
        let tag = self.post(w, event).map_err(new_failure)?;
        match self.comm.recv_msg::<Reply>(w, tag, self.live.as_ref()) {
            Ok(Reply::Executed { changed, allocated, .. }) if changed.len() == t.reads.len() => {
                let again: Vec<(u64, u64)> = allocated.iter().map(|a| (a.region.addr, a.span)).collect();
                if again != t.allocs {
                    let spans = |v: &[(u64, u64)]| {
                        let shown: Vec<String> = v.iter().take(4).map(|(_, s)| s.to_string()).collect();
                        format!("{} block(s) of {}{} bytes", v.len(), shown.join(", "), if v.len() > 4 { ", ..." } else { "" })
                    };
                    return Err(differs(&format!(
                        "this run allocated {} where its first run allocated {} (other sizes, or in another order)",
                        spans(&again),
                        spans(&t.allocs)
                    )));
                }
                self.trace(sent, Cat::Rerun, w, t.kernel.clone(), || vec![("task", json!(t.id))]);
                Ok(changed)
            }
            Ok(Reply::PeerDead(r)) => Err(fatal(ClusterError::PeerDead(r))),
            Ok(other) => Err(fatal(ClusterError::Worker { rank: w, msg: format!("re-running task #{} ({}): {other:?}", t.id, t.kernel) })),
            Err(e) => Err(fatal(e.into())),
        }
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

    /// Keep the task record bounded: once it holds `prune_at` tasks, forget the tasks recovery
    /// can no longer need (lineage stops at version 0 and at versions a published checkpoint
    /// holds), and the retired buffers only they read.
    pub(super) fn maybe_prune(&self) {
        if (self.graph.lock().len() as u64) < self.prune_at.load(Ordering::Relaxed) {
            return;
        }
        let released = {
            let mut bufs = self.buffers.lock();
            let mut g = self.graph.lock();
            let safe = |a: Access| a.version == 0 || self.ckpt.as_ref().is_some_and(|c| c.holds(a.buffer, a.version));
            let roots: BTreeSet<Access> = bufs
                .iter()
                .map(|b| Access { buffer: b.id, version: b.version })
                .filter(|&a| !safe(a))
                .collect();
            let removed = g.prune(&roots, &safe);
            bufs.release_kept(|a| g.is_read(a));
            self.prune_at.store(FIRST_PRUNE.max(2 * g.len() as u64), Ordering::Relaxed);
            self.log(format_args!("PRUNE {removed} tasks; {} kept", g.len()));
            bufs.release_retired(&g.buffers_read())
        };
        for b in released {
            if let Err(e) = self.release_head_copy(&b) {
                eprintln!("ompcluster: cannot release buffer {:#x}: {e}", b.addr);
            }
        }
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

/// For each task of a re-run set (in record order), the earlier ones it must wait for. Per
/// buffer, in record order: a task that writes it waits for every earlier task touching it
/// (since the previous writer, which it waits for too: that is enough, by transitivity); a
/// task that only reads it waits for the earlier ones that write it or read another version
/// of it (both would put another version in the copy it reads). Record order is an order the
/// program allowed, and keeping it per buffer means no task overwrites a copy another still
/// needs.
fn dependences(tasks: &[TaskRecord]) -> Vec<Vec<usize>> {
    // Buffer -> tasks touching it since its last writer: (task, version read, writes it).
    let mut since: HashMap<u64, Vec<(usize, u64, bool)>> = HashMap::default();
    let mut deps: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); tasks.len()];
    for (i, t) in tasks.iter().enumerate() {
        for a in &t.reads {
            let writes = t.writes.iter().any(|w| w.buffer == a.buffer);
            let list = since.entry(a.buffer).or_default();
            for &(j, v, wj) in list.iter() {
                if writes || wj || v != a.version {
                    deps[i].insert(j);
                }
            }
            if writes {
                list.clear();
            }
            list.push((i, a.version, writes));
        }
    }
    deps.into_iter().map(|d| d.into_iter().collect()).collect()
}

/// A request of recovery failed: a new failure if a rank died (recovery starts again with
/// it), else the end.
fn new_failure(e: ClusterError) -> RecoverError {
    match e {
        ClusterError::Comm(CommError::PeerDead(r)) | ClusterError::PeerDead(r) => RecoverError::NewFailure(r),
        e => RecoverError::Fatal(e.to_string()),
    }
}

fn fatal(e: ClusterError) -> Stop {
    Stop::Recover(new_failure(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(reads: &[(u64, u64)], writes: &[(u64, u64)]) -> TaskRecord {
        let acc = |v: &[(u64, u64)]| v.iter().map(|&(buffer, version)| Access { buffer, version }).collect();
        TaskRecord {
            id: 0,
            kernel: "k".into(),
            image: 0,
            index: 0,
            args: vec![],
            worker: 1,
            reads: acc(reads),
            writes: acc(writes),
            start_s: 0.0,
            end_s: 0.0,
            kernel_s: 0.0,
            op: task_graph::Op::Kernel,
            allocs: Vec::new(),
        }
    }

    #[test]
    fn dependences_per_buffer() {
        let tasks = vec![
            task(&[(1, 1), (2, 0)], &[(2, 1)]), // 0: reads A v1, writes B
            task(&[(1, 1), (3, 0)], &[(3, 1)]), // 1: reads A v1 too: independent of 0
            task(&[(2, 1)], &[(2, 2)]),         // 2: B in place: after 0
            task(&[(2, 1), (4, 0)], &[(4, 1)]), // 3: reads B v1 (not v2): after 2's writer chain
            task(&[(1, 2)], &[]),               // 4: reads A v2: after 0 and 1 (they read v1)
        ];
        let d = dependences(&tasks);
        assert_eq!(d[0], Vec::<usize>::new());
        assert_eq!(d[1], Vec::<usize>::new());
        assert_eq!(d[2], vec![0]);
        assert_eq!(d[3], vec![2]);
        assert_eq!(d[4], vec![0, 1]);
    }
}
