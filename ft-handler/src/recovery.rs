//! The recovery algorithm: what a failure lost, where each lost version comes from, the order
//! of re-runs, planning again when a source vanishes, the fatal cases, and the policy (spares,
//! parallel or sequential re-runs). It drives the cluster device through the [`Primitives`]
//! primitives, so it runs against a simulated device in the tests below, with no MPI.
//!
//! One recovery ([`recover`]):
//! 1. spare workers take the place of the dead ones that ran regions ([`Spares`]);
//! 2. the device fences the dead ranks and forgets every copy they held: the versions lost
//!    are the current versions of live buffers that no live rank holds;
//! 3. the plan ([`plan`]): lineage over the task record finds, for each lost version, where it
//!    comes from, cheapest first: a live copy (a buddy copy on the head is one), a published
//!    checkpoint, or re-running the task that produced it, whose inputs are found the same way.
//!    A version nothing gives back, or a task to re-run whose input buffer no longer exists,
//!    is fatal, with a message naming the buffer and why;
//! 4. the re-runs ([`rebuild`]): a ready queue ([`RerunOrder`]) hands tasks out in dependence
//!    order to free survivors (one thread each; independent tasks at the same time), a task
//!    taking along the chain that can follow it on the same worker; then the lost versions
//!    that only a checkpoint or a copy kept apart holds are restored to the head;
//! 5. an attempt that stops is planned again: without a checkpoint that turned out damaged
//!    (chosen again: fatal), or because a version the plan counted on vanished (at most
//!    [`MAX_REPLANS`] times); a rank that died meanwhile ends the attempt with
//!    [`RecoverError::NewFailure`], and the handler calls again with the larger set.
//!
//! Concurrency: [`recover`] runs on the handler thread with the gate held exclusively. The
//! re-run threads it starts live in a scope that ends before it returns; each catches its
//! own panic ([`crate::catch_as_handler`]) and answers with it, so nothing waits for a thread
//! that died. The device's primitives take the device's own locks.

use crate::decide::{can_chain, can_follow, place, Copies};
use crate::{RecoverError, RerunOrder};
use rustc_hash::FxHashMap as HashMap;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;
use task_graph::{Access, LostWork, TaskGraph, TaskRecord};

/// Most times one recovery plans again because a version vanished under it.
pub const MAX_REPLANS: u32 = 8;

/// Why one attempt to rebuild stopped.
#[derive(Debug)]
pub enum Stop {
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

/// Where the inputs a re-run installed came from, and how many of a batch's tasks are done.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BatchDone {
    /// How many of its tasks (from the first) are done; the others must run again (a task
    /// before them changed a buffer its first run did not).
    pub done: usize,
    /// Inputs from checkpoints.
    pub from_checkpoints: u64,
    /// Inputs from live copies (a worker's, the head's own, or rescued ones).
    pub from_live_copies: u64,
    /// Inputs from buddy copies.
    pub from_buddy_copies: u64,
}

/// Where a restored lost version came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restored {
    /// A published checkpoint.
    Checkpoint,
    /// A copy the head kept apart or rescued.
    Copy,
}

/// What one recovery did: a part of the run report (`run_report::RecoveryRecord`).
pub use run_report::Outcome;

/// How recovery re-runs lost tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Independent tasks at the same time on different survivors (else one after another,
    /// as the OCFTL thesis does).
    pub parallel: bool,
    /// Most tasks of one chain sent to a worker together.
    pub max_chain: usize,
}

impl Default for Policy {
    fn default() -> Self {
        Policy { parallel: true, max_chain: 256 }
    }
}

/// Where versions are, as the plan sees them (the device's locks held).
pub trait View {
    /// Is `a` available without re-running anything (a live copy, zeros, a copy kept apart or
    /// rescued, a checkpoint not known damaged)?
    fn available(&self, a: Access) -> bool;
    /// `a` in words (`buffer 0x... (N bytes) version V`), or None if the program freed the
    /// buffer and nothing of it is left.
    fn describe(&self, a: Access) -> Option<String>;
    /// Where the copies of `a` are, for the verbose log.
    fn copies(&self, a: Access) -> String;
    /// Are checkpoints on (for the fatal message)?
    fn checkpoints_on(&self) -> bool;
}

/// The cluster device as recovery drives it: a few primitives over its data manager and
/// transport. The plugin implements it over MPI; the tests below simulate it.
pub trait Primitives: Sync {
    /// Fence the `dead` ranks (no survivor waits for them any more; a frozen one is killed)
    /// and forget every copy they held. Returns the versions lost.
    fn fence_and_forget(&self, dead: &BTreeSet<i32>) -> Result<BTreeSet<Access>, RecoverError>;
    /// Live workers kept idle as spares, in rank order.
    fn idle_spares(&self) -> Vec<i32>;
    /// Rank `r` is no idle spare any more: it takes the place of dead worker `replacing`, or
    /// (None) it died idle.
    fn leave_spares(&self, r: i32, replacing: Option<i32>);
    /// Where tasks can run now (the head itself once no worker is left; the device starts
    /// running regions there if needed).
    fn targets(&self) -> Result<Vec<i32>, RecoverError>;
    /// Current versions of live buffers that no rank holds (an interrupted attempt can leave
    /// some).
    fn unheld(&self) -> BTreeSet<Access>;
    /// Run `f` over the task record and where versions are (damaged checkpoints `bad` left out).
    fn with_view<R>(&self, bad: &BTreeSet<Access>, f: impl FnOnce(&TaskGraph, &dyn View) -> R) -> R;
    /// Run `f` over where copies are now (the device's locks held; copies rescued by this
    /// recovery count as held apart; damaged checkpoints `bad` as none), for the decisions of
    /// `decide.rs`.
    fn with_copies<R>(&self, bad: &BTreeSet<Access>, f: impl FnOnce(&dyn Copies) -> R) -> R;
    /// Kernels whose first run took less than this many seconds run on a worker's polling
    /// thread, in the order they come: a chain of them is sent at once ([`can_chain`]).
    fn short_kernel_s(&self) -> f64;
    /// Re-run `tasks` on `w`, in order (rescuing `rescue` first, installing the first task's
    /// inputs; a chain's later tasks find theirs there).
    fn run_batch(&self, tasks: &[&TaskRecord], w: i32, rescue: &[Access]) -> Result<BatchDone, Stop>;
    /// Put lost version `a` back on the head from a checkpoint or a copy kept apart, if no
    /// rank holds it (None: nothing to do).
    fn restore(&self, a: Access) -> Result<Option<Restored>, Stop>;
    /// `tasks` were re-run (for the task graph's marks).
    fn rerun_done(&self, tasks: &[TaskRecord]);
    /// Is the verbose log on (lines that cost something to make are made only then)?
    fn verbose(&self) -> bool;
    /// One line of the verbose log.
    fn log(&self, what: std::fmt::Arguments<'_>);
    /// A checkpoint turned out damaged; recovery rebuilds its version another way.
    fn warn(&self, what: std::fmt::Arguments<'_>);
}

/// Which spare took which dead worker's place, across recoveries.
#[derive(Debug, Default)]
pub struct Spares {
    replaced: BTreeMap<i32, i32>,
}

impl Spares {
    /// Each dead worker that ran regions (not an idle spare) and has no replacement yet gets
    /// the first idle live spare. Returns (spare, dead worker) for each taken now.
    pub fn take(&mut self, dev: &impl Primitives, dead: &BTreeSet<i32>) -> Vec<(i32, i32)> {
        let idle = dev.idle_spares();
        let mut taken = Vec::new();
        for &r in dead {
            if self.replaced.contains_key(&r) {
                continue;
            }
            if idle.contains(&r) {
                // A spare that dies idle needs no replacement.
                dev.leave_spares(r, None);
                self.replaced.insert(r, r);
                continue;
            }
            let Some(spare) = dev.idle_spares().into_iter().find(|s| !dead.contains(s)) else { break };
            dev.leave_spares(spare, Some(r));
            self.replaced.insert(r, spare);
            taken.push((spare, r));
        }
        taken
    }
}

/// Rebuild what the `dead` ranks took with them (see the module's documentation).
pub fn recover(dev: &impl Primitives, dead: &BTreeSet<i32>, policy: Policy, spares: &mut Spares) -> Result<Outcome, RecoverError> {
    let mut out = Outcome { spares: spares.take(dev, dead), ..Default::default() };
    let lost = dev.fence_and_forget(dead)?;
    let survivors = dev.targets()?;
    out.survivors.clone_from(&survivors);
    out.versions_lost = lost.len() as u64;
    let mut bad = BTreeSet::new();
    let mut replans = 0;
    out.plans = 0;
    loop {
        out.plans += 1;
        // What is lost now: the first loss, and anything an interrupted attempt left with no
        // holder (it is then rescued, in a checkpoint, or rebuilt again).
        let mut lost_now = lost.clone();
        lost_now.extend(dev.unheld());
        let work = plan(dev, &lost_now, &bad, dead)?;
        match rebuild(dev, &work, &lost_now, &bad, &survivors, policy, &mut out) {
            Ok(()) => break,
            Err(Stop::BadCheckpoint(a, why)) => {
                if !bad.insert(a) {
                    return Err(RecoverError::Fatal(format!("the checkpoint of buffer #{} version {} is unusable ({why}) and was chosen again", a.buffer, a.version)));
                }
                dev.warn(format_args!("the checkpoint of buffer #{} version {} is unusable ({why}); rebuilding it another way", a.buffer, a.version));
            }
            Err(Stop::Replan(a)) => {
                replans += 1;
                if replans > MAX_REPLANS {
                    return Err(RecoverError::Fatal(format!(
                        "version {} of buffer #{} kept disappearing while recovery rebuilt it ({MAX_REPLANS} plans)",
                        a.version, a.buffer
                    )));
                }
                let now = dev.with_view(&bad, |_, v| v.copies(a));
                dev.log(format_args!("RECOVERY replans: buffer {} version {} is no longer where the plan found it (now: {now})", a.buffer, a.version));
            }
            Err(Stop::Recover(e)) => return Err(e),
        }
    }
    Ok(out)
}

/// The lineage search over the record, and why it fails if it does.
pub fn plan(dev: &impl Primitives, lost: &BTreeSet<Access>, bad: &BTreeSet<Access>, dead: &BTreeSet<i32>) -> Result<LostWork, RecoverError> {
    dev.with_view(bad, |graph, view| {
        let work = graph.lost_work(lost, &|a| view.available(a));
        let describe = |a: &Access| view.describe(*a).unwrap_or_else(|| format!("buffer #{} version {} (freed by the program)", a.buffer, a.version));
        if let Some(a) = work.unrecoverable.first() {
            let why = match view.describe(*a) {
                None => "the program freed it and the head kept no copy".to_string(),
                Some(_) => format!(
                    "no live rank holds it, no published checkpoint holds it{}, and no recorded task produced it (host data the head did not keep: see OMPCLUSTER_FT_RETAIN)",
                    if view.checkpoints_on() { "" } else { " (checkpoints are off: OMPCLUSTER_CP_ENABLE=1)" }
                ),
            };
            return Err(RecoverError::Fatal(format!(
                "{} was lost with rank(s) {:?} and cannot be rebuilt: {why} ({} version(s) in all)",
                describe(a),
                dead,
                work.unrecoverable.len()
            )));
        }
        if dev.verbose() {
            dev.log(format_args!("RECOVERY plan: re-run tasks {:?}", work.tasks));
            for a in &work.restore {
                dev.log(format_args!("RECOVERY plan: buffer {} version {} from {}", a.buffer, a.version, view.copies(*a)));
            }
        }
        for &id in &work.tasks {
            let t = graph.task(id).expect("lost_work returns recorded tasks");
            if let Some(a) = t.reads.iter().find(|a| view.describe(**a).is_none()) {
                return Err(RecoverError::Fatal(format!(
                    "task #{id} ({}) must run again to rebuild lost data, but it read {}, which no longer exists",
                    t.kernel,
                    describe(a)
                )));
            }
        }
        Ok(work)
    })
}

/// Re-run `work.tasks` on `survivors` and restore the lost versions only checkpoints or
/// copies kept apart hold (`bad`: checkpointed versions known damaged); counts what it did in
/// `out`.
pub fn rebuild(dev: &impl Primitives, work: &LostWork, lost: &BTreeSet<Access>, bad: &BTreeSet<Access>, survivors: &[i32], policy: Policy, out: &mut Outcome) -> Result<(), Stop> {
    let tasks: Vec<TaskRecord> = dev.with_view(&BTreeSet::new(), |g, _| work.tasks.iter().map(|&id| g.task(id).expect("planned from the record").clone()).collect());
    let mut order = RerunOrder::new(&tasks);
    let parallel = if policy.parallel { survivors.len() } else { 1 };
    let (tx, rx) = crossbeam_channel::unbounded::<(Vec<usize>, i32, Result<BatchDone, Stop>)>();
    let mut busy: BTreeSet<i32> = BTreeSet::new();
    let mut stop: Option<Stop> = None;
    let mut total = BatchDone::default();
    let t0 = Instant::now();
    std::thread::scope(|s| {
        let mut running = 0usize;
        loop {
            while stop.is_none() && running < parallel {
                let Some(i) = order.pop() else { break };
                order.start(i);
                let free: Vec<i32> = survivors.iter().copied().filter(|w| !busy.contains(w)).collect();
                let Some((w, rescue)) = dev.with_copies(bad, |c| place(c, &tasks[i], &free, &busy, &order)) else {
                    order.retry(i);
                    break;
                };
                let batch = if rescue.is_empty() { chain_from(dev, i, w, &tasks, &mut order, policy.max_chain, bad) } else { vec![i] };
                busy.insert(w);
                running += 1;
                out.rerun_batches += 1;
                out.most_batches_at_once = out.most_batches_at_once.max(running as u64);
                let (tx, tasks) = (tx.clone(), &tasks);
                s.spawn(move || {
                    let members: Vec<&TaskRecord> = batch.iter().map(|&k| &tasks[k]).collect();
                    let res = crate::catch_as_handler(|| dev.run_batch(&members, w, &rescue))
                        .unwrap_or_else(|p| Err(Stop::Recover(RecoverError::Fatal(format!("a thread re-running task #{} panicked: {p}", members[0].id)))));
                    let _ = tx.send((batch, w, res));
                });
            }
            if running == 0 {
                break;
            }
            // Every re-run thread answers (its panic is caught), and `tx` lives here.
            let Ok((batch, w, res)) = watchdog::waiting("re-runs of lost tasks on the workers", || rx.recv()) else { break };
            running -= 1;
            busy.remove(&w);
            match res {
                Ok(d) => {
                    for &k in &batch[..d.done] {
                        order.finish(k);
                    }
                    for &k in &batch[d.done..] {
                        order.retry(k);
                    }
                    total.from_checkpoints += d.from_checkpoints;
                    total.from_live_copies += d.from_live_copies;
                    total.from_buddy_copies += d.from_buddy_copies;
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
    if let Some(i) = order.first_not_done() {
        return Err(Stop::Recover(RecoverError::Fatal(format!(
            "task #{} ({}) could not be re-run: the tasks it waits for did not finish",
            tasks[i].id, tasks[i].kernel
        ))));
    }
    out.rerun_seconds += t0.elapsed().as_secs_f64();
    // Lost versions that no task rebuilt and no live rank holds (an earlier attempt may have
    // rebuilt some) come from checkpoints or copies kept apart: onto the head.
    for a in work.restore.iter().filter(|a| lost.contains(a)) {
        match watchdog::waiting("a lost version read from a checkpoint or a copy kept apart", || dev.restore(*a))? {
            Some(Restored::Checkpoint) => total.from_checkpoints += 1,
            Some(Restored::Copy) => total.from_live_copies += 1,
            None => {}
        }
    }
    dev.rerun_done(&tasks);
    out.tasks_reexecuted += tasks.len() as u64;
    out.replicated_reexecuted += tasks.iter().filter(|t| t.replicated).count() as u64;
    out.from_checkpoints += total.from_checkpoints;
    out.from_live_copies += total.from_live_copies;
    out.from_buddy_copies += total.from_buddy_copies;
    out.rebuilt += tasks.iter().flat_map(|t| &t.writes).filter(|a| lost.contains(a)).count() as u64;
    Ok(())
}

/// The chain that starts with task `i` (started, placed on `w` with nothing to rescue): `i`,
/// then each next task [`RerunOrder::chain`] offers that the device says can follow on `w`
/// (see [`can_follow`]), at most `max` in all. The tasks taken are started in
/// `order`.
fn chain_from(dev: &impl Primitives, i: usize, w: i32, tasks: &[TaskRecord], order: &mut RerunOrder, max: usize, bad: &BTreeSet<Access>) -> Vec<usize> {
    let mut chain = vec![i];
    // The version each buffer the chain touched holds on `w` once the chain so far ran.
    let mut on_w: HashMap<u64, u64> = HashMap::default();
    let note = |on_w: &mut HashMap<u64, u64>, t: &TaskRecord| {
        on_w.extend(t.reads.iter().map(|a| (a.buffer, a.version)));
        on_w.extend(t.writes.iter().map(|a| (a.buffer, a.version)));
    };
    let short = dev.short_kernel_s();
    if max <= 1 || !can_chain(&tasks[i], w, short) {
        return chain;
    }
    note(&mut on_w, &tasks[i]);
    while chain.len() < max {
        let Some(j) = order.chain(&chain) else { break };
        if !dev.with_copies(bad, |c| can_follow(c, &tasks[j], w, &on_w, order, short)) {
            break;
        }
        order.start_chained(j);
        note(&mut on_w, &tasks[j]);
        chain.push(j);
    }
    chain
}

#[cfg(test)]
mod tests {
    //! The algorithm against a simulated cluster: buffers with versions and copies per rank
    //! (rank 0 is the head), a task record, checkpoints (some damaged), and faults on cue. A
    //! re-run task installs the versions it read (from wherever the simulation finds them)
    //! and makes the versions it wrote on its worker, as the real device does.
    use super::*;
    use parking_lot::Mutex;

    const HEAD: i32 = 0;

    #[derive(Default)]
    struct Buf {
        /// Current version.
        version: u64,
        /// Rank -> the version its copy holds.
        copies: BTreeMap<i32, u64>,
        freed: bool,
    }

    #[derive(Default)]
    struct State {
        bufs: BTreeMap<u64, Buf>,
        graph: TaskGraph,
        ckpt: BTreeSet<Access>,
        damaged: BTreeSet<Access>,
        kept: BTreeSet<Access>,
        live: BTreeSet<i32>,
        spares: BTreeSet<i32>,
        on_head: bool,
        /// Tasks run again: (task id, rank).
        runs: Vec<(u64, i32)>,
        batches: Vec<usize>,
        /// After this many re-runs, this rank dies.
        die_after: Option<(usize, i32)>,
        /// The first re-run that takes this version from a copy finds it gone.
        vanish: Option<Access>,
        warned: Vec<String>,
    }

    struct Sim(Mutex<State>);

    impl Sim {
        /// `workers` live workers, the last `spares` of them idle spares.
        fn new(workers: i32, spares: i32) -> Sim {
            Sim(Mutex::new(State { live: (1..=workers).collect(), spares: (workers - spares + 1..=workers).collect(), ..Default::default() }))
        }

        /// A buffer whose version 1 is host data on the head.
        fn host_data(&self, id: u64) {
            let mut s = self.0.lock();
            s.bufs.insert(id, Buf { version: 1, copies: [(HEAD, 1)].into(), freed: false });
        }

        /// A recorded task on `worker` reading `reads` (buffer, version) and making the next
        /// version of each buffer in `writes` there.
        fn task(&self, worker: i32, reads: &[(u64, u64)], writes: &[u64]) {
            self.task_with(worker, reads, writes, false);
        }

        /// [`Self::task`], its region run with replicas (`replicated`) or not.
        fn task_with(&self, worker: i32, reads: &[(u64, u64)], writes: &[u64], replicated: bool) {
            let mut s = self.0.lock();
            let mut made = Vec::new();
            for &id in writes {
                let b = s.bufs.entry(id).or_default();
                // Whoever held the old version keeps it as an older copy.
                b.version += 1;
                b.copies.insert(worker, b.version);
                made.push(Access { buffer: id, version: b.version });
            }
            let mut reads = crate::testing::accesses(reads);
            for a in &made {
                if !reads.iter().any(|r| r.buffer == a.buffer) {
                    reads.push(Access { buffer: a.buffer, version: a.version - 1 });
                }
            }
            s.graph.record(TaskRecord { replicated, ..crate::testing::kernel_task(worker, reads, made) });
        }

        /// A chain of `n` in-place updates of buffer `id` on `worker`.
        fn chain(&self, worker: i32, id: u64, n: u64) {
            for _ in 0..n {
                let v = self.0.lock().bufs.get(&id).map_or(0, |b| b.version);
                self.task(worker, &[(id, v)], &[id]);
            }
        }

        /// The head copies the current version of `id` (a buddy copy).
        fn buddy(&self, id: u64) {
            let mut s = self.0.lock();
            let b = s.bufs.get_mut(&id).unwrap();
            let v = b.version;
            b.copies.insert(HEAD, v);
        }

        fn kill(&self, r: i32) {
            self.0.lock().live.remove(&r);
        }

        /// Does some live rank (or the head) hold `a`?
        fn held(&self, a: Access) -> bool {
            let s = self.0.lock();
            s.bufs[&a.buffer].copies.iter().any(|(r, v)| *v == a.version && (*r == HEAD || s.live.contains(r)))
        }

        fn current(&self, id: u64) -> Access {
            Access { buffer: id, version: self.0.lock().bufs[&id].version }
        }

        /// What the handler does: recover, again with the larger set after a new failure.
        fn recover(&self, dead: &[i32], spares: &mut Spares) -> Result<Outcome, RecoverError> {
            let mut dead: BTreeSet<i32> = dead.iter().copied().collect();
            for &r in &dead {
                self.kill(r);
            }
            loop {
                match recover(self, &dead, Policy::default(), spares) {
                    Err(RecoverError::NewFailure(r)) => {
                        dead.insert(r);
                    }
                    other => return other,
                }
            }
        }
    }

    struct SimView<'a>(&'a State, &'a BTreeSet<Access>);

    impl View for SimView<'_> {
        fn available(&self, a: Access) -> bool {
            let s = self.0;
            a.version == 0
                || s.bufs.get(&a.buffer).is_some_and(|b| b.copies.iter().any(|(r, v)| *v == a.version && (*r == HEAD || s.live.contains(r))))
                || s.kept.contains(&a)
                || (s.ckpt.contains(&a) && !self.1.contains(&a))
        }
        fn describe(&self, a: Access) -> Option<String> {
            self.0.bufs.get(&a.buffer).filter(|b| !b.freed).map(|_| format!("buffer #{} version {}", a.buffer, a.version))
        }
        fn copies(&self, a: Access) -> String {
            format!("{:?}", self.0.bufs.get(&a.buffer).map(|b| &b.copies))
        }
        fn checkpoints_on(&self) -> bool {
            !self.0.ckpt.is_empty()
        }
    }

    /// The simulation answers recovery's questions about copies from its model (each buffer
    /// is 1 byte: placement then prefers the fewest copies to rescue).
    impl Copies for SimView<'_> {
        fn buffer(&self, id: u64) -> Option<(u64, u64)> {
            self.0.bufs.get(&id).filter(|b| !b.freed).map(|b| (1, b.version))
        }
        fn version_on(&self, id: u64, r: i32) -> Option<u64> {
            self.0.bufs.get(&id)?.copies.get(&r).copied().filter(|_| r == HEAD || self.0.live.contains(&r))
        }
        fn holders(&self, a: Access) -> Vec<i32> {
            let (s, Some(b)) = (self.0, self.0.bufs.get(&a.buffer)) else { return Vec::new() };
            b.copies.iter().filter(|&(r, &v)| v == a.version && (*r == HEAD || s.live.contains(r))).map(|(&r, _)| r).collect()
        }
        fn held_apart(&self, a: Access) -> bool {
            self.0.kept.contains(&a)
        }
        fn checkpointed(&self, a: Access) -> bool {
            self.0.ckpt.contains(&a) && !self.1.contains(&a)
        }
    }

    impl Primitives for Sim {
        fn fence_and_forget(&self, dead: &BTreeSet<i32>) -> Result<BTreeSet<Access>, RecoverError> {
            let mut s = self.0.lock();
            for b in s.bufs.values_mut() {
                b.copies.retain(|r, _| !dead.contains(r));
            }
            Ok(s.bufs.iter().filter(|(_, b)| !b.freed && b.version > 0 && !b.copies.values().any(|&v| v == b.version)).map(|(&id, b)| Access { buffer: id, version: b.version }).collect())
        }
        fn idle_spares(&self) -> Vec<i32> {
            let s = self.0.lock();
            s.spares.iter().copied().filter(|r| s.live.contains(r)).collect()
        }
        fn leave_spares(&self, r: i32, _replacing: Option<i32>) {
            self.0.lock().spares.remove(&r);
        }
        fn targets(&self) -> Result<Vec<i32>, RecoverError> {
            let mut s = self.0.lock();
            let t: Vec<i32> = s.live.iter().copied().filter(|r| !s.spares.contains(r)).collect();
            if t.is_empty() {
                s.on_head = true;
                return Ok(vec![HEAD]);
            }
            Ok(t)
        }
        fn unheld(&self) -> BTreeSet<Access> {
            let s = self.0.lock();
            s.bufs.iter().filter(|(_, b)| !b.freed && b.version > 0 && !b.copies.values().any(|&v| v == b.version)).map(|(&id, b)| Access { buffer: id, version: b.version }).collect()
        }
        fn with_view<R>(&self, bad: &BTreeSet<Access>, f: impl FnOnce(&TaskGraph, &dyn View) -> R) -> R {
            let s = self.0.lock();
            f(&s.graph, &SimView(&s, bad))
        }
        fn with_copies<R>(&self, bad: &BTreeSet<Access>, f: impl FnOnce(&dyn Copies) -> R) -> R {
            let s = self.0.lock();
            f(&SimView(&s, bad))
        }
        fn short_kernel_s(&self) -> f64 {
            50e-6
        }
        fn run_batch(&self, tasks: &[&TaskRecord], w: i32, rescue: &[Access]) -> Result<BatchDone, Stop> {
            let mut out = BatchDone::default();
            let mut s = self.0.lock();
            // Rescued copies are held apart on the head, as the device does.
            s.kept.extend(rescue.iter().copied());
            s.batches.push(tasks.len());
            for (k, t) in tasks.iter().enumerate() {
                if let Some((n, r)) = s.die_after {
                    if s.runs.len() >= n {
                        s.die_after = None;
                        s.live.remove(&r);
                        if r == w || k == 0 {
                            return Err(RecoverError::NewFailure(r).into());
                        }
                    }
                }
                for a in &t.reads {
                    if s.vanish == Some(*a) {
                        // Gone from wherever it was (an overwrite since the plan).
                        s.vanish = None;
                        s.bufs.get_mut(&a.buffer).unwrap().copies.retain(|_, v| *v != a.version);
                        return Err(Stop::Replan(*a));
                    }
                    let b = &s.bufs[&a.buffer];
                    if b.copies.get(&w) == Some(&a.version) {
                        continue;
                    }
                    assert_eq!(k, 0, "a chained task's inputs must be on its worker: task #{} {a:?} on {w}", t.id);
                    let from = b.copies.iter().find(|(r, v)| **v == a.version && (**r == HEAD || s.live.contains(r))).map(|(&r, _)| r);
                    match from {
                        Some(r) if r == HEAD && a.version > 1 => out.from_buddy_copies += 1,
                        Some(_) => out.from_live_copies += 1,
                        None if a.version == 0 => {}
                        None if s.kept.contains(a) => out.from_live_copies += 1,
                        None if s.ckpt.contains(a) => {
                            if s.damaged.contains(a) {
                                return Err(Stop::BadCheckpoint(*a, "checksum mismatch".into()));
                            }
                            out.from_checkpoints += 1;
                        }
                        None => return Err(Stop::Replan(*a)),
                    }
                    s.bufs.get_mut(&a.buffer).unwrap().copies.insert(w, a.version);
                }
                for a in &t.writes {
                    s.bufs.get_mut(&a.buffer).unwrap().copies.insert(w, a.version);
                }
                s.runs.push((t.id, w));
            }
            out.done = tasks.len();
            Ok(out)
        }
        fn restore(&self, a: Access) -> Result<Option<Restored>, Stop> {
            let mut s = self.0.lock();
            let live = s.live.clone();
            let b = s.bufs.get_mut(&a.buffer).unwrap();
            if b.copies.iter().any(|(r, v)| *v == a.version && (*r == HEAD || live.contains(r))) {
                return Ok(None);
            }
            b.copies.insert(HEAD, a.version);
            if s.kept.contains(&a) {
                return Ok(Some(Restored::Copy));
            }
            if s.damaged.contains(&a) {
                s.bufs.get_mut(&a.buffer).unwrap().copies.remove(&HEAD);
                return Err(Stop::BadCheckpoint(a, "checksum mismatch".into()));
            }
            Ok(Some(Restored::Checkpoint))
        }
        fn rerun_done(&self, _tasks: &[TaskRecord]) {}
        fn verbose(&self) -> bool {
            true
        }
        fn log(&self, _what: std::fmt::Arguments<'_>) {}
        fn warn(&self, what: std::fmt::Arguments<'_>) {
            self.0.lock().warned.push(what.to_string());
        }
    }

    #[test]
    fn a_long_in_place_chain_is_rebuilt_from_its_buddy_copy_in_chains() {
        let sim = Sim::new(3, 0);
        sim.host_data(1);
        sim.chain(1, 1, 900);
        sim.buddy(1);
        sim.chain(1, 1, 100);
        let want = sim.current(1);
        let out = sim.recover(&[1], &mut Spares::default()).unwrap();
        assert!(sim.held(want));
        assert_eq!(out.versions_lost, 1);
        assert_eq!(out.tasks_reexecuted, 100, "only the updates since the buddy copy");
        assert_eq!(out.from_buddy_copies, 1);
        // One chain per 256 tasks at most: 100 tasks, one batch.
        assert_eq!(sim.0.lock().batches, vec![100]);
        assert_eq!(out.plans, 1);
        // Without the buddy copy: the whole chain from the host data.
        let sim = Sim::new(3, 0);
        sim.host_data(1);
        sim.chain(1, 1, 1000);
        let out = sim.recover(&[1], &mut Spares::default()).unwrap();
        assert_eq!(out.tasks_reexecuted, 1000);
        assert_eq!(sim.0.lock().batches, vec![256, 256, 256, 232]);
    }

    #[test]
    fn re_runs_of_regions_that_ran_with_replicas_are_counted_apart() {
        // Worker 1 made A (its region had replicas, whose copies are gone) and then B from A;
        // both are lost with it and run again.
        let sim = Sim::new(3, 0);
        sim.host_data(1);
        sim.host_data(2);
        sim.task_with(1, &[(1, 1)], &[1], true);
        sim.task(1, &[(1, 2), (2, 1)], &[2]);
        let out = sim.recover(&[1], &mut Spares::default()).unwrap();
        assert_eq!((out.tasks_reexecuted, out.replicated_reexecuted), (2, 1));
    }

    #[test]
    fn a_source_that_dies_during_recovery_is_rebuilt_too() {
        // B (buffer 2) is made on worker 2 from host data; A (buffer 1) on worker 1 reads it.
        let sim = Sim::new(3, 0);
        sim.host_data(1);
        sim.host_data(2);
        sim.task(2, &[(2, 1)], &[2]);
        sim.task(1, &[(1, 1), (2, 2)], &[1]);
        let (a, b) = (sim.current(1), sim.current(2));
        // Worker 1 dies; recovery takes B from worker 2, which dies before the first re-run.
        sim.0.lock().die_after = Some((0, 2));
        let out = sim.recover(&[1], &mut Spares::default()).unwrap();
        assert!(sim.held(a) && sim.held(b));
        assert_eq!(out.tasks_reexecuted, 2, "B's producer runs again too");
        assert_eq!(out.survivors, vec![3]);
        assert!(sim.0.lock().runs.iter().all(|&(_, w)| w == 3));
    }

    #[test]
    fn a_buddy_pair_lost_together_comes_back_from_the_head() {
        let sim = Sim::new(3, 0);
        for id in 1..=4 {
            sim.host_data(id);
            sim.chain(1 + (id as i32) % 2, id, 50);
            sim.buddy(id);
            sim.chain(1 + (id as i32) % 2, id, 5);
        }
        let want: Vec<Access> = (1..=4).map(|id| sim.current(id)).collect();
        let out = sim.recover(&[1, 2], &mut Spares::default()).unwrap();
        assert!(want.iter().all(|&a| sim.held(a)));
        assert_eq!((out.versions_lost, out.tasks_reexecuted, out.from_buddy_copies), (4, 20, 4));
        assert_eq!(out.survivors, vec![3]);
    }

    #[test]
    fn with_only_the_head_left_it_reruns_everything_itself() {
        let sim = Sim::new(2, 0);
        sim.host_data(1);
        sim.host_data(2);
        sim.chain(1, 1, 10);
        sim.task(2, &[(1, 11), (2, 1)], &[2]);
        let want = [sim.current(1), sim.current(2)];
        let out = sim.recover(&[1, 2], &mut Spares::default()).unwrap();
        assert_eq!(out.survivors, vec![HEAD]);
        assert!(sim.0.lock().on_head);
        assert!(want.iter().all(|&a| sim.held(a)));
        assert_eq!(out.tasks_reexecuted, 11);
        assert!(sim.0.lock().batches.iter().all(|&n| n == 1), "no chains on the head");
    }

    #[test]
    fn a_damaged_checkpoint_is_planned_around() {
        let sim = Sim::new(2, 0);
        sim.host_data(1);
        sim.chain(1, 1, 8);
        let want = sim.current(1);
        {
            let mut s = sim.0.lock();
            s.ckpt.insert(Access { buffer: 1, version: 5 });
            s.damaged.insert(Access { buffer: 1, version: 5 });
        }
        let out = sim.recover(&[1], &mut Spares::default()).unwrap();
        assert!(sim.held(want));
        assert_eq!(out.plans, 2);
        assert_eq!(out.tasks_reexecuted, 8, "the whole chain, once the checkpoint is known damaged");
        assert_eq!(sim.0.lock().warned.len(), 1, "{:?}", sim.0.lock().warned);
        // A sound checkpoint cuts the chain.
        let sim = Sim::new(2, 0);
        sim.host_data(1);
        sim.chain(1, 1, 8);
        sim.0.lock().ckpt.insert(Access { buffer: 1, version: 5 });
        let out = sim.recover(&[1], &mut Spares::default()).unwrap();
        assert_eq!((out.tasks_reexecuted, out.from_checkpoints, out.plans), (4, 1, 1));
    }

    /// A version whose checkpoint turned out damaged is rebuilt on a worker; that copy is then
    /// its only one, and a later re-run that would overwrite it (rewriting it in place while
    /// another task still reads it) must rescue it or go elsewhere, not count on the damaged
    /// checkpoint.
    #[test]
    fn a_version_whose_checkpoint_is_damaged_is_not_overwritten_once_rebuilt() {
        let sim = Sim::new(3, 0);
        sim.host_data(1);
        sim.host_data(3);
        sim.task(1, &[(1, 1)], &[1]); // A v1 -> v2
        sim.task(1, &[(1, 2)], &[1]); // A v2 -> v3, in place
        sim.task(1, &[(1, 2)], &[3]); // reads A v2 after it was rewritten: C v1 -> v2
        {
            let mut s = sim.0.lock();
            s.ckpt.insert(Access { buffer: 1, version: 2 });
            s.damaged.insert(Access { buffer: 1, version: 2 });
        }
        let want = [sim.current(1), sim.current(3)];
        let out = sim.recover(&[1], &mut Spares::default()).unwrap();
        assert!(want.iter().all(|&a| sim.held(a)), "{:?}", sim.0.lock().runs);
        assert_eq!(out.tasks_reexecuted, 3);
    }

    #[test]
    fn a_vanished_source_makes_a_new_plan_and_a_lost_one_is_fatal() {
        let sim = Sim::new(3, 0);
        sim.host_data(1);
        sim.task(2, &[(1, 1)], &[1]);
        sim.chain(1, 1, 3);
        sim.0.lock().vanish = Some(Access { buffer: 1, version: 2 });
        let want = sim.current(1);
        let out = sim.recover(&[1], &mut Spares::default()).unwrap();
        assert!(sim.held(want));
        assert_eq!(out.plans, 2);
        // Host data the head did not keep: nothing gives it back.
        let sim = Sim::new(2, 0);
        sim.host_data(1);
        sim.chain(1, 1, 3);
        sim.0.lock().bufs.get_mut(&1).unwrap().copies.remove(&HEAD);
        let e = sim.recover(&[1], &mut Spares::default()).unwrap_err();
        let RecoverError::Fatal(msg) = e else { panic!("{e:?}") };
        assert!(msg.contains("buffer #1 version 1") && msg.contains("cannot be rebuilt") && msg.contains("checkpoints are off"), "{msg}");
        // A task to re-run whose input buffer was freed.
        let sim = Sim::new(2, 0);
        sim.host_data(1);
        sim.host_data(2);
        sim.task(1, &[(1, 1), (2, 1)], &[1]);
        sim.0.lock().bufs.get_mut(&2).unwrap().freed = true;
        let RecoverError::Fatal(msg) = sim.recover(&[1], &mut Spares::default()).unwrap_err() else { panic!() };
        assert!(msg.contains("which no longer exists"), "{msg}");
    }

    #[test]
    fn spares_take_the_place_of_dead_workers_once() {
        // Workers 1, 2 run regions; 3 and 4 are spares.
        let sim = Sim::new(4, 2);
        sim.host_data(1);
        sim.chain(1, 1, 4);
        let mut spares = Spares::default();
        let out = sim.recover(&[1], &mut spares).unwrap();
        assert_eq!(out.spares, vec![(3, 1)]);
        assert_eq!(out.survivors, vec![2, 3]);
        assert!(sim.held(sim.current(1)));
        // A spare dying idle takes no other spare; the next failure of a worker takes the last.
        let out = sim.recover(&[1, 4], &mut spares).unwrap();
        assert!(out.spares.is_empty());
        assert_eq!(out.survivors, vec![2, 3]);
        let out = sim.recover(&[1, 2, 4], &mut spares).unwrap();
        assert!(out.spares.is_empty(), "no spare left");
        assert_eq!(out.survivors, vec![3]);
    }
}
