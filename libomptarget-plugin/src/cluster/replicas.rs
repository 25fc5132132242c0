//! Replicas of a region (`OMPCLUSTER_FT_REPLICAS=k`) and the vote over their results
//! (`OMPCLUSTER_FT_VOTE=1`): the pure part, [`tally`]. The launch itself is `launch.rs`
//! (`Launcher::launch_once`, `Launcher::run_set`); the design is `docs/recovery.md`,
//! "Replicas and voting".
//!
//! A replicated region is one launch: placed on k workers under the `buffers` lock, its inputs
//! moved to each, k EXECUTEs posted, every reply awaited (each wait bounded by the failure
//! detector, as every wait on a worker is), then one result is taken. Each replica's worker
//! digests what it changed (`Event::Execute::digest`), so the head knows which replicas wrote
//! the same bytes: their copies become holders of the versions the region made, so that the
//! loss of the worker whose result was taken costs no re-run. A replica whose result differs
//! is never a holder. With voting, a result counts only when a majority of the replicas
//! agree on it.

use super::durability::Durability;
use super::execute::{Execute, Executed, Executor, Posted};
use super::failures::Failures;
use super::launch::{regions_of, Launcher};
use super::ledger::Ledger;
use super::link::Link;
use super::merge::{Merger, Run, Snap};
use super::meter::Meter;
use super::offload::{Kernel, Offload, SHORT_KERNEL_NS};
use super::tolerance::Tolerance;
use super::{ClusterError, Result, Stopped};
use crate::config::Config;
use crate::data::{Blame, Buffers, Suspect};
use crate::inject::Injector;
use event_system::comm::PostedRecv;
use event_system::protocol::{Allocated, Event, Region};
use scheduler::Candidate;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

view! {
    /// Running a region's replicas and taking one result: borrows the whole cluster, as a
    /// launch does (it moves inputs, runs kernels, undoes changes, and reports a worker that
    /// lost too many votes as failed).
    pub(super) struct Replicator { link: Link, ledger: Ledger, offload: Offload, tolerance: Tolerance, durability: Durability, meter: Meter, cfg: Config, stopped: Stopped }
    also { tolerance.inject: Injector }
}

/// One replica's run: its worker, what its copies were when it started (empty: it never
/// started), and its result.
pub(super) struct SetRun {
    pub(super) w: i32,
    pub(super) snaps: Vec<Snap>,
    pub(super) ran: Result<Executed>,
    /// It no longer counts as running on its copies (`Launcher::ended`, once).
    ended: bool,
    /// Its kernel replied (`Launcher::replied`): it changes its copies no more.
    replied: bool,
    /// Its reply is still to come (a tail: the region went on with another replica's result,
    /// `tails.rs`): the EXECUTE and the receive posted for its reply.
    pub(super) pending: Option<(Posted, PostedRecv)>,
}

impl SetRun {
    /// With voting, its ballot is void when a change it was not expected to make (`marked`:
    /// what it may write) is to a copy another region's kernel could use during the run
    /// (`Snap::shared`): that one's write may be in it. It is left out of the tally and
    /// loses no vote then; once every kernel that used the copy ended, its worker loses one
    /// if nothing but the worker can have written the copy (`Replicator::settle_other`).
    pub(super) fn void(&self, marked: &[bool]) -> bool {
        self.ran.as_ref().is_ok_and(|e| e.changed.iter().zip(marked).zip(&self.snaps).any(|((&c, &m), s)| c && !m && s.shared))
    }

    /// Which regions it changed: as reported; if it failed after it started, every region
    /// it may write (`marked`); none if it never started.
    fn changed(&self, marked: &[bool]) -> Vec<bool> {
        match &self.ran {
            Ok(e) => e.changed.clone(),
            Err(_) if self.snaps.is_empty() => vec![false; marked.len()],
            Err(_) => marked.to_vec(),
        }
    }
}

/// What a thread awaiting replicas' replies waits for, for the watchdog.
pub(super) const REPLICAS_REPLIES: &str = "the replies of a region's replicas";

/// How long the other replicas of a region may still take once one replied, its kernel having
/// run `seconds`: a quarter of that, from 1 to 50 ms. Those that take longer are tails.
fn tail_grace(seconds: f64) -> Duration {
    Duration::from_secs_f64((seconds / 4.0).clamp(0.001, 0.05))
}

/// `reach` with the versions a run started from.
fn with_versions(reach: &[(u64, u64, u64, u64)], snaps: &[Snap]) -> Vec<(u64, u64, u64, u64)> {
    reach.iter().zip(snaps).map(|(&(a, s, id, _), sn)| (a, s, id, sn.version)).collect()
}

/// The result a region took by a vote, for the runs it did not take
/// ([`Replicator::settle_other`]): its kernel, its ballot and the workers whose result it is.
pub(super) struct Decided<'a> {
    pub(super) kernel: &'a Kernel,
    pub(super) ballot: &'a Ballot,
    pub(super) majority: &'a [i32],
}

/// The result a launch takes from its replicas: the run taken (its worker, its snaps and
/// its result), the replicas whose results agree with it (see [`Replicator::install`]), and
/// those still running (tails, for the collector: `tails.rs`).
pub(super) type Taken = (i32, Vec<Snap>, Result<Executed>, Vec<SetRun>, Vec<SetRun>);

impl<'a> Replicator<'a> {
    /// Up to `n` workers from `pool` for replicas of a region placed on `w`: each the
    /// scheduler's choice among those on a host not used yet, or among all left if none is.
    /// Called under the `buffers` lock.
    pub(super) fn pick(&self, w: i32, mut pool: Vec<Candidate>, n: usize) -> Vec<i32> {
        let host = |r: i32| self.link.process(r).map(|p| p.0);
        let mut hosts = vec![host(w)];
        let mut picked = Vec::with_capacity(n);
        while picked.len() < n {
            let elsewhere: Vec<Candidate> = pool.iter().copied().filter(|c| !hosts.contains(&host(c.rank))).collect();
            let Some(r) = self.offload.sched.choose(if elsewhere.is_empty() { &pool } else { &elsewhere }) else { break };
            picked.push(r);
            hosts.push(host(r));
            pool.retain(|c| c.rank != r);
        }
        picked
    }

    /// Run the kernel on every worker of `set` (placed, marked and counted running by the
    /// launch): every replica's inputs are moved first, then the EXECUTEs are posted, the
    /// first-placed one first, then every reply is awaited. Moves come first because a replica
    /// changes its copies in place: a copy moved from a worker whose replica already runs
    /// would hold part of its changes. A replica whose copy was taken from a copy some other
    /// kernel could reach meanwhile (`Buffer::torn`) of a buffer it may write does not run: it
    /// could start from other bytes; with voting none runs then, and the launch places the
    /// region again ([`ClusterError::RunAgain`]). Only the first-placed one sends bytes back.
    /// Device code of every replica allocates in `arena` (`Offload::grant`), if given.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn run_set(
        &self,
        set: &[i32],
        kernel: &Kernel,
        args: &[u64],
        reach: &[(u64, u64, u64, u64)],
        marked: &[bool],
        assume_written: &[bool],
        send_back: Vec<bool>,
        arena: Option<Region>,
        tiebreak: bool,
    ) -> Vec<SetRun> {
        let launcher = Launcher::of(*self);
        let exec = Executor::of(*self);
        let short = kernel.last_ns.load(Ordering::Relaxed) < SHORT_KERNEL_NS;
        // Kernel changes of each buffer so far, per rank (see `torn` below).
        let changes: Vec<BTreeMap<i32, u64>> = {
            let bufs = self.ledger.buffers.lock();
            reach.iter().map(|(a, ..)| bufs.get(*a).map_or_else(BTreeMap::new, |b| b.kernel_changes.clone())).collect()
        };
        // Inputs moved to each in turn, then all started at once (`Launcher::start_set`).
        let moved: Vec<Result<()>> = set.iter().map(|&r| launcher.move_inputs(r, reach)).collect();
        let ready: Vec<i32> = set.iter().zip(&moved).filter(|(_, m)| m.is_ok()).map(|(&r, _)| r).collect();
        let mut started = launcher.start_set(&ready, reach).into_iter();
        let mut runs: Vec<SetRun> = set
            .iter()
            .zip(moved)
            .map(|(&r, m)| {
                let (snaps, ran) = match m.and_then(|()| started.next().expect("one per ready worker")) {
                    Ok(snaps) => (snaps, Ok(Executed::default())),
                    Err(e) => (Vec::new(), Err(e)),
                };
                SetRun { w: r, snaps, ran, ended: false, replied: false, pending: None }
            })
            .collect();
        {
            let mut bufs = self.ledger.buffers.lock();
            // A copy of a buffer it may write taken while a kernel could reach the source
            // (`Buffer::torn`) is exact if no kernel changed the source's copy since the moves
            // began: no member runs yet, and no other region writes a buffer a replicated
            // region may write (`Buffer::replicated`); those still running there read it. A
            // change elsewhere (an earlier region's replica settling on its own copy) is not
            // in the source's bytes. Nor does a copy forgotten since it started (a kernel
            // changed the copy it was taken from, `Buffers::kernel_done`).
            let torn = |bufs: &Buffers, r: &SetRun| {
                reach.iter().zip(marked).zip(&changes).zip(&r.snaps).find_map(|((((a, ..), &m), c), snap)| {
                    let b = bufs.get(*a).filter(|_| m)?;
                    if snap.version > 0 && b.version_on(r.w) != Some(snap.version) {
                        return Some(*a);
                    }
                    let &src = b.torn.get(&r.w)?;
                    (b.changes_on(src) != c.get(&src).copied().unwrap_or(0)).then_some(*a)
                })
            };
            let unready = runs.iter().find_map(|r| match &r.ran {
                Ok(_) => torn(&bufs, r),
                Err(ClusterError::RunAgain(e)) => match **e {
                    ClusterError::Unplaced(a) => Some(a),
                    _ => None,
                },
                Err(_) => None,
            });
            for (i, run) in runs.iter_mut().enumerate() {
                let skip = match unready {
                    // Voting: no replica runs unless all can.
                    Some(a) if self.cfg.votes_on(&kernel.name) => Some(a),
                    _ if i == 0 => None,
                    _ => torn(&bufs, run),
                };
                if let (Some(a), true) = (skip, run.ran.is_ok()) {
                    self.meter.log(format_args!("UNREPLICATED {} on {}: its copy of {a:#x} may hold part of another kernel's change", kernel.name, run.w));
                    self.end(&mut bufs, reach, run);
                    run.snaps.clear();
                    run.ran = Err(ClusterError::RunAgain(Box::new(ClusterError::Unplaced(a))));
                }
            }
            // A copy taken from a member's copy before any member ran is that member's
            // version: it stays a copy of it whatever the member's kernel does next. Not if
            // that member's copy was itself taken from a copy in use elsewhere (a kernel
            // there may still change it, and then both are forgotten): until no entry goes.
            let mut gone = true;
            while gone {
                gone = false;
                for run in runs.iter().filter(|r| r.ran.is_ok()) {
                    for (a, ..) in reach {
                        if let Some(b) = bufs.get_mut(*a).filter(|b| b.torn.get(&run.w).is_some_and(|s| set.contains(s) && !b.torn.contains_key(s))) {
                            b.torn.remove(&run.w);
                            gone = true;
                        }
                    }
                }
            }
        }
        self.ledger.moved.notify_all();
        let mut posted = Vec::with_capacity(set.len());
        for (i, run) in runs.iter().enumerate() {
            let back = if i == 0 { send_back.clone() } else { vec![false; reach.len()] };
            posted.push(run.ran.as_ref().ok().map(|_| {
                let ex = Execute {
                    image: kernel.image,
                    kernel: kernel.index,
                    args,
                    regions: regions_of(reach),
                    assume_written: assume_written.to_vec(),
                    send_back: back,
                    replay: Vec::new(),
                    short,
                    quiet: false,
                    digest: true,
                    arena,
                };
                exec.post_execute(run.w, ex)
            }));
        }
        // Without voting, the first result is enough; with voting on three replicas, two that
        // agree (a majority whatever the third writes). The replies are awaited together and
        // the replicas still running then are tails, settled by the collector (`tails.rs`);
        // unless their blocks share a range of the head's arena (it is given back once every
        // replica's blocks are known), or this is the run again of a split (its ballots name
        // the losers of the split's).
        let vote = self.cfg.votes_on(&kernel.name);
        let go_on = arena.is_none() && !tiebreak && self.offload.tails.running() && (!vote || set.len() == 3);
        // The runs that answered, and whether they decide the region.
        let mut answered: Vec<(usize, Ballot)> = Vec::new();
        let decided = |answered: &[(usize, Ballot)]| match vote {
            false => !answered.is_empty(),
            true => answered.iter().enumerate().any(|(i, (_, a))| answered[i + 1..].iter().any(|(_, b)| a == b)),
        };
        let mut waiting: Vec<(usize, Posted, PostedRecv)> = Vec::new();
        for (i, (run, p)) in runs.iter_mut().zip(posted).enumerate() {
            let Some(p) = p else { continue };
            if !go_on {
                run.ran = p.and_then(|p| exec.await_quiet(p));
                if run.ran.is_ok() {
                    self.replied(&mut self.ledger.buffers.lock(), reach, run);
                }
            } else {
                match p.and_then(|p| exec.post_reply(&p).map(|r| (p, r))) {
                    Ok((p, r)) => waiting.push((i, p, r)),
                    Err(e) => run.ran = Err(e),
                }
            }
            if run.ran.is_err() {
                self.end(&mut self.ledger.buffers.lock(), reach, run);
                self.ledger.moved.notify_all();
            }
        }
        // Once the region is decided, the others get a grace to come too (replicas on equal
        // workers end within it): those that do are settled with the result taken, so that
        // the next region finds their workers free for its own replicas.
        let mut backoff = event_system::Backoff::for_wait();
        let mut until: Option<Instant> = None;
        // A wait on the workers, each bounded by the failure detector (`test_reply`): only the
        // pauses between tests are marked, so that a thread stuck in the loop is seen.
        while !waiting.is_empty() && until.is_none_or(|u| Instant::now() < u) {
            let got = waiting.iter_mut().enumerate().find_map(|(j, (_, p, recv))| exec.test_reply(p, recv).map(|ran| (j, ran)));
            let Some((j, ran)) = got else {
                watchdog::waiting(REPLICAS_REPLIES, || backoff.snooze());
                continue;
            };
            let (i, ..) = waiting.swap_remove(j);
            let run = &mut runs[i];
            run.ran = ran;
            if run.ran.is_ok() {
                self.replied(&mut self.ledger.buffers.lock(), reach, run);
            }
            match &run.ran {
                Ok(_) if vote && run.void(marked) => {}
                Ok(e) => {
                    answered.push((i, Ballot::of(e, reach)));
                    if decided(&answered) {
                        until.get_or_insert_with(|| Instant::now() + tail_grace(e.seconds));
                    }
                }
                Err(_) => {
                    self.end(&mut self.ledger.buffers.lock(), reach, run);
                    self.ledger.moved.notify_all();
                }
            }
        }
        for (i, p, r) in waiting {
            runs[i].pending = Some((p, r));
        }
        runs
    }

    /// Take one result of `runs` (in placement order) by [`tally`]; print what it printed.
    /// Every run but the one taken and those that agree with it is settled here: what it
    /// changed is forgotten, and it no longer counts as running. With no majority, the
    /// first-placed run's changes are undone too and the result is
    /// [`ClusterError::RunAgain`] (the launch runs the region again, on three replicas), or,
    /// if the versions it started from are nowhere else or this was that run again
    /// (`tiebreak`: the ballots of the split before), [`ClusterError::NoAgreement`], which ends
    /// the program: never a result no majority gave.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn take_result(&self, kernel: &Kernel, reach: &[(u64, u64, u64, u64)], marked: &[bool], runs: Vec<SetRun>, tiebreak: Option<&[(i32, Ballot)]>, arena: Option<Region>) -> Taken {
        let stats = &self.meter.stats.replicas;
        // Runs that started (a set placed again before any ran counts for nothing).
        let started = runs.iter().filter(|r| r.ran.is_ok() || !r.snaps.is_empty()).count() as u64;
        if started > 0 {
            stats.extra_runs.fetch_add(started - 1, Ordering::Relaxed);
        }
        let vote = self.cfg.votes_on(&kernel.name);
        let void = |r: &SetRun| vote && r.void(marked);
        let ballots: Vec<Option<Ballot>> = runs.iter().map(|r| r.ran.as_ref().ok().filter(|_| r.pending.is_none() && !void(r)).map(|e| Ballot::of(e, reach))).collect();
        let voided: Vec<usize> = (0..runs.len()).filter(|&i| runs[i].pending.is_none() && void(&runs[i])).collect();
        stats.ballots_voided.fetch_add(voided.len() as u64, Ordering::Relaxed);
        stats.shared_runs.fetch_add(runs.iter().filter(|r| r.snaps.iter().any(|s| s.shared)).count() as u64, Ordering::Relaxed);
        if !voided.is_empty() {
            let ranks: Vec<i32> = voided.iter().map(|&i| runs[i].w).collect();
            self.meter.log(format_args!("VOID ballots of {ranks:?} for {}: they changed a copy another region used meanwhile", kernel.name));
        }
        // Kernel time of the runs other than the one taken (the first, unless one is taken).
        let replica_ns = |taken: usize| -> u64 {
            runs.iter().enumerate().filter(|(i, _)| *i != taken).filter_map(|(_, r)| r.ran.as_ref().ok()).map(|e| (e.seconds * 1e9) as u64).sum()
        };
        // Replicas of a kernel that allocates device memory allocate in one range of the
        // head's arena (`arena`), so the same calls give the same pointers and their results
        // compare as any other (their ballots carry the blocks and their digests). A replica
        // that allocated elsewhere (no range was given, or it ran out of it) holds pointers
        // the others do not: their results cannot be compared, the first is taken, unvoted,
        // and the others are forgotten. A kernel that wrote a buffer it was not expected to
        // write (not marked, README "Placement"): without voting, the same; with voting, the
        // ballots are compared all the same (they carry which regions each changed and their
        // digests), so that a bit flipped into a region the kernel only reads is outvoted
        // rather than taken (seen: `ft_stencil.c`, k = 3, a flip taken unvoted), unless it hit
        // a copy shared while it ran (`SetRun::void`: named later, if at all). A replica
        // shares only copies whose version is held elsewhere too (`Buffer::shareable_on`), so
        // forgetting a loser's loses nothing, but a version another region recorded from the
        // copy meanwhile (it is kept: `not_recorded_meanwhile`).
        let in_arena = |a: &Allocated| arena.is_some_and(|g| g.holds(a.region.addr, a.span));
        let elsewhere = runs.iter().any(|r| r.ran.as_ref().is_ok_and(|e| !e.allocated.iter().all(in_arena)));
        let unexpected = runs.iter().any(|r| r.ran.as_ref().is_ok_and(|e| e.changed.iter().zip(marked).any(|(&c, &m)| c && !m)));
        for e in runs.iter().filter_map(|r| r.ran.as_ref().ok()).filter(|e| !e.allocated.is_empty() || !e.freed.is_empty()) {
            kernel.learn_allocates(e.allocated.iter().map(|a| (a.region.addr, a.span)));
        }
        if elsewhere && vote {
            kernel.tell_unvotable_allocation();
        }
        if vote && tiebreak.is_none() && runs[0].ran.is_ok() && ((!voided.is_empty() && ballots.iter().flatten().count() < 2) || matches!(tally(&ballots, vote), Verdict::Split)) {
            // It may run again (below: a split, or voided ballots) if its first run can be
            // undone: once no other kernel executes on the copies it changed (other regions
            // share the copies it only reads; kernels, not decisions, are waited for).
            let changed = runs[0].changed(marked);
            let w = runs[0].w;
            let mut bufs = self.ledger.buffers.lock();
            while reach.iter().zip(&changed).any(|((a, ..), &c)| c && bufs.get(*a).is_some_and(|b| b.executing_on(w))) {
                self.ledger.moved.wait(&mut bufs);
            }
        }
        // A lone answer, taken unvoted; with every ballot void, the first voided one.
        let lone = |winner: usize| Verdict::Take { winner, agree: Vec::new(), losers: Vec::new(), voted: false };
        let verdict = if elsewhere || (unexpected && !vote) {
            ballots.iter().position(Option::is_some).or(voided.first().copied()).map_or(Verdict::Nothing, lone)
        } else {
            // Voided ballots left fewer than two: the region runs again, if its first run can
            // be undone (as after a split); else the first answer is taken, unvoted.
            let first_restorable = || {
                let first = &runs[0];
                let started = with_versions(reach, &first.snaps);
                let changed = first.changed(marked);
                !first.snaps.is_empty() && Merger::of(*self).restorable(&Run { w: first.w, reach: &started, changed: &changed, snaps: &first.snaps }, &BTreeSet::new(), true)
            };
            match tally(&ballots, vote) {
                _ if !voided.is_empty() && tiebreak.is_none() && ballots.iter().flatten().count() < 2 && first_restorable() => Verdict::Void,
                Verdict::Nothing => voided.first().map_or(Verdict::Nothing, |&w| lone(w)),
                v => v,
            }
        };
        if let Verdict::Take { voted: false, .. } = verdict {
            if !vote && self.cfg.vote {
                // A kernel the user named in OMPCLUSTER_FT_VOTE_SKIP.
                stats.vote_skipped.fetch_add(1, Ordering::Relaxed);
            } else if self.cfg.vote {
                // The other replicas' workers died (or it was placed again and they had not
                // started): a lone answer, taken unchecked.
                stats.unvoted.fetch_add(1, Ordering::Relaxed);
            }
        }
        let taken = match &verdict {
            Verdict::Take { winner, .. } => *winner,
            _ => 0,
        };
        stats.replica_ns.fetch_add(replica_ns(taken), Ordering::Relaxed);
        let ranks: Vec<i32> = runs.iter().map(|r| r.w).collect();
        // Tails go to the collector (only ever beside a result taken: they are left only
        // once one came); the other runs are settled here.
        let mut tails = Vec::new();
        let mut runs: Vec<Option<SetRun>> = runs
            .into_iter()
            .map(|r| match r.pending {
                Some(_) => {
                    tails.push(r);
                    None
                }
                None => Some(r),
            })
            .collect();
        match verdict {
            Verdict::Take { winner, agree, losers, voted } => {
                // Counted once per region, when its result is taken (not per run again).
                stats.regions.fetch_add(1, Ordering::Relaxed);
                *stats.record.lock().by_kernel.entry(kernel.name.to_string()).or_default() += 1;
                if voted {
                    stats.votes.fetch_add(1, Ordering::Relaxed);
                }
                if winner != 0 {
                    stats.taken_from_other.fetch_add(1, Ordering::Relaxed);
                }
                let mut corrected = !losers.is_empty();
                if let (true, Some(earlier), Some(Some(won))) = (voted, tiebreak, ballots.get(winner)) {
                    // A run again after a split: the earlier replicas that wrote something
                    // else than its majority lost.
                    let lost: Vec<i32> = earlier.iter().filter(|(_, b)| b != won).map(|(r, _)| *r).collect();
                    corrected |= !lost.is_empty();
                    if !lost.is_empty() {
                        let majority: Vec<i32> = std::iter::once(winner).chain(agree.iter().copied()).map(|i| ranks[i]).collect();
                        self.lost_votes(&kernel.name, majority, lost, "its earlier result");
                    }
                }
                if !losers.is_empty() {
                    if self.meter.verbose() {
                        for (i, b) in ballots.iter().enumerate() {
                            let versions: Vec<u64> = runs[i].as_ref().map(|r| r.snaps.iter().map(|s| s.version).collect()).unwrap_or_default();
                            self.meter.log(format_args!("BALLOT of {} for {} over versions {versions:?} of {reach:x?}: {b:?}", ranks[i], kernel.name));
                        }
                    }
                    let majority: Vec<i32> = std::iter::once(winner).chain(agree.iter().copied()).map(|i| ranks[i]).collect();
                    self.lost_votes(&kernel.name, majority, losers.iter().map(|&i| ranks[i]).collect(), "what it wrote");
                }
                if corrected {
                    stats.corrections.fetch_add(1, Ordering::Relaxed);
                }
                let mut taken = runs[winner].take().expect("the winner is a run");
                let agreeing: Vec<SetRun> = agree.iter().filter_map(|&i| runs[i].take()).collect();
                let taken_ballot = taken.ran.as_ref().ok().filter(|_| voted).map(|e| Ballot::of(e, reach));
                let majority: Vec<i32> = std::iter::once(winner).chain(agree.iter().copied()).map(|i| ranks[i]).collect();
                let decided = taken_ballot.as_ref().map(|ballot| Decided { kernel, ballot, majority: &majority });
                for r in runs.into_iter().flatten() {
                    self.settle_other(reach, marked, r, decided.as_ref());
                }
                if let Ok(e) = &mut taken.ran {
                    Executor::of(*self).print(taken.w, e);
                }
                (taken.w, taken.snaps, taken.ran, agreeing, tails)
            }
            Verdict::Void => {
                let voided_changed: Vec<bool> = (0..reach.len()).map(|j| voided.iter().any(|&i| runs[i].as_ref().is_some_and(|r| r.changed(marked)[j]))).collect();
                let mut first = runs[0].take().expect("the first run");
                for r in runs.into_iter().flatten() {
                    self.settle_other(reach, marked, r, None);
                }
                if let Ok(e) = &first.ran {
                    self.delete_blocks(first.w, &e.allocated);
                }
                let changed = first.changed(marked);
                let started = with_versions(reach, &first.snaps);
                Merger::of(*self).undo(&Run { w: first.w, reach: &started, changed: &changed, snaps: &first.snaps });
                self.end(&mut self.ledger.buffers.lock(), reach, &mut first);
                self.ledger.moved.notify_all();
                self.meter.log(format_args!("RUN AGAIN {}: voided ballots left fewer than two to vote", kernel.name));
                (first.w, first.snaps, Err(ClusterError::RunAgain(Box::new(ClusterError::Voided { changed: voided_changed }))), Vec::new(), tails)
            }
            Verdict::Nothing => {
                let first = runs[0].take().expect("the first run");
                for r in runs.into_iter().flatten() {
                    self.settle_other(reach, marked, r, None);
                }
                (first.w, first.snaps, first.ran, Vec::new(), tails)
            }
            Verdict::Split => {
                let answered: Vec<i32> = runs.iter().flatten().filter(|r| r.ran.is_ok()).map(|r| r.w).collect();
                let at_seconds = self.meter.start.elapsed().as_secs_f64();
                self.meter.stats.replicas.record.lock().disagreements.push(run_report::Disagreement { kernel: kernel.name.to_string(), majority: Vec::new(), losers: answered.clone(), at_seconds });
                let mut first = runs[0].take().expect("the first run");
                for r in runs.into_iter().flatten() {
                    self.settle_other(reach, marked, r, None);
                }
                let why = format!("the {} replicas of a region of kernel {} on workers {answered:?} wrote different results and no majority agrees", answered.len(), kernel.name);
                let cast: Vec<(i32, Ballot)> = ranks.iter().zip(&ballots).filter_map(|(&r, b)| Some((r, b.clone()?))).collect();
                let disagreed = ClusterError::Disagreed { why: why.clone(), ballots: cast, arena };
                let changed = first.changed(marked);
                let started = with_versions(reach, &first.snaps);
                if let Ok(e) = &first.ran {
                    // Its blocks become no buffers either.
                    self.delete_blocks(first.w, &e.allocated);
                }
                self.end(&mut self.ledger.buffers.lock(), reach, &mut first);
                let run = Run { w: first.w, reach: &started, changed: &changed, snaps: &first.snaps };
                let e = if tiebreak.is_some() { disagreed } else { Merger::of(*self).rerun_or_replied(disagreed, &run) };
                let e = match e {
                    ClusterError::RunAgain(e) => {
                        stats.tiebreaks.fetch_add(1, Ordering::Relaxed);
                        eprintln!("ompcluster: {why}: running it again (on three workers, if there are)");
                        ClusterError::RunAgain(e)
                    }
                    _ => {
                        Merger::of(*self).undo(&run);
                        let again = if tiebreak.is_some() { "even when run again" } else { "and the versions it started from are held nowhere else, so it cannot run again" };
                        let short = Config::kernel_short_name(&kernel.name);
                        ClusterError::NoAgreement(format!(
                            "{why}, {again}: ending the program rather than trusting any of them (OMPCLUSTER_FT_VOTE=1). \
                             If the kernel's results differ from run to run (it reads a clock or random numbers, or sums \
                             in the order its threads finish), it cannot be voted on: OMPCLUSTER_FT_VOTE_SKIP={short} runs \
                             its replicas unvoted"
                        ))
                    }
                };
                self.ledger.moved.notify_all();
                (first.w, first.snaps, Err(e), Vec::new(), tails)
            }
        }
    }

    /// Workers `losers` wrote something else than `majority`: say so, count it, and retire
    /// a worker at `OMPCLUSTER_FT_VOTE_RETIRE` lost votes (it is then handled as a failed one).
    pub(super) fn lost_votes(&self, kernel: &str, majority: Vec<i32>, losers: Vec<i32>, what: &str) {
        let stats = &self.meter.stats.replicas;
        let at_seconds = self.meter.start.elapsed().as_secs_f64();
        stats.record.lock().disagreements.push(run_report::Disagreement { kernel: kernel.to_string(), majority: majority.clone(), losers: losers.clone(), at_seconds });
        for r in losers {
            let n = stats.lose_vote(r);
            eprintln!("ompcluster: worker {r} lost a vote on a region of kernel {kernel}: {what} differs from the result of workers {majority:?}, which is taken");
            let limit = u64::from(self.cfg.vote_retire);
            let retire = limit > 0 && n >= limit && {
                let mut rec = stats.record.lock();
                let first = !rec.retired.contains(&r);
                if first {
                    rec.retired.push(r);
                }
                first
            };
            if retire {
                eprintln!("ompcluster: worker {r} lost {n} votes (OMPCLUSTER_FT_VOTE_RETIRE={limit}): retiring it as a failed worker");
                Failures::of(*self).note_failure(r, &format!("retired after losing {n} votes"));
            }
        }
    }

    /// The agreeing replicas of a result that is not recorded after all (its changes could
    /// not be merged): settled as any other run.
    pub(super) fn abandon(&self, reach: &[(u64, u64, u64, u64)], marked: &[bool], agree: Vec<SetRun>) {
        for r in agree {
            self.settle_other(reach, marked, r, None);
        }
    }

    /// A run whose result is not taken and does not stand for it: forget what it changed
    /// (its copies hold no version; version 0's are made zeros again) and end its use of
    /// its copies. `decided`: the result its region took by a vote, if it did; a change that
    /// one did not make is no region's write (`Buffer::possible_writes`), and a ballot
    /// voided for a change of a shared copy (`SetRun::void`) becomes a suspect of that copy
    /// (`Buffer::suspects`), before the run's end, which may be the copy's last use.
    pub(super) fn settle_other(&self, reach: &[(u64, u64, u64, u64)], marked: &[bool], mut r: SetRun, decided: Option<&Decided>) {
        if let Ok(e) = &r.ran {
            self.delete_blocks(r.w, &e.allocated);
        }
        let changed = r.changed(marked);
        let began = !r.snaps.is_empty();
        // What may be a region's write: all it reached if it failed once started (what it
        // wrote is unknown), else what it changed but what a voted result did not.
        let possible: Vec<bool> = match (&r.ran, decided) {
            (Err(_), _) => vec![began; reach.len()],
            (Ok(_), Some(d)) => reach.iter().zip(&changed).map(|((a, ..), &c)| c && d.ballot.changes(*a)).collect(),
            (Ok(_), None) => changed.clone(),
        };
        let suspect = decided.filter(|_| r.void(marked));
        self.end(&mut self.ledger.buffers.lock(), reach, &mut r);
        if began {
            // It started: what it changed (what it may have, if it failed: a bad reply from a
            // live worker) holds no version, but a version another region recorded from the
            // copy meanwhile.
            let started = with_versions(reach, &r.snaps);
            let (forget, zeroed) = {
                let bufs = self.ledger.buffers.lock();
                let forget = self.not_recorded_meanwhile(&bufs, reach, r.w, &r.snaps, &changed);
                // The copies the undo makes zeros again (`Merger::undo`): a write of its own.
                let zeroed: Vec<bool> = reach.iter().zip(&forget).map(|((a, ..), &f)| f && bufs.get(*a).is_some_and(|b| b.version == 0)).collect();
                (forget, zeroed)
            };
            Merger::of(*self).undo(&Run { w: r.w, reach: &started, changed: &forget, snaps: &r.snaps });
            if let (Some(d), Ok(e)) = (suspect, &r.ran) {
                let mut bufs = self.ledger.buffers.lock();
                for ((((a, ..), snap), &z), _) in reach.iter().zip(&r.snaps).zip(&zeroed).zip(e.changed.iter().zip(marked)).filter(|(((_, s), _), (&c, &m))| c && !m && s.shared) {
                    if let Some(b) = bufs.get_mut(*a) {
                        b.suspect(r.w, Suspect { kernel: d.kernel.name.clone(), majority: d.majority.to_vec(), since: snap.possible_start + u64::from(z) });
                    }
                }
            }
        }
        self.release(&mut self.ledger.buffers.lock(), reach, r.w, &changed, &possible);
        self.ledger.moved.notify_all();
        self.name_blamed();
    }

    /// Name the workers blamed since (`Buffer::suspects`): each loses a vote.
    pub(super) fn name_blamed(&self) {
        let blames = self.ledger.buffers.lock().take_blames();
        for Blame { rank, addr, suspect } in blames {
            self.meter.stats.replicas.corrections.fetch_add(1, Ordering::Relaxed);
            self.lost_votes(&suspect.kernel, suspect.majority, vec![rank], &format!("a change to its copy of {addr:#x}, which the region only reads and no region wrote while it ran,"));
        }
    }

    /// A tail's reply came (or its worker died): it no longer runs on its copies.
    pub(super) fn end_tail(&self, bufs: &mut Buffers, reach: &[(u64, u64, u64, u64)], r: &mut SetRun) {
        self.end(bufs, reach, r);
    }

    /// Run `r` (started, if its snaps say so) no longer runs on its copies: once.
    fn end(&self, bufs: &mut Buffers, reach: &[(u64, u64, u64, u64)], r: &mut SetRun) {
        if !r.ended && !r.snaps.is_empty() {
            Launcher::of(*self).ended(bufs, r.w, reach, &mut r.snaps, r.replied);
            r.ended = true;
        }
    }

    /// Run `r`'s kernel replied (see `Buffer::replied`): once, and only for a run that started.
    pub(super) fn replied(&self, bufs: &mut Buffers, reach: &[(u64, u64, u64, u64)], r: &mut SetRun) {
        if !r.replied && !r.ended && !r.snaps.is_empty() {
            Launcher::of(*self).replied(bufs, r.w, reach, &mut r.snaps);
            r.replied = true;
            self.ledger.moved.notify_all();
        }
    }

    /// The agreeing replicas' kernels are done, as the taken one's is: called with it, so that
    /// a merge of its changes never waits for their marks (`Buffer::running`).
    pub(super) fn end_agreeing(&self, bufs: &mut Buffers, reach: &[(u64, u64, u64, u64)], agree: &mut [SetRun]) {
        for r in agree {
            self.end(bufs, reach, r);
        }
    }

    /// `w`'s run over `reach` no longer uses its copies (`changed`: those it changed).
    fn release(&self, bufs: &mut Buffers, reach: &[(u64, u64, u64, u64)], w: i32, changed: &[bool], possible: &[bool]) {
        for (((a, ..), &c), &p) in reach.iter().zip(changed).zip(possible) {
            bufs.kernel_done(*a, w, c, p);
            bufs.replica_done(*a, w);
        }
        self.offload.stop_running(w);
    }

    /// The replicas that agree with the result taken are done, under the lock that records
    /// that result: their copies of what they changed hold no version until [`Self::install`]
    /// makes them holders of the versions recorded.
    pub(super) fn settle_agreeing(&self, bufs: &mut Buffers, reach: &[(u64, u64, u64, u64)], agree: &mut [SetRun]) {
        for r in agree {
            self.end(bufs, reach, r);
            let changed = r.changed(&[]);
            self.release(bufs, reach, r.w, &changed, &changed);
            let forget = self.not_recorded_meanwhile(bufs, reach, r.w, &r.snaps, &changed);
            for ((a, ..), _) in reach.iter().zip(&forget).filter(|(_, c)| **c) {
                bufs.drop_copy(*a, r.w);
            }
        }
    }

    /// Of the copies on `w` a run (`snaps`) changed (`changed`), those to forget when it is
    /// settled: all but those from which another region recorded a version since it started
    /// and that still hold it (a region that could not be run again instead, `launch.rs`):
    /// that version owns the copy, and it may be its only one.
    fn not_recorded_meanwhile(&self, bufs: &Buffers, reach: &[(u64, u64, u64, u64)], w: i32, snaps: &[Snap], changed: &[bool]) -> Vec<bool> {
        reach
            .iter()
            .zip(changed)
            .zip(snaps)
            .map(|(((a, ..), &c), s)| c && !bufs.get(*a).is_some_and(|b| b.holders.contains(&w) && b.commits_from.get(&w).copied().unwrap_or(0) != s.commits_start))
            .collect()
    }

    /// The blocks device code of a run on `w` allocated become no buffers: delete them there
    /// (and give a block of `w`'s own arena back to it). Posted before the range they lie in
    /// can be given to another region (`Offload::settle_grant`): `w` handles them first.
    pub(super) fn delete_blocks(&self, w: i32, blocks: &[Allocated]) {
        if blocks.is_empty() || !self.link.is_live_worker(w) {
            return;
        }
        let own = self.offload.heap.arena(w, self.link.comm.size());
        // A post that fails found `w` dead: its memory is gone with it.
        for a in blocks {
            let block = Region { addr: a.region.addr, size: a.span };
            let _ = self.link.post(w, Event::Delete(block));
            if own.contains(block.addr) {
                let _ = self.link.post(w, Event::Reclaim(block));
            }
        }
    }

    /// The taken run's blocks (`allocs`: start, span) are buffers now: each agreeing replica
    /// made the same ones (its ballot carries them and their digests) and holds them too.
    /// Returns how many copies became holders.
    pub(super) fn install_blocks(&self, bufs: &mut Buffers, allocs: &[(u64, u64)], agree: &[SetRun]) -> u64 {
        let mut kept = 0;
        for r in agree {
            let Ok(e) = &r.ran else { continue };
            let same = e.allocated.len() == allocs.len() && e.allocated.iter().zip(allocs).all(|(a, &(addr, span))| a.region.addr == addr && a.span == span);
            if !same || !self.link.is_live_worker(r.w) {
                continue;
            }
            for &(addr, _) in allocs {
                if let Some(b) = bufs.get_mut(addr) {
                    b.backed.insert(r.w);
                    bufs.add_holder(addr, r.w);
                    self.meter.stats.replicas.copies_kept.fetch_add(1, Ordering::Relaxed);
                    kept += 1;
                }
            }
        }
        kept
    }

    /// The taken run (its `snaps`) made version `v` of the buffer at `addr`, region `i` of
    /// its reach, exactly from the version it started from: each agreeing replica that started
    /// from the same versions and whose copy nothing else touched since holds `v` too: as a
    /// holder while `v` is current, else (a tail settled after a later region made the next
    /// version elsewhere) as a stale copy of `v`, a source for recovery's re-runs of what came
    /// after. Forgotten instead, such a copy had been overwritten by the replica, and a later
    /// region's version on one worker only, lost with it, re-ran the replicated regions behind
    /// it back to the head's copy (`cholesky.c`, k = 2: up to 14 replicated re-runs in one kill).
    /// Returns how many copies were kept.
    pub(super) fn install(&self, bufs: &mut Buffers, i: usize, addr: u64, v: u64, snaps: &[Snap], agree: &[SetRun]) -> u64 {
        let mut kept = 0;
        for r in agree {
            let same_start = r.snaps.len() == snaps.len() && r.snaps.iter().zip(snaps).all(|(a, b)| a.version == b.version);
            let untouched = bufs.get(addr).is_some_and(|b| {
                b.version >= v
                    && !b.holders.contains(&r.w)
                    && !b.stale.contains_key(&r.w)
                    && !b.incoming.contains(&r.w)
                    && !b.using.contains_key(&r.w)
                    && b.commits_from.get(&r.w).copied().unwrap_or(0) == r.snaps[i].commits_start
                    && b.undone_on(r.w) == r.snaps[i].undone_start
            });
            if same_start && untouched && self.link.is_live_worker(r.w) {
                match bufs.get(addr).map(|b| (b.id, b.version == v)) {
                    Some((_, true)) => bufs.add_holder(addr, r.w),
                    Some((id, false)) => {
                        bufs.install(id, r.w, v);
                        self.meter.stats.replicas.kept_stale.fetch_add(1, Ordering::Relaxed);
                    }
                    None => continue,
                }
                self.meter.stats.replicas.copies_kept.fetch_add(1, Ordering::Relaxed);
                kept += 1;
            }
        }
        kept
    }
}

/// What a replica's run reported that replicas must agree on: the buffers it changed (by
/// address: a run again after a split may reach other buffers besides, such as blocks other
/// regions allocated meanwhile) with the digest of each one's bytes, the blocks its device
/// code allocated (start, span, digest) and those it freed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ballot {
    changed: Vec<(u64, u64)>,
    blocks: Vec<(u64, u64, u64)>,
    freed: Vec<u64>,
}

impl Ballot {
    /// The ballot of `ran`, a run over `reach` (whose digests were asked for: one per changed
    /// region, in order, then one per block).
    pub(super) fn of(ran: &Executed, reach: &[(u64, u64, u64, u64)]) -> Self {
        let mut digests = ran.digests.iter().copied();
        let mut changed: Vec<(u64, u64)> = reach.iter().zip(&ran.changed).filter(|(_, c)| **c).map(|((a, ..), _)| (*a, digests.next().unwrap_or(0))).collect();
        changed.sort_unstable();
        let blocks = ran.allocated.iter().map(|a| (a.region.addr, a.span, digests.next().unwrap_or(0))).collect();
        Ballot { changed, blocks, freed: ran.freed.clone() }
    }

    /// Whether the run changed the buffer at `addr`.
    pub(super) fn changes(&self, addr: u64) -> bool {
        self.changed.iter().any(|&(a, _)| a == addr)
    }
}

/// Which replica's result a launch takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Take replica `winner`'s result. `agree`: the other replicas that wrote the same bytes
    /// (their copies may hold its versions); `losers`: those that answered something else.
    /// `voted`: a majority of at least two agreed (else only one replica answered).
    Take { winner: usize, agree: Vec<usize>, losers: Vec<usize>, voted: bool },
    /// Voting, and no result has a majority of the replicas that answered.
    Split,
    /// No replica answered.
    Nothing,
    /// Voting, and voided ballots (`SetRun::void`) left fewer than two: run it again (never
    /// given by [`tally`]).
    Void,
}

/// The verdict over the ballots of a region's replicas, in placement order (`None`: that
/// replica gave no result: its worker died, or its kernel failed). Without `vote` the first
/// result is taken. With `vote`, a result is taken when more than half of the replicas that
/// answered, and at least two, gave it; a lone answer is taken unvoted.
pub(super) fn tally(ballots: &[Option<Ballot>], vote: bool) -> Verdict {
    let answered: Vec<usize> = (0..ballots.len()).filter(|&i| ballots[i].is_some()).collect();
    let Some(&first) = answered.first() else { return Verdict::Nothing };
    let same = |i: usize, j: usize| ballots[i] == ballots[j];
    let split = |winner: usize| {
        let (agree, losers): (Vec<usize>, Vec<usize>) = answered.iter().copied().filter(|&i| i != winner).partition(|&i| same(i, winner));
        (agree, losers)
    };
    if !vote || answered.len() == 1 {
        let (agree, losers) = split(first);
        return Verdict::Take { winner: first, agree, losers: if vote { losers } else { Vec::new() }, voted: false };
    }
    for &i in &answered {
        let (agree, losers) = split(i);
        if 2 * (agree.len() + 1) > answered.len() {
            return Verdict::Take { winner: i, agree, losers, voted: true };
        }
    }
    Verdict::Split
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(d: u64) -> Option<Ballot> {
        Some(Ballot { changed: vec![(0x1000, d)], blocks: vec![], freed: vec![] })
    }

    #[test]
    fn the_grace_of_the_other_replicas_is_a_quarter_of_the_kernel_time_within_1_to_50_ms() {
        assert_eq!(tail_grace(0.0), Duration::from_millis(1));
        assert_eq!(tail_grace(0.02), Duration::from_millis(5));
        assert_eq!(tail_grace(10.0), Duration::from_millis(50));
    }

    #[test]
    fn without_a_vote_the_first_answer_is_taken() {
        assert_eq!(tally(&[None, b(1), b(2)], false), Verdict::Take { winner: 1, agree: vec![], losers: vec![], voted: false });
        assert_eq!(tally(&[b(1), b(1)], false), Verdict::Take { winner: 0, agree: vec![1], losers: vec![], voted: false });
        assert_eq!(tally(&[None, None], false), Verdict::Nothing);
    }

    #[test]
    fn a_majority_decides() {
        assert_eq!(tally(&[b(1), b(1)], true), Verdict::Take { winner: 0, agree: vec![1], losers: vec![], voted: true });
        assert_eq!(tally(&[b(7), b(1), b(1)], true), Verdict::Take { winner: 1, agree: vec![2], losers: vec![0], voted: true });
        assert_eq!(tally(&[b(1), b(7), b(1)], true), Verdict::Take { winner: 0, agree: vec![2], losers: vec![1], voted: true });
        assert_eq!(tally(&[b(1), None, b(1)], true), Verdict::Take { winner: 0, agree: vec![2], losers: vec![], voted: true });
    }

    /// Ballots name buffers by address: a run over more buffers (a run again after a split
    /// reaches blocks other regions allocated meanwhile) agrees with one that changed the same.
    #[test]
    fn ballots_compare_what_changed_whatever_else_was_reached() {
        let ran = |changed: Vec<bool>, digests: Vec<u64>| Executed { changed, digests, ..Executed::default() };
        let two = [(0x1000, 8, 1, 1), (0x3000, 8, 3, 1)];
        let three = [(0x1000, 8, 1, 1), (0x2000, 8, 2, 1), (0x3000, 8, 3, 1)];
        let a = Ballot::of(&ran(vec![true, false], vec![5]), &two);
        assert_eq!(a, Ballot::of(&ran(vec![true, false, false], vec![5]), &three));
        assert_ne!(a, Ballot::of(&ran(vec![true, true, false], vec![5, 6]), &three));
        assert_ne!(a, Ballot::of(&ran(vec![false, false, true], vec![5]), &three));
    }

    #[test]
    fn no_majority_is_a_split() {
        assert_eq!(tally(&[b(1), b(2)], true), Verdict::Split);
        assert_eq!(tally(&[b(1), b(2), b(3)], true), Verdict::Split);
        assert_eq!(tally(&[None, b(2), b(3)], true), Verdict::Split);
    }

    #[test]
    fn a_lone_answer_is_taken_unvoted() {
        assert_eq!(tally(&[None, b(2)], true), Verdict::Take { winner: 1, agree: vec![], losers: vec![], voted: false });
        assert_eq!(tally(&[None, None, None], true), Verdict::Nothing);
    }

    #[test]
    fn which_regions_changed_counts_too() {
        let other = Some(Ballot { changed: vec![(0x1000, 1), (0x2000, 7)], blocks: vec![], freed: vec![] });
        assert_eq!(tally(&[b(1), other], true), Verdict::Split);
        // And which blocks device code allocated, and where.
        let at = |addr| Some(Ballot { changed: vec![(0x1000, 1)], blocks: vec![(addr, 4096, 2)], freed: vec![] });
        assert_eq!(tally(&[at(0x10000), at(0x20000)], true), Verdict::Split);
        assert_eq!(tally(&[at(0x10000), at(0x10000)], true), Verdict::Take { winner: 0, agree: vec![1], losers: vec![], voted: true });
    }
}
