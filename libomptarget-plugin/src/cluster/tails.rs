//! Tails: the replicas of a region still running when the region went on with another
//! replica's result (`OMPCLUSTER_FT_REPLICAS=k` without voting: the first result is enough;
//! with voting on three: two that agree). The launch returns at that result; the thread
//! `ompc-ft-replicas` ([`Collector`]) awaits the tails' replies and settles each: its copies of
//! the versions the result made become holders if it wrote the same bytes from the same
//! versions (a failure of the first worker then costs no re-run), else they are forgotten, as
//! any replica's that lost (with voting, it lost a vote).
//!
//! Design note (threads and locks).
//! * A launch hands its tails over ([`Collector::hand_over`]) while it holds the gate's read
//!   side, and waits until the collector holds a read side for them too
//!   (`Handler::enter_beside`, which never waits: a reader holds the gate). So a recovery, a
//!   checkpoint or the job's end (`Handler::wait_quiet`, in `Cluster::shutdown`) waits for the
//!   tails as for the regions in flight: the *drain* is the gate. Each tail's wait is bounded by
//!   the failure detector (a dead worker's tail ends with `PeerDead`, nothing recorded).
//! * A tail's copies of what the region may write (and what the result changed) stop holding
//!   any version when the result is recorded (the launch drops them under the lock that records
//!   it: the tail changes them in place); it keeps its marks (`Buffer::replica_on`, `using`,
//!   `Offload::start_running`), so other regions share those copies only as they would share a
//!   running replica's (`Buffer::shareable_on`) until it is settled, and placement counts it
//!   as load.
//! * Its reply ends its `running` marks at once (a merge may wait for them); everything else
//!   waits for the launch's [`Outcome`]: the versions recorded. A launch that records nothing
//!   (it failed, or runs again) drops the sender: its tails are settled as losers.
//! * The collector takes the `buffers` lock only (innermost of the gate), never waits for a
//!   launch while holding it, and polls the replies every [`POLL`] while it has tails (it is
//!   idle, blocked on its channel, otherwise).

use super::durability::Durability;
use super::ledger::Ledger;
use super::link::Link;
use super::merge::Snap;
use super::memory::Memory;
use super::meter::Meter;
use super::offload::{Kernel, Offload};
use super::replicas::{Ballot, Decided, Replicator, SetRun, REPLICAS_REPLIES};
use super::tolerance::Tolerance;
use super::Stopped;
use crate::config::Config;
use crate::inject::Injector;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use parking_lot::RwLockReadGuard;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// How often the collector tests the replies of the tails it has.
const POLL: Duration = Duration::from_millis(1);

/// The way to the collector, once it runs.
#[derive(Default)]
pub(super) struct Tails {
    tx: OnceLock<Sender<Job>>,
}

impl Tails {
    /// Whether a launch may leave tails (the collector runs).
    pub(super) fn running(&self) -> bool {
        self.tx.get().is_some()
    }
}

/// What the result taken was, once recorded: its ballot, the versions it started from, the
/// versions it made exactly from them (region index in the reach, version), and the blocks
/// that became buffers (start, span).
pub(super) struct Outcome {
    pub(super) ballot: Ballot,
    /// The workers whose result it is (the one taken, and those that agreed).
    pub(super) majority: Vec<i32>,
    pub(super) snaps: Vec<Snap>,
    pub(super) made: Vec<(usize, u64)>,
    pub(super) blocks: Vec<(u64, u64)>,
}

/// The tails of one region.
struct Job {
    kernel: Arc<Kernel>,
    /// Its replicas are voted on: a tail that wrote something else lost a vote.
    vote: bool,
    reach: Vec<(u64, u64, u64, u64)>,
    marked: Vec<bool>,
    runs: Vec<SetRun>,
    outcome: Receiver<Outcome>,
    entered: Sender<()>,
}

view! {
    /// The collector: settling a tail undoes and installs copies and deletes blocks
    /// (through [`Replicator`]): it borrows the whole cluster.
    pub(super) struct Collector { link: Link, ledger: Ledger, offload: Offload, tolerance: Tolerance, durability: Durability, meter: Meter, cfg: Config, stopped: Stopped }
    also { tolerance.inject: Injector }
}

impl Collector<'static> {
    /// Start the thread `ompc-ft-replicas` (with replicas, from `Cluster::start_handler`).
    pub(super) fn start(self) -> std::io::Result<()> {
        let (tx, rx) = crossbeam_channel::unbounded();
        std::thread::Builder::new().name("ompc-ft-replicas".into()).spawn(move || self.collect(rx))?;
        let _ = self.offload.tails.tx.set(tx);
        Ok(())
    }

    fn collect(self, rx: Receiver<Job>) {
        use watchdog::State;
        let beat = watchdog::global().beat("ompc-ft-replicas", "replicas left running");
        // Its own: the waits it reaches inside other code (the buffer table's lock, MPI) mark it.
        beat.own();
        let mut jobs: Vec<(Job, RwLockReadGuard<'static, ()>)> = Vec::new();
        loop {
            let next = if jobs.is_empty() {
                beat.set(State::Idle, "waiting for replicas left running");
                rx.recv().map_err(|_| RecvTimeoutError::Disconnected)
            } else {
                beat.set(State::Running, "testing the replies of replicas left running");
                rx.recv_timeout(POLL)
            };
            match next {
                Ok(job) => {
                    // (Running: a launch waits for this step, so a stop here is a stall.)
                    beat.set(State::Running, "taking over a region's replicas left running");
                    // The launch handing it over holds the gate: this never waits.
                    let guard = self.tolerance.ft.enter_beside();
                    let _ = job.entered.send(());
                    jobs.push((job, guard));
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            for (job, _) in &mut jobs {
                self.poll(job);
            }
            let mut i = 0;
            while i < jobs.len() {
                let job = &jobs[i].0;
                let outcome = if job.runs.iter().any(|r| r.pending.is_some()) {
                    None
                } else {
                    match job.outcome.try_recv() {
                        Ok(o) => Some(Some(o)),
                        Err(TryRecvError::Disconnected) => Some(None),
                        Err(TryRecvError::Empty) => None,
                    }
                };
                match outcome {
                    Some(o) => {
                        let (job, _guard) = jobs.swap_remove(i);
                        self.settle(job, o);
                    }
                    None => i += 1,
                }
            }
        }
    }
}

impl<'a> Collector<'a> {
    /// Hand the tails `runs` of a region over `reach` (`marked`: what it may write) to the
    /// collector; returns where to send the [`Outcome`] once the result taken is recorded.
    /// Without a collector (it ended), they are awaited and settled here, as losers.
    pub(super) fn hand_over(&self, kernel: &Arc<Kernel>, reach: &[(u64, u64, u64, u64)], marked: &[bool], runs: Vec<SetRun>) -> Option<Sender<Outcome>> {
        self.meter.stats.replicas.tails.fetch_add(runs.len() as u64, Ordering::Relaxed);
        let (entered, was_entered) = crossbeam_channel::bounded(1);
        let (tell, outcome) = crossbeam_channel::bounded(1);
        let vote = self.cfg.votes_on(&kernel.name);
        let job = Job { kernel: kernel.clone(), vote, reach: reach.to_vec(), marked: marked.to_vec(), runs, outcome, entered };
        let mut job = match self.offload.tails.tx.get() {
            Some(tx) => match tx.send(job) {
                // (A collector that panicked with it dropped it, its marks with it.)
                Ok(()) => return watchdog::waiting("the replicas' collector", || was_entered.recv()).ok().map(|()| tell),
                Err(e) => e.into_inner(),
            },
            None => job,
        };
        // Only the pauses between tests are marked: a thread stuck in the loop is seen.
        while job.runs.iter().any(|r| r.pending.is_some()) {
            self.poll(&mut job);
            watchdog::waiting(REPLICAS_REPLIES, || std::thread::sleep(POLL));
        }
        self.settle(job, None);
        None
    }

    /// Test each tail of `job` still running once; a reply (or its worker's death) ends its
    /// kernel's run on its copies.
    fn poll(&self, job: &mut Job) {
        let replicator = Replicator::of(*self);
        for r in job.runs.iter_mut() {
            let Some((p, recv)) = r.pending.as_mut() else { continue };
            let Some(ran) = super::execute::Executor::of(*self).test_reply(p, recv) else { continue };
            r.pending = None;
            r.ran = ran;
            replicator.end_tail(&mut self.ledger.buffers.lock(), &job.reach, r);
            self.ledger.moved.notify_all();
        }
    }

    /// Settle tails that all replied: those that wrote what the result `outcome` wrote, from
    /// the versions it started from, hold the versions it made (and its blocks); the others
    /// (all, if nothing was recorded) are forgotten, and with voting, one that answered
    /// something else than the majority taken lost a vote.
    fn settle(&self, job: Job, outcome: Option<Outcome>) {
        let Job { kernel, vote, reach, marked, runs, .. } = job;
        let stats = &self.meter.stats.replicas;
        let replicator = Replicator::of(*self);
        // The result taken, if voted on (tails with voting are left only beside two that agree).
        let decided = outcome.as_ref().filter(|_| vote).map(|o| Decided { kernel: &kernel, ballot: &o.ballot, majority: &o.majority });
        for r in runs {
            if let Ok(e) = &r.ran {
                stats.replica_ns.fetch_add((e.seconds * 1e9) as u64, Ordering::Relaxed);
            }
            let agrees = match (&outcome, &r.ran) {
                (Some(o), Ok(e)) => Ballot::of(e, &reach) == o.ballot,
                _ => false,
            };
            match (&outcome, agrees) {
                (Some(o), true) => {
                    let w = r.w;
                    let mut agree = [r];
                    let mut bufs = self.ledger.buffers.lock();
                    // The region's record dropped the tail's copies (`launch.rs`): one that a
                    // rank holds or is sent a version into since was written by something else
                    // (a device-to-device copy into it: `Memory::copy_once` takes any holder
                    // as its destination), and holds none of the versions the tail made.
                    let overwritten: Vec<bool> = o.made.iter().map(|&(i, _)| bufs.get(reach[i].0).is_some_and(|b| b.holders.contains(&w) || b.stale.contains_key(&w) || b.incoming.contains(&w))).collect();
                    replicator.settle_agreeing(&mut bufs, &reach, &mut agree);
                    let mut kept = replicator.install_blocks(&mut bufs, &o.blocks, &agree);
                    for (&(i, v), _) in o.made.iter().zip(&overwritten).filter(|(_, over)| !**over) {
                        kept += replicator.install(&mut bufs, i, reach[i].0, v, &o.snaps, &agree);
                    }
                    drop(bufs);
                    if kept > 0 {
                        stats.tails_kept.fetch_add(1, Ordering::Relaxed);
                    }
                }
                // Its unexpected change to a copy another region's kernel used meanwhile may
                // be that one's write (`SetRun::void`): it loses no vote, as in the tally.
                (Some(_), false) if vote && r.void(&marked) => {
                    stats.ballots_voided.fetch_add(1, Ordering::Relaxed);
                    self.meter.log(format_args!("VOID ballot of tail {} for {}: it changed a copy another region used meanwhile", r.w, kernel.name));
                    replicator.settle_other(&reach, &marked, r, decided.as_ref());
                }
                (Some(o), false) if vote && r.ran.is_ok() => {
                    replicator.lost_votes(&kernel.name, o.majority.clone(), vec![r.w], "what it wrote");
                    stats.corrections.fetch_add(1, Ordering::Relaxed);
                    replicator.settle_other(&reach, &marked, r, decided.as_ref());
                }
                _ => replicator.settle_other(&reach, &marked, r, decided.as_ref()),
            }
            self.ledger.moved.notify_all();
        }
        replicator.name_blamed();
        // Buffers the program deleted while the tails used them go now (as a launch's do).
        if let Err(e) = Memory::of(*self).finish_deletes(reach.iter().map(|r| r.0).collect()) {
            self.meter.log(format_args!("TAIL could not finish a delete: {e}"));
        }
    }
}
