//! Kernel launches ([`Launcher`]): placement, data movement, EXECUTE, and the record of what
//! the kernel wrote.
//!
//! Regions running at the same time share one device memory under the stock plugin; here
//! each worker has its own copy of a buffer. So that concurrent regions that write one buffer
//! still see one memory (disjoint slices, an atomic counter), every region that may write a
//! buffer marks it `writing` on its worker while it runs, and every region that reaches a
//! buffer so marked runs on that worker (design note: `Buffer::writing`). Which buffers a
//! region may write is predicted per kernel ([`WriteSet`]): those it maps `from`, those its
//! earlier runs changed, and all it reaches while it never completed a run. That last rule
//! would send every run of a new kernel to the first one's worker (they all reach its image's
//! data), so while a first run is in flight the kernel's other runs wait for it, up to
//! [`LEARNING_WAIT`]: a program's first wave of tasks spreads over the workers, and the
//! data it leaves there (blocks kept on the device) stays spread.
//!
//! A prediction can be wrong (a write that depends on the data): then two regions changed one
//! buffer in two copies, which are merged, or one of which is undone and run again
//! (`merge.rs`).
//!
//! Replicas share what they only read (design note). A run of a region with replicas
//! (`replicas.rs`; the first-placed one too, counted in `Buffer::replica_on`) may be undone
//! once its region is decided, without the checks of a run again: its changed copies are
//! forgotten. So it shares a worker's copy with other regions in flight only where forgetting
//! that copy loses nothing (`Buffer::shareable_on`: both only expect to read it, no region in
//! flight writes it, the worker holds the current version and another rank holds it too, or
//! it is pristine); a copy from which another region recorded a version meanwhile (one that
//! could not run again, below) is kept for that version, not forgotten. Every region reaches its image's data and a matmul's products share their
//! blocks, so without sharing few regions in flight found a worker for a replica; and a
//! program's first wave moves its inputs to every worker at once, so a region whose replicas
//! could share copies still on their way waits for them, a bounded time ([`ARRIVAL_WAIT`]:
//! a move's time, not a kernel's; beyond it the region runs without replicas). A prediction
//! that was wrong is caught after the run, on three paths:
//! * a run that changed such a copy is not recorded: once no other kernel executes on the copy
//!   (their replies, not their regions' decisions, are awaited: no two regions wait for each
//!   other) it is undone and runs again, now predicted to write it (`Merger::rerun_shared`);
//! * a replica whose run saw an unexpected change of a copy shared during the run has its
//!   ballot voided (`SetRun::void`): that change may be the other region's, so it loses no
//!   vote; if fewer than two ballots are left, the region runs again;
//! * copies taken, merged or recorded meanwhile follow the rules of `merge.rs`.
use super::blocks::Blocks;
use super::durability::Durability;
use super::execute::{Executed, Execute, Executor};
use super::faults::Faults;
use super::ledger::Ledger;
use super::link::Link;
use super::memory::Memory;
use super::merge::{Merger, Run, Snap, needs_merge};
use super::meter::Meter;
use super::movement::Movement;
use super::offload::{Kernel, Offload, WriteSet, SHORT_KERNEL_NS};
use super::prune::Pruner;
use super::replica_choice::Choice;
use super::replicas::{Ballot, Replicator};
use super::requests::Requests;
use super::resume::{self, Resumer};
use super::tails::{Collector, Outcome};
use super::tolerance::Tolerance;
use super::{ClusterError, Result, Stopped};
use crate::config::Config;
use crate::data::{Buffer, Buffers, Place, PointsTo, HEAD};
use crate::inject::Injector;
use event_system::protocol::{FoundPointers, MAX_SEND_BACK, Patch, Region};
use rustc_hash::FxHashMap as HashMap;
use scheduler::Candidate;
use serde_json::json;
use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::time::Instant;
use task_graph::{Access, TaskRecord};
use timeline::Cat;

/// The bit that stands for argument `i` in a set of arguments: its own below 63, one shared
/// by all the others (a kernel with more arguments is then predicted coarser, never wrong).
fn arg_mask(i: usize) -> u64 {
    1 << i.min(63)
}

/// How long a run of a kernel whose write set is unknown waits for a first run in flight to
/// teach it (see `launch_once`).
const LEARNING_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// How long a region with replicas waits, at most, for copies on their way to other workers
/// (for regions placed there) to arrive, so that its replicas can share them: moves take
/// milliseconds; a region that would wait longer runs without replicas.
const ARRIVAL_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

/// A `nowait` region whose kernel's last run took less than this runs on the thread that
/// launches it (see [`Launcher::expect_short`]): 32,768 regions of a 1024/32 blocked matmul on 3
/// workers took 2.1 times as long when each was handed to a region thread.
const ASYNC_FROM_NS: u64 = 1_000_000;

/// Most times a region runs again because its change could not be merged (see `launch`).
const MAX_RUNS_AGAIN: u32 = 32;

/// A run again of a region whose replicas disagreed with no majority (`replicas.rs`): their
/// workers and ballots, whose losers its majority names, and the range of the head's arena
/// they allocated in, where it allocates too.
pub(super) struct Tiebreak {
    ballots: Vec<(i32, Ballot)>,
    arena: Option<event_system::protocol::Region>,
}

view! {
    /// Launching a region: it needs nearly everything (placement reads the liveness, the idle
    /// spares and the head's own device; it runs in a request's frame, moves data, runs the
    /// kernel, records versions and the task, merges, prunes, injects faults), so it borrows the
    /// whole cluster.
    pub(super) struct Launcher { link: Link, ledger: Ledger, offload: Offload, tolerance: Tolerance, durability: Durability, meter: Meter, cfg: Config, stopped: Stopped }
    also { tolerance.inject: Injector }
}

impl<'a> Launcher<'a> {
    /// Run the kernel `entry` (a token from `load_binary`) with argument values `args`;
    /// `begins[i]` is the device begin of argument i's mapped section, `hosts[i]` its host
    /// pointer (0 for by-value arguments): see [`Buffers::by_translation`] for why both.
    /// `mapped_from[i]` says argument i was mapped `from` (its buffer is surely written).
    pub(super) fn launch(&self, entry: usize, args: &[u64], begins: &[u64], hosts: &[u64], mapped_from: &[bool]) -> Result<()> {
        if self.durability.fast_forward() {
            // A resumed job: the log may hold this region (`resume.rs`).
            let kernel = self.offload.kernels.read().get(&entry).cloned().ok_or(ClusterError::UnknownKernel(entry))?;
            if let resume::Skip::Done = Resumer::of(*self).skip_launch(&kernel, args, begins, hosts)? {
                return Ok(());
            }
        }
        let mut again = 0;
        // Replicas disagreed with no majority: the run again has three, and its majority
        // names the losers of these ballots (`replicas.rs`).
        let mut tiebreak: Option<Tiebreak> = None;
        loop {
            let r = Requests::of(*self).resilient(|| self.launch_once(entry, args, begins, hosts, mapped_from, tiebreak.as_ref()));
            // Workers whose copies changed while no region wrote them, found as its kernels
            // ended (`Buffer::suspects`).
            Replicator::of(*self).name_blamed();
            match r {
                Err(ClusterError::RunAgain(e)) if again < MAX_RUNS_AGAIN && matches!(*e, ClusterError::Disagreed { .. }) => {
                    again += 1;
                    if let ClusterError::Disagreed { ballots, arena, .. } = *e {
                        // The range of the head's arena stays the split's (it came from it).
                        let arena = tiebreak.as_ref().map_or(arena, |t| t.arena);
                        tiebreak = Some(Tiebreak { ballots, arena });
                    }
                    continue;
                }
                // Its change could not be merged with a region's that ran at the same time on
                // another worker: run it again over that one's (it is now known to write the
                // buffer, so it shares a worker with the next writers).
                Err(ClusterError::RunAgain(_)) if again < MAX_RUNS_AGAIN => {
                    again += 1;
                    continue;
                }
                Err(_) => {
                    // A run again's range, not settled by a run that took a result.
                    if let Some(g) = tiebreak.and_then(|t| t.arena) {
                        self.offload.settle_grant(g, &[]);
                    }
                }
                Ok(()) => {}
            }
            return match r {
                Err(ClusterError::RunAgain(e)) => Err(*e),
                r => r,
            };
        }
    }

    /// Whether a run of the kernel `entry` should run on the calling thread even with
    /// `nowait`: its last run was shorter than [`ASYNC_FROM_NS`], so handing it to a region
    /// thread would cost more than holding the caller (`queues.rs`). Unknown kernels and
    /// unknown tokens run on a region thread.
    pub(super) fn expect_short(&self, entry: usize) -> bool {
        self.offload.kernels.read().get(&entry).is_some_and(|k| k.last_ns.load(Ordering::Relaxed) < ASYNC_FROM_NS)
    }

    /// Where target regions can run: the live workers but idle spares, or the head itself
    /// once it runs them (no worker left). Asked at every launch: no allocation.
    pub(super) fn targets(&self) -> impl Iterator<Item = i32> + '_ {
        let on_head = self.offload.local().is_some();
        self.link.workers().filter(move |&r| !on_head && !self.tolerance.is_idle_spare(r)).chain(on_head.then_some(HEAD))
    }

    fn launch_once(&self, entry: usize, args: &[u64], begins: &[u64], hosts: &[u64], mapped_from: &[bool], tiebreak: Option<&Tiebreak>) -> Result<()> {
        let _gate = Requests::of(*self).enter()?;
        let t0 = self.meter.start.elapsed().as_secs_f64();
        let kernel = self.offload.kernels.read().get(&entry).cloned().ok_or(ClusterError::UnknownKernel(entry))?;
        // What can it reach, where is it, and where must it run? Placement and the marking of
        // the buffers it writes happen under one lock, so two concurrent writers of a buffer
        // always see each other.
        let translated: Vec<(u64, u64)> = begins.iter().zip(hosts).filter(|(_, &h)| h != 0).map(|(&d, &h)| (d, h)).collect();
        let roots: Vec<u64> = args.iter().chain(begins).copied().collect();
        // How long a run waits for this kernel's first run to teach what it writes.
        let learn_until = Instant::now() + LEARNING_WAIT;
        // `OMPCLUSTER_FT_REPLICATE=auto`: whether this region gets replicas, asked once.
        let mut choice: Option<Choice> = None;
        // Until when it waits for copies on their way to become shareable for its replicas.
        let mut arrival_until: Option<Instant> = None;
        let (w, extra, reach, assume_written, marked, reach_args, learning, task_key, replicated, grant) = {
            let mut bufs = self.ledger.buffers.lock();
            loop {
                // A run of a kernel whose write set is unknown marks everything it reaches as
                // written, and every other run reaching any of it (its image's data: all of
                // them) would follow it to its worker. The first run teaches the write set:
                // until it is done, the others wait, a bounded time (a region may wait on
                // another one running at the same time).
                if kernel.learning.load(Ordering::Relaxed) > 0 && Instant::now() < learn_until {
                    self.ledger.moved.wait_until(&mut bufs, learn_until);
                    continue;
                }
                let history = *kernel.writes.lock();
                let mut wait_arrival: Option<Instant> = None;
                // Decided with the buffers borrowed (looked up once each); None: wait for
                // another region first.
                let placed = {
                    // The buffers each argument reaches directly: (buffer, argument).
                    let mut by_arg: Vec<(u64, usize)> = Vec::new();
                    for i in 0..begins.len() {
                        by_arg.extend(bufs.near(begins[i]).map(|a| (a, i)));
                        if hosts[i] != 0 {
                            by_arg.extend(bufs.by_translation(begins[i], hosts[i]).iter().map(|&a| (a, i)));
                        }
                    }
                    // Each reached buffer, the arguments through which it is reached (none:
                    // through a stored pointer, or an image's data), and whether one of those is
                    // mapped `from` (so it is surely written).
                    let reached: Vec<(&Buffer, u64, bool)> = bufs
                        .reachable(&roots, &translated, kernel.image)
                        .into_iter()
                        .map(|a| {
                            let b = bufs.get(a).expect("reachable buffers exist");
                            by_arg.iter().filter(|(x, _)| *x == a).fold((b, 0, false), |(b, m, f), (_, i)| (b, m | arg_mask(*i), f || mapped_from[*i]))
                        })
                        .collect();
                    // The buffers it may write (see `WriteSet`).
                    let may_write: Vec<bool> = reached
                        .iter()
                        .map(|&(b, args, from)| match history {
                            None => true,
                            Some(h) => from || args & h.args != 0 || (args == 0 && if b.global_of.is_some() { h.globals } else { h.other }),
                        })
                        .collect();
                    let pins: BTreeSet<i32> = reached.iter().filter_map(|(b, ..)| b.writing.map(|(w, _)| w)).collect();
                    // A worker whose copy of a buffer a kernel executes on is not the current
                    // version cannot take the current version now.
                    let busy_copy = |w: i32| reached.iter().any(|(b, ..)| b.running_unheld(w));
                    // A worker whose copy of a buffer a region placed there is waiting for (its
                    // move is on its way or about to be) lacks nothing for it: the region
                    // is placed there once the copy arrived (it waits below), as a region
                    // placed on a copy it holds. (Left out, as an earlier version did, a
                    // matmul's regions placed while others waited for the same input went
                    // elsewhere and moved it again.)
                    let arriving = |w: i32| reached.iter().any(|(b, ..)| b.used_unheld(w));
                    let allowed = |w: i32| pins.is_empty() || pins.contains(&w);
                    // A copy on `w` that this region and another one in flight may both use
                    // though one of them has replicas (`Buffer::shareable_on`): it only reads it.
                    let live = |h: i32| Place::of(h) == Place::Head || self.link.is_live_worker(h);
                    let shareable = |b: &Buffer, m: bool, w: i32| !m && b.shareable_on(w, live);
                    // The same once the copies on their way to `w` are there (a region placed
                    // on such a copy waits for it: `arriving`; a copy counted as held that is
                    // being overwritten is not shareable even so).
                    let shareable_once = |b: &Buffer, m: bool, w: i32| !m && b.shareable_once_on(w, live);
                    // A worker where a run of a region with replicas uses a copy of a buffer it
                    // reaches that they cannot share (`Buffer::replica_on`), even once there.
                    let replica_held = |w: i32| reached.iter().zip(&may_write).any(|((b, ..), &m)| b.replica_on.contains_key(&w) && !shareable_once(b, m, w));
                    let candidates: Vec<Candidate> = self
                        .targets()
                        .filter(|&w| allowed(w) && !busy_copy(w) && !replica_held(w))
                        .map(|w| {
                            let missing = reached.iter().filter(|(b, ..)| !b.held_by(w) && !b.used_unheld(w));
                            Candidate {
                                rank: w,
                                missing_bytes: missing.clone().map(|(b, ..)| b.size).sum(),
                                missing_buffers: missing.count() as u32,
                                in_flight: self.offload.in_flight(w),
                            }
                        })
                        .collect();
                    // It reaches buffers being written on two workers, or every worker it may run
                    // on has a copy in use by a running kernel: wait for one to finish.
                    let wait = pins.len() > 1
                        || reached.iter().any(|(b, ..)| b.replicated > 0)
                        || (candidates.is_empty() && self.targets().any(|w| allowed(w) && (busy_copy(w) || replica_held(w))));
                    let chosen = if wait { None } else { Some(self.offload.sched.choose(&candidates).ok_or(ClusterError::NoWorker)?) };
                    match chosen {
                        None => None,
                        Some(w) if arriving(w) => None,
                        Some(w) => {
                            let reach: Vec<(u64, u64, u64, u64)> = reached.iter().map(|(b, ..)| (b.addr, b.size, b.id, b.version)).collect();
                            let reach_args: Vec<u64> = reached.iter().map(|&(_, m, _)| m).collect();
                            let assume_written: Vec<bool> = reached.iter().map(|&(.., from)| from).collect();
                            // Its content key, for the log (`journal.rs`).
                            let task_key = self.durability.keyed().then(|| kernel.region_key(args, reached.iter().map(|(b, ..)| *b)));
                            // Replicas (`replicas.rs`): on workers where no other region
                            // uses a copy of anything this one reaches but copies both only
                            // read (`Buffer::shareable_on`); copies still on their way
                            // there are waited for (below).
                            let k = if tiebreak.is_some() { 3 } else { self.cfg.replicas as usize };
                            let mut replicable = k > 1 && Place::of(w).is_worker();
                            if let (true, None, Some(chooser)) = (replicable, tiebreak, &self.offload.chooser) {
                                // Only the regions `auto` chooses (a tiebreak always runs on three).
                                let c = *choice.get_or_insert_with(|| {
                                    let behind = reached.iter().map(|(b, ..)| b.exposed_ns()).max().unwrap_or(0);
                                    let run = Some(kernel.last_ns.load(Ordering::Relaxed)).filter(|&n| n != u64::MAX);
                                    chooser.lock().choose(entry, run, behind)
                                });
                                replicable = c.chosen;
                            }
                            let extra = if replicable && pins.is_empty() {
                                // Its copies there are its own, or copies it shares only read.
                                // Not with voting on two: a pair that disagrees runs again
                                // from the versions it started from, and with copies shared it
                                // ran beside other regions, whose reach keeps buddy copies
                                // from saving those versions (measured: 3 of 24 flipped
                                // `ft_stencil.c` runs ended "no majority", none unshared).
                                let share = !(self.cfg.votes_on(&kernel.name) && k == 2);
                                // `once`: free once the copies on their way there arrived.
                                let free = |r: i32, once: bool| {
                                    let share_on = |b: &Buffer, m: bool| if once { shareable_once(b, m, r) } else { shareable(b, m, r) };
                                    r != w && (once || !arriving(r)) && reached.iter().zip(&may_write).all(|((b, ..), &m)| !b.using.contains_key(&r) || (share && share_on(b, m)))
                                };
                                let mut pool: Vec<Candidate> = candidates.iter().copied().filter(|c| free(c.rank, false)).collect();
                                // Copies on their way to a worker for other regions (a program's
                                // first wave moves its inputs everywhere at once) are shared once
                                // there: rather than run without replicas, wait for them, a
                                // bounded time ([`ARRIVAL_WAIT`]).
                                if pool.len() < k - 1 && candidates.iter().any(|c| !free(c.rank, false) && free(c.rank, true)) {
                                    let until = *arrival_until.get_or_insert_with(|| Instant::now() + ARRIVAL_WAIT);
                                    if Instant::now() < until {
                                        wait_arrival = Some(until);
                                    }
                                }
                                if self.cfg.votes_on(&kernel.name) && (k == 2 || pool.len() < k - 1) {
                                    // Two replicas that disagree are undone and run again from
                                    // the versions they started from: keep a holder of each
                                    // version it may change out of the pair, if the pool allows
                                    // (else it runs voted all the same). Three decide by majority.
                                    let kept: BTreeSet<i32> = reached
                                        .iter()
                                        .zip(&may_write)
                                        .filter(|((b, ..), &m)| m && b.version > b.pristine_version())
                                        .filter_map(|((b, ..), _)| {
                                            let outside = b.holders.iter().any(|&h| h != w && !pool.iter().any(|c| c.rank == h) && (Place::of(h) == Place::Head || self.link.is_live_worker(h)));
                                            (!outside).then(|| b.holders.iter().copied().find(|&h| h != w)).flatten()
                                        })
                                        .collect();
                                    if pool.iter().any(|c| !kept.contains(&c.rank)) {
                                        pool.retain(|c| !kept.contains(&c.rank));
                                    }
                                }
                                if wait_arrival.is_some() { Vec::new() } else { Replicator::of(*self).pick(w, pool, k - 1) }
                            } else {
                                Vec::new()
                            };
                            // Replicas of a kernel that allocates device memory (or may: its
                            // first run) allocate in one range of the head's arena, at the same
                            // addresses (`Offload::grant`); none free: one worker runs it.
                            // A run again allocates in the range of the split it decides (the
                            // `launch` loop owns that one).
                            let mut extra = extra;
                            let grant = match tiebreak {
                                Some(t) => t.arena,
                                None => (!extra.is_empty() && (history.is_none() || kernel.allocates.load(Ordering::Relaxed))).then(|| self.offload.grant(&kernel)).flatten(),
                            };
                            if grant.is_none() && kernel.allocates.load(Ordering::Relaxed) && !extra.is_empty() {
                                self.meter.log(format_args!("UNREPLICATED {} on {w}: no range of the head's arena free for its allocations", kernel.name));
                                extra.clear();
                            }
                            if replicable && extra.is_empty() && wait_arrival.is_none() && self.meter.verbose() {
                                let why = if pins.is_empty() { "no other worker free of regions using what it reaches" } else { "it reaches a buffer another region writes" };
                                self.meter.log(format_args!("UNREPLICATED {} on {w}: {why}", kernel.name));
                            }
                            // Voting: a region runs on two workers at least, if two are left; it
                            // waits until two can take it (a region writing what it reaches
                            // ends, or one using a copy it would write there), if any runs.
                            let others_run = self.offload.all_in_flight() > 0;
                            if wait_arrival.is_some() {
                                None
                            } else if self.cfg.votes_on(&kernel.name) && replicable && extra.is_empty() && others_run && self.targets().filter(|&r| Place::of(r).is_worker()).nth(1).is_some() {
                                if let (Some(g), None) = (grant, tiebreak) {
                                    self.offload.settle_grant(g, &[]);
                                }
                                None
                            } else {
                                Some((w, extra, reach, assume_written, may_write, reach_args, task_key, grant))
                            }
                        }
                    }
                };
                let Some((w, extra, reach, assume_written, may_write, reach_args, task_key, grant)) = placed else {
                    match wait_arrival {
                        Some(until) => _ = self.ledger.moved.wait_until(&mut bufs, until),
                        None => self.ledger.moved.wait(&mut bufs),
                    }
                    continue;
                };
                for ((a, ..), m) in reach.iter().zip(&may_write) {
                    if let Some(b) = bufs.get_mut(*a) {
                        b.begin_use(w);
                        // No other region may write a replica's copy (see `extra` above):
                        // only the first-placed worker is marked writing. Every run of a
                        // region with replicas counts in `replica_on`: each may be undone.
                        for &r in extra.iter().chain((!extra.is_empty()).then_some(&w)) {
                            if r != w {
                                b.begin_use(r);
                            }
                            *b.replica_on.entry(r).or_default() += 1;
                        }
                        if *m {
                            b.writing = Some((w, b.writing.map_or(0, |(_, n)| n) + 1));
                            b.replicated += u32::from(!extra.is_empty());
                        }
                    }
                }
                let replicated = !extra.is_empty();
                let learning = history.is_none();
                if learning {
                    kernel.learning.fetch_add(1, Ordering::Relaxed);
                }
                if let Some(chooser) = &self.offload.chooser {
                    let mut chooser = chooser.lock();
                    // The kernels whose runs made the versions it reads (their fan-out).
                    chooser.read(reach.iter().filter_map(|(a, ..)| {
                        let b = bufs.get(*a)?;
                        b.made_by.filter(|(v, ..)| *v == b.version).map(|(_, e, _)| e)
                    }));
                    if let Some(c) = choice.filter(|c| c.chosen && extra.is_empty()) {
                        // No worker could take a replica: its credit back.
                        chooser.refund(c);
                        self.meter.stats.replicas.chosen_unplaced.fetch_add(1, Ordering::Relaxed);
                    }
                }
                // Counted under the lock, so that the next placement sees it.
                self.offload.start_running(w);
                for &r in &extra {
                    self.offload.start_running(r);
                }
                break (w, extra, reach, assume_written, may_write, reach_args, learning, task_key, replicated, grant);
            }
        };
        self.meter.stats.note_in_flight(self.offload.all_in_flight());
        // The buffers it maps `from` that libomptarget retrieved after its earlier runs come
        // back with the reply (see `Kernel::send_back`).
        let back_args = kernel.send_back.load(Ordering::Relaxed);
        let send_back: Vec<bool> = reach
            .iter()
            .zip(&reach_args)
            .zip(&assume_written)
            .map(|(((_, size, ..), &args), &from)| from && args & back_args != 0 && *size <= MAX_SEND_BACK)
            .collect();
        let (w, mut snaps, result, agree, tails) = if extra.is_empty() {
            if choice.is_some_and(|c| !c.chosen) {
                self.meter.stats.replicas.passed_over.fetch_add(1, Ordering::Relaxed);
            } else if self.cfg.votes_on(&kernel.name) && Place::of(w).is_worker() {
                // No second worker could take it (one left, a kernel that allocates device
                // memory, or nothing else in flight to wait for).
                self.meter.stats.replicas.unvoted.fetch_add(1, Ordering::Relaxed);
            }
            let mut snaps = Vec::new();
            let result = self.run_on(w, &kernel, args, &reach, assume_written.clone(), send_back, &mut snaps);
            self.offload.stop_running(w);
            (w, snaps, result, Vec::new(), Vec::new())
        } else {
            let set: Vec<i32> = std::iter::once(w).chain(extra).collect();
            let replicator = Replicator::of(*self);
            let runs = replicator.run_set(&set, &kernel, args, &reach, &marked, &assume_written, send_back, grant, tiebreak.is_some());
            let taken = replicator.take_result(&kernel, &reach, &marked, runs, tiebreak.map(|t| &t.ballots[..]), grant);
            self.offload.stop_running(taken.0);
            taken
        };
        let mut agree = agree;
        // For the log: the replicas whose results agree with the one taken.
        let agreeing: Vec<i32> = agree.iter().map(|r| r.w).collect();
        // Replicas still running: the collector settles them once this result is recorded
        // (`tells` it what was), or as losers if it is not (`tails.rs`).
        let tail_ranks: Vec<i32> = tails.iter().map(|t| t.w).collect();
        let ballot = result.as_ref().ok().filter(|_| !tails.is_empty()).map(|e| Ballot::of(e, &reach));
        let tells = if tails.is_empty() { None } else { Collector::of(*self).hand_over(&kernel, &reach, &marked, tails) };
        // The versions it made exactly from those it started from, for the tails.
        let mut made: Vec<(usize, u64)> = Vec::new();
        // The kernel is done with its copies (`changed`: which it changed; all, if unknown).
        // Returns the buffers the program deleted meanwhile that no region uses any more.
        // Called once on every path, under the `buffers` lock, and followed by a wake-up.
        let release_writes = |bufs: &mut Buffers, changed: Option<&[bool]>| {
            if learning {
                // Its marks are gone: the runs waiting for it may be placed.
                kernel.learning.fetch_sub(1, Ordering::Relaxed);
            }
            let mut deleted = Vec::new();
            for (j, ((a, ..), m)) in reach.iter().zip(&marked).enumerate() {
                let c = changed.is_none_or(|c| c[j]);
                let torn = bufs.kernel_done(*a, w, c, c);
                // The result taken was a replica's (the first-placed one failed).
                bufs.replica_done(*a, w);
                if !torn.is_empty() {
                    self.meter.log(format_args!("TORN {a:#x} on {torn:?}: copied from {w} while this kernel changed it, so no version"));
                }
                let Some(b) = bufs.get_mut(*a) else { continue };
                if *m {
                    b.writing = match b.writing {
                        Some((x, n)) if n > 1 => Some((x, n - 1)),
                        _ => None,
                    };
                    if replicated {
                        b.replicated -= 1;
                    }
                }
                if b.deleted && b.using.is_empty() {
                    deleted.push(*a);
                }
            }
            deleted
        };
        // The range its replicas allocated in, once no replica's blocks there are left but
        // those that became buffers (`kept`; every other run was settled, its blocks deleted).
        let settle_grant = |kept: &[(u64, u64)]| {
            if let Some(g) = grant {
                self.offload.settle_grant(g, kept);
            }
        };
        // A split's range goes with it to the run again (`Tiebreak::arena`); a run again's
        // belongs to the `launch` loop until a run takes a result.
        let split = matches!(&result, Err(ClusterError::RunAgain(e)) if matches!(**e, ClusterError::Disagreed { .. }));
        if result.is_err() && !split && tiebreak.is_none() {
            settle_grant(&[]);
        }
        if result.is_err() {
            // A kernel that never started (no snapshot taken) changed nothing.
            let unchanged = vec![false; reach.len()];
            let deleted = release_writes(&mut self.ledger.buffers.lock(), snaps.is_empty().then_some(&unchanged[..]));
            self.ledger.moved.notify_all();
            Memory::of(*self).finish_deletes(deleted)?;
        }
        if let Err(ClusterError::RunAgain(e)) = &result {
            if let ClusterError::Voided { changed } = &**e {
                self.learn_writes(&kernel, &reach, &reach_args, changed);
            }
        }
        let Executed { changed, pointers, seconds: kernel_s, patches, allocated, freed, traced, returned, output, errors, .. } = result?;
        if !allocated.is_empty() || !freed.is_empty() {
            kernel.learn_allocates(allocated.iter().map(|a| (a.region.addr, a.span)));
        }
        // It ran over the versions it was placed over, allocated and freed nothing, and ran
        // on a worker: it may go in the log (if nothing below rules it out).
        let mut clean = task_key.is_some() && Place::of(w) != Place::Head && allocated.is_empty() && freed.is_empty() && reach.iter().zip(&snaps).all(|(r, s)| r.3 == s.version);
        let mut returned: HashMap<usize, Vec<u8>> = returned.into_iter().collect();
        // Kernels whose bytes sent back were replaced before anyone retrieved them.
        let mut unlearn: Vec<(usize, u64)> = Vec::new();
        // The versions it ran over.
        let reach: Vec<(u64, u64, u64, u64)> = reach.iter().zip(&snaps).map(|(&(a, s, id, _), sn)| (a, s, id, sn.version)).collect();
        self.learn_writes(&kernel, &reach, &reach_args, &changed);
        let mut patches: HashMap<usize, Vec<(u64, Vec<u8>)>> = patches.into_iter().map(|(i, p)| (i as usize, p)).collect();
        // Image data this kernel changed while another worker changed it too: its changes,
        // to apply on top of the other's (below, once the lock is released).
        let mut merges: Vec<(u64, Patch)> = Vec::new();
        // Record the new versions.
        let mut reads = Vec::with_capacity(reach.len());
        let mut writes = Vec::new();
        // Addresses of the versions it made (for the log).
        let mut logged: Vec<u64> = Vec::new();
        // Changes to merge into a version another worker made meanwhile; again if one more
        // appeared before the lock was taken to record them.
        let mut merged = BTreeSet::new();
        let (done, deleted, mut unrecorded);
        {
            let mut first = true;
            // It changed copies shared with replicas and could not be undone (below).
            let mut unshared = false;
            let mut bufs = loop {
                let mut bufs = self.ledger.buffers.lock();
                if std::mem::take(&mut first) {
                    self.ended(&mut bufs, w, &reach, &mut snaps, replicated);
                    Replicator::of(*self).end_agreeing(&mut bufs, &reach, &mut agree);
                    // A tail changes its copies in place: they hold no version from now on.
                    for &t in &tail_ranks {
                        for (j, ((a, ..), m)) in reach.iter().zip(&marked).enumerate() {
                            if *m || changed[j] {
                                bufs.drop_copy(*a, t);
                            }
                        }
                    }
                    // Merges may wait for it to end.
                    self.ledger.moved.notify_all();
                }
                // A change it was not expected to make, to a copy that a run of another region
                // with replicas shares (`Buffer::replica_on`): that run may be undone once its
                // region is decided, its copies forgotten, so nothing is recorded from the copy.
                // Once no other kernel executes on it (their changes are whole; decisions are
                // not waited for), this run is undone and runs again, then predicted to write
                // it. If it cannot be undone, it is recorded as any run.
                let own = u32::from(replicated);
                let shared: Vec<&Buffer> = match unshared {
                    true => Vec::new(),
                    false => reach
                        .iter()
                        .zip(&changed)
                        .zip(&marked)
                        .filter(|((_, &c), &m)| c && !m)
                        .filter_map(|(((a, ..), _), _)| bufs.get(*a).filter(|b| b.replica_on.get(&w).copied().unwrap_or(0) > own))
                        .collect(),
                };
                if shared.iter().any(|b| b.executing_on(w)) {
                    self.ledger.moved.wait(&mut bufs);
                    continue;
                }
                let run = Run { w, reach: &reach, changed: &changed, snaps: &snaps };
                let step = if !shared.is_empty() {
                    drop(bufs);
                    match Merger::of(*self).rerun_shared(&run) {
                        Some(e) => {
                            self.meter.stats.replicas.shared_reruns.fetch_add(1, Ordering::Relaxed);
                            Err(e)
                        }
                        None => {
                            unshared = true;
                            continue;
                        }
                    }
                } else {
                    let unmerged = reach.iter().zip(&changed).enumerate().any(|(i, (&(addr, _, _, version), c))| {
                        *c && !merged.contains(&i)
                            && bufs.get(addr).is_some_and(|b| needs_merge(b, w, version, patches.contains_key(&i)) || b.undone_on(w) != snaps[i].undone_start)
                    });
                    if !unmerged {
                        break bufs;
                    }
                    drop(bufs);
                    Merger::of(*self).merge_concurrent_changes(&run, &kernel, &patches, &merged).map(|m| merged.extend(m))
                };
                match step {
                    Ok(()) => {}
                    Err(e) => {
                        Replicator::of(*self).abandon(&reach, &marked, std::mem::take(&mut agree));
                        // Its blocks become no buffers: gone from its worker too.
                        Replicator::of(*self).delete_blocks(w, &allocated);
                        if tiebreak.is_none() {
                            settle_grant(&[]);
                        }
                        let deleted = release_writes(&mut self.ledger.buffers.lock(), Some(&changed));
                        self.ledger.moved.notify_all();
                        Memory::of(*self).finish_deletes(deleted)?;
                        return Err(e);
                    }
                }
            };
            Replicator::of(*self).settle_agreeing(&mut bufs, &reach, &mut agree);
            // The unsaved kernel time behind what it read, for the versions it makes
            // (`Buffer::lineage_ns`).
            let behind = reach.iter().filter_map(|(a, ..)| bufs.get(*a).map(|b| b.exposed_ns())).max().unwrap_or(0);
            deleted = release_writes(&mut bufs, Some(&changed));
            let mut found = pointers.into_iter();
            for (i, ((addr, _, id, version), c)) in reach.iter().zip(changed).enumerate() {
                reads.push(Access { buffer: *id, version: *version });
                if !c {
                    continue;
                }
                let f = found.next().unwrap_or(FoundPointers::Many);
                if merged.contains(&i) {
                    clean = false;
                    // Its changes were applied to the current version (see
                    // `merge_concurrent_changes`); this worker's copy holds no recorded version.
                    if let Some(b) = bufs.get_mut(*addr) {
                        b.points_to.add(PointsTo::from(f));
                    }
                    bufs.drop_copy(*addr, w);
                    continue;
                }
                if let Some(b) = bufs.get_mut(*addr) {
                    if b.version != *version && !b.holders.contains(&w) && b.global_of.is_some() {
                        if let Some(p) = patches.remove(&i) {
                            clean = false;
                            // The globals and statics of one image are one buffer: regions
                            // writing different ones at the same time on different workers
                            // change different bytes. Patch this kernel's bytes into the
                            // copies holding the other change (as a partial submit would).
                            b.points_to.add(PointsTo::from(f));
                            merges.push((b.addr, p));
                            *b.commits_from.entry(w).or_default() += 1;
                            continue;
                        }
                    }
                    // Another kernel that shared the copy was recorded while this one ran: its
                    // version holds that one's changes too (and its scan may be of a later
                    // state). For recovery, this one ran after it, over that version: re-run
                    // from the version it started from, it would lose the other's changes.
                    let alone = b.commits_from.get(&w).copied().unwrap_or(0) == snaps[i].commits_start;
                    // The version it makes is exactly its change of the version it started from.
                    let exact_change = alone && b.version == *version;
                    clean &= exact_change;
                    if alone {
                        b.points_to = PointsTo::from(f);
                    } else {
                        b.points_to.add(PointsTo::from(f));
                        if b.holders.contains(&w) {
                            if let Some(r) = reads.last_mut() {
                                r.version = b.version;
                            }
                        }
                    }
                    *b.commits_from.entry(w).or_default() += 1;
                    let (addr, id, span, staged) = (b.addr, b.id, b.span, b.staged());
                    let made_by = b.made_by;
                    // Bytes sent back for the version this one replaces, never retrieved: the
                    // kernel that sent them guessed wrong.
                    if bufs.take_sent_back(addr).is_some() {
                        unlearn.extend(made_by.map(|(_, e, m)| (e, m)));
                    }
                    let v = bufs.new_version(addr, [w].into()).expect("live buffer");
                    if exact_change {
                        Replicator::of(*self).install(&mut bufs, i, addr, v, &snaps, &agree);
                        made.push((i, v));
                    }
                    // Bytes sent back are this version's only if no other kernel changed the
                    // copy meanwhile (recorded above, or running there still).
                    let exact = alone && bufs.get(addr).is_some_and(|b| !b.using.contains_key(&w));
                    if let Some(bytes) = returned.remove(&i).filter(|_| exact) {
                        bufs.set_sent_back(addr, v, bytes);
                    }
                    if let Some(b) = bufs.get_mut(addr) {
                        b.made_by = Some((v, entry, reach_args[i]));
                        b.lineage_ns = (kernel_s * 1e9) as u64 + behind;
                    }
                    if staged && bufs.get(addr).is_some_and(|b| b.version_on(HEAD).is_none()) {
                        // The head keeps no version of it (over the retention budget): give
                        // the staged copy's memory back (it stays mapped).
                        self.durability.before_changing_staged(addr);
                        let _ = self.offload.heap.discard(addr, span);
                    }
                    writes.push(Access { buffer: id, version: v });
                    logged.push(addr);
                }
            }
            if let (true, Some(key)) = (clean, task_key) {
                // What it changed is a function of what it read: deterministic keys, and an
                // entry in the log (anything else keeps the fresh keys of `new_version`).
                let mut written = Vec::with_capacity(logged.len());
                for &addr in &logged {
                    if let Some(b) = bufs.get_mut(addr) {
                        b.key = crate::journal::key::written(key, addr);
                        let ptrs = match &b.points_to {
                            PointsTo::Some(p) => Some(p.iter().copied().collect()),
                            PointsTo::All => None,
                        };
                        written.push((addr, ptrs));
                    }
                }
                self.durability.log_task(crate::journal::TaskEntry { key, kernel: kernel.name.to_string(), writes: written, output, errors, kernel_s });
            }
            let allocs = Blocks::of(*self).adopt_blocks(&mut bufs, w, allocated, grant, &mut reads, &mut writes);
            // Replicas that made the same blocks (at the same addresses, with the same bytes:
            // their ballots agree) hold them too.
            Replicator::of(*self).install_blocks(&mut bufs, &allocs, &agree);
            settle_grant(&allocs);
            if let (Some(tell), Some(ballot)) = (&tells, ballot) {
                // Under the lock that records it: a tail settled next sees these versions.
                let majority = std::iter::once(w).chain(agree.iter().map(|r| r.w)).collect();
                let _ = tell.send(Outcome { ballot, majority, snaps: snaps.clone(), made, blocks: allocs.clone() });
            }
            let record = TaskRecord {
                id: 0,
                kernel: kernel.name.clone(),
                image: kernel.image,
                index: kernel.index,
                args: args.to_vec(),
                worker: w,
                reads,
                writes,
                start_s: t0,
                end_s: self.meter.start.elapsed().as_secs_f64(),
                kernel_s,
                op: task_graph::Op::Kernel,
                allocs,
                replicated,
            };
            // Recorded before the versions it made can be seen by anyone: regions that change
            // one buffer are recorded in the order of the versions they made (recovery re-runs
            // them in record order). Not with image data to merge: the versions that makes
            // come later, and it is recorded after them (below).
            if merges.is_empty() {
                done = self.ledger.graph.lock().record(record);
                unrecorded = None;
            } else {
                done = 0;
                unrecorded = Some(record);
            }
        }
        self.ledger.moved.notify_all();
        if !unlearn.is_empty() {
            let kernels = self.offload.kernels.read();
            for (e, m) in unlearn {
                if let Some(k) = kernels.get(&e) {
                    k.send_back.fetch_and(!m, Ordering::Relaxed);
                }
            }
        }
        for (addr, runs) in merges {
            for (off, bytes) in runs {
                // SAFETY: `bytes` is a readable local vector; the gate is held (`_gate`).
                unsafe { Memory::of(*self).submit_inner(addr + off, bytes.as_ptr(), bytes.len() as u64)? };
            }
            if let (Some(b), Some(r)) = (self.ledger.buffers.lock().get(addr), unrecorded.as_mut()) {
                r.writes.push(Access { buffer: b.id, version: b.version });
            }
            self.meter.log(format_args!("MERGE image data {addr:#x}: changes of {} on {w} applied to the current copies", kernel.name));
        }
        self.offload.sched.task_finished(kernel_s);
        kernel.last_ns.store((kernel_s * 1e9) as u64, Ordering::Relaxed);
        self.meter.stats.replicas.region_ns.fetch_add((kernel_s * 1e9) as u64, Ordering::Relaxed);
        if let (Some(chooser), false) = (&self.offload.chooser, logged.is_empty()) {
            chooser.lock().made(entry);
        }
        self.meter.stats.add_task(w);
        let done = match unrecorded {
            Some(r) => self.ledger.graph.lock().record(r),
            None => done,
        };
        if let (Some(t), Some((sent, replied))) = (&self.meter.trace, traced) {
            let args = vec![("task", json!(done)), ("kernel_us", json!(kernel_s * 1e6)), ("buffers", json!(reach.len()))];
            t.span_at(Cat::Kernel, w, kernel.name.clone(), sent, replied - sent, args);
        }
        // What it freed of what device code allocated before (after the record: a re-run of
        // a task that read it may still need it, see `delete`).
        for addr in freed {
            Blocks::of(*self).free_block(w, addr)?;
        }
        Memory::of(*self).finish_deletes(deleted)?;
        Pruner::of(*self).maybe_prune();
        Faults::of(*self).inject_due(|t| matches!(t, crate::inject::Trigger::AfterTasks(n) if *n <= done + 1));
        if self.meter.verbose() {
            let took = self.meter.start.elapsed().as_secs_f64() - t0;
            let replicas = match (agreeing.is_empty(), tail_ranks.is_empty()) {
                (true, true) => String::new(),
                _ => format!(" (replicas agreeing on {agreeing:?}, still running on {tail_ranks:?})"),
            };
            self.meter.log(format_args!("EXECUTE {} task #{done} on {w}{replicas}: {:.3} ms in kernel, {:.3} ms total", kernel.name, kernel_s * 1e3, took * 1e3));
        }
        Ok(())
    }

    /// Learn what `kernel` writes from a run over `reach` (`reach_args`: the arguments each
    /// was reached through) that changed `changed` (of what it reaches through no argument:
    /// its image's data, or buffers through pointers stored in others).
    fn learn_writes(&self, kernel: &Kernel, reach: &[(u64, u64, u64, u64)], reach_args: &[u64], changed: &[bool]) {
        let is_global: Vec<bool> = if reach_args.iter().zip(changed).any(|(&a, &c)| c && a == 0) {
            let bufs = self.ledger.buffers.lock();
            reach.iter().map(|(a, ..)| bufs.get(*a).is_some_and(|b| b.global_of.is_some())).collect()
        } else {
            Vec::new()
        };
        let mut h = kernel.writes.lock();
        let h = h.get_or_insert_with(WriteSet::default);
        for (i, (&args, _)) in reach_args.iter().zip(changed).enumerate().filter(|(_, (_, c))| **c) {
            match (args, is_global.get(i)) {
                (0, Some(true)) => h.globals = true,
                (0, _) => h.other = true,
                _ => h.args |= args,
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn run_on(
        &self,
        w: i32,
        kernel: &Kernel,
        args: &[u64],
        reach: &[(u64, u64, u64, u64)],
        assume_written: Vec<bool>,
        send_back: Vec<bool>,
        snaps: &mut Vec<Snap>,
    ) -> Result<Executed> {
        self.prepare_on(w, reach, snaps)?;
        let short = kernel.last_ns.load(Ordering::Relaxed) < SHORT_KERNEL_NS;
        let run = Execute { image: kernel.image, kernel: kernel.index, args, regions: regions_of(reach), assume_written, send_back, replay: Vec::new(), short, quiet: false, digest: false, arena: None };
        let ran = Executor::of(*self).execute(w, run);
        if ran.is_err() {
            self.ended(&mut self.ledger.buffers.lock(), w, reach, snaps, false);
            self.ledger.moved.notify_all();
        }
        ran
    }

    /// Make `w` ready to run a kernel over `reach`: its inputs moved there, no merge holding
    /// a copy it uses; it then counts as running on them (until [`Self::ended`]) and `snaps`
    /// says what its copies were at the start. On an error nothing of that happened.
    fn prepare_on(&self, w: i32, reach: &[(u64, u64, u64, u64)], snaps: &mut Vec<Snap>) -> Result<()> {
        self.move_inputs(w, reach)?;
        *snaps = self.start_set(&[w], reach).pop().expect("one worker")?;
        Ok(())
    }

    /// Move to `w` the inputs over `reach` it lacks: those from the head go out together,
    /// their answers are awaited together.
    pub(super) fn move_inputs(&self, w: i32, reach: &[(u64, u64, u64, u64)]) -> Result<()> {
        let mut pending = Vec::new();
        let started = Movement::of(*self).start_moves(reach.iter().map(|r| r.0), w, &mut pending);
        let finished = Movement::of(*self).finish_moves(&mut pending);
        started?;
        finished?;
        Ok(())
    }

    /// Start a kernel over `reach` on each worker of `ws` (its inputs moved there) at once:
    /// once no merge holds a copy any of them uses, under one lock, so that no replica counts
    /// as running while another waits (a merge waiting for it would never end). Each then
    /// counts as running on its copies until [`Self::ended`]; per worker, what its copies
    /// were at the start, or why it cannot start ([`ClusterError::RunAgain`]: placed again).
    pub(super) fn start_set(&self, ws: &[i32], reach: &[(u64, u64, u64, u64)]) -> Vec<Result<Vec<Snap>>> {
        let mut bufs = self.ledger.buffers.lock();
        while ws.iter().any(|&w| reach.iter().any(|(a, ..)| bufs.get(*a).is_some_and(|b| b.holding.contains_key(&w) || b.buddy_reading == Some(w)))) {
            self.ledger.moved.wait(&mut bufs);
        }
        ws.iter()
            .map(|&w| {
                // The version each copy holds now (a newer one than at placement, if one was
                // made meanwhile). A merge may also have taken changes of this worker's copy
                // elsewhere, leaving the copy no recorded version: then it is placed again.
                let mut versions = Vec::with_capacity(reach.len());
                for &(a, _, _, v) in reach {
                    match bufs.get(a) {
                        Some(b) if v == 0 && b.version == 0 => versions.push(0),
                        Some(b) => match b.version_on(w) {
                            Some(now) if now >= v => versions.push(now),
                            _ => return Err(ClusterError::RunAgain(Box::new(ClusterError::Unplaced(a)))),
                        },
                        None => versions.push(v),
                    }
                }
                for (a, ..) in reach {
                    if let Some(b) = bufs.get_mut(*a) {
                        *b.running.entry(w).or_default() += 1;
                    }
                }
                Ok(reach
                    .iter()
                    .zip(versions)
                    .map(|((a, ..), version)| {
                        bufs.get(*a).map_or(Snap { version, ..Snap::default() }, |b| Snap {
                            version,
                            commits_start: b.commits_from.get(&w).copied().unwrap_or(0),
                            undone_start: b.undone_on(w),
                            begun_start: b.uses_begun.get(&w).copied().unwrap_or(0),
                            possible_start: b.possible_writes_on(w),
                            // Its own placement counts one use.
                            shared: b.using.get(&w).is_some_and(|&n| n > 1),
                            ..Snap::default()
                        })
                    })
                    .collect())
            })
            .collect()
    }

    /// The kernel of a run of a region with replicas replied on `w` (`replicas.rs`): it still
    /// counts as running on its copies until it is settled ([`Self::ended`] with `replied`),
    /// but no longer changes them; `snaps` get what happened to its copies until it ended
    /// (as [`Self::ended`] gives them) and whether they were shared.
    pub(super) fn replied(&self, bufs: &mut Buffers, w: i32, reach: &[(u64, u64, u64, u64)], snaps: &mut [Snap]) {
        for ((a, ..), snap) in reach.iter().zip(snaps.iter_mut()) {
            if let Some(b) = bufs.get_mut(*a) {
                *b.replied.entry(w).or_default() += 1;
                snap.commits_end = b.commits_from.get(&w).copied().unwrap_or(0);
                snap.merges_end = b.merges_from.get(&w).copied().unwrap_or(0);
                snap.shared |= b.uses_begun.get(&w).copied().unwrap_or(0) != snap.begun_start;
            }
        }
    }

    /// A kernel that [`Self::run_on`] ran on `w` ended: it no longer runs on its copies (the
    /// caller notifies `moved`). Called once per successful `run_on` (which calls it itself
    /// on failure), under the lock that records the run, to save a lock round.
    /// `replied`: [`Self::replied`] was called for it.
    pub(super) fn ended(&self, bufs: &mut Buffers, w: i32, reach: &[(u64, u64, u64, u64)], snaps: &mut [Snap], replied: bool) {
        for ((a, ..), snap) in reach.iter().zip(snaps.iter_mut()) {
            if let Some(b) = bufs.get_mut(*a) {
                if replied {
                    if let Some(n) = b.replied.get_mut(&w) {
                        *n -= 1;
                        if *n == 0 {
                            b.replied.remove(&w);
                        }
                    }
                }
                if let Some(n) = b.running.get_mut(&w) {
                    *n -= 1;
                    if *n == 0 {
                        b.running.remove(&w);
                    }
                }
                // A run that replied got these when its kernel ended (`Self::replied`).
                if !replied {
                    snap.commits_end = b.commits_from.get(&w).copied().unwrap_or(0);
                    snap.merges_end = b.merges_from.get(&w).copied().unwrap_or(0);
                    snap.shared |= b.uses_begun.get(&w).copied().unwrap_or(0) != snap.begun_start;
                }
            }
        }
    }
}

/// The regions an EXECUTE over `reach` names.
pub(super) fn regions_of(reach: &[(u64, u64, u64, u64)]) -> Vec<Region> {
    reach.iter().map(|&(addr, size, ..)| Region { addr, size }).collect()
}
