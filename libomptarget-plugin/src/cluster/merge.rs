//! Merging the changes regions running at the same time made to one buffer in different
//! workers' copies, or undoing one of them ([`Merger`]; see `launch.rs` for why they happen).
//!
//! A region whose kernel was not expected to write a buffer runs where placement put it; if
//! it changed the buffer while a region elsewhere changed it too,
//! [`Merger::merge_concurrent_changes`] merges three-way: against a copy of the version it
//! started from, its changed bytes are written into the current version where that version
//! still has the old bytes. If both changed a byte (even to the same value: two increments of
//! one counter), its run is undone ([`Merger::rerun_or`]: its copies are forgotten) and the
//! region runs again over the other's change, as one after the other on one device.
//!
//! Concurrency (design note). Kernels on one worker share its copy, so a copy's unrecorded
//! changes belong to every kernel that ran on it. Four rules keep merges and undos exact:
//! * A merge *holds* the copies it reads or patches (`Buffer::holding`): no kernel starts on
//!   them, no transfer overwrites them, no other merge holds them; it proceeds once no kernel
//!   runs on them (`Buffer::running`). So it sees each kernel's changes whole, and merges of
//!   one copy go one at a time. It never holds while waiting for another merge, and running
//!   kernels wait for nothing, so merges cannot deadlock.
//! * A merge of a worker's copy carries the changes of every kernel that ended there before
//!   it (`Buffer::merges_from`): such a kernel's own merge has nothing left to do.
//! * An undo discards the changes of every kernel that shared the copy and is not yet
//!   recorded (`Buffer::undone`): they run again too. A run is undone only if none of its
//!   changes can have gone elsewhere: nothing was recorded or merged from its copy while it
//!   ran (`Buffer::commits_from`), and no copy was taken from it (`Buffer::torn`).
//! * A kernel starts over the version its copy holds when it starts (not when it was placed);
//!   a copy left with no recorded version by a merge makes it placed again.
use super::durability::Durability;
use super::ledger::Ledger;
use super::link::Link;
use super::memory::Memory;
use super::meter::Meter;
use super::movement::Movement;
use super::offload::Kernel;
use super::offload::Offload;
use super::{ClusterError, Result};
use crate::data::{Buffer, Buffers, Place};
use crate::inject::Injector;
use event_system::Liveness;
use event_system::protocol::{Patch, Region};
use rustc_hash::FxHashMap as HashMap;
use std::collections::BTreeSet;

/// A kernel run, as merging and undoing it need it.
pub(super) struct Run<'a> {
    /// Its worker.
    pub(super) w: i32,
    /// What it reached: (address, size, buffer id, version it ran over).
    pub(super) reach: &'a [(u64, u64, u64, u64)],
    /// Which of those it changed.
    pub(super) changed: &'a [bool],
    /// What had happened to its worker's copies when it started and when it ended.
    pub(super) snaps: &'a [Snap],
}

/// Counters of one buffer for the worker a kernel ran on (see `Buffer::commits_from`,
/// `Buffer::merges_from`, `Buffer::undone`), when the kernel started and ended running.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Snap {
    /// The version of the buffer its copy held when it started.
    pub(super) version: u64,
    pub(super) commits_start: u64,
    pub(super) undone_start: u64,
    pub(super) commits_end: u64,
    pub(super) merges_end: u64,
    /// Kernels placed on the copy so far (`Buffer::uses_begun`) when it started.
    pub(super) begun_start: u64,
    /// `Buffer::possible_writes` of the copy when it started (for `Buffer::suspects`).
    pub(super) possible_start: u64,
    /// Another region's kernel could use the copy while this one ran (placed there before it
    /// ended, and not done before it started): a change this kernel was not expected to make
    /// may be that one's.
    pub(super) shared: bool,
}

view! {
    /// Merging or undoing concurrent changes: borrows what [`Memory`] does (a merge is applied
    /// as a partial submit) and [`Movement`] (the copies compared are fetched).
    pub(super) struct Merger { link: Link, ledger: Ledger, offload: Offload, durability: Durability, meter: Meter, inject: Injector }
}

impl<'a> Merger<'a> {
    /// Apply the changes a kernel run made to buffers that a region on another worker changed
    /// meanwhile in its own copy: a three-way merge against the version the run started from.
    /// Its changed bytes, where the current version still has that version's bytes, are
    /// written into the current version as a partial update (recorded like a host update, so
    /// recovery can replay it). Returns the indices (into `reach`) of the buffers merged (or
    /// already merged with another kernel's changes of the same copy). A byte both changed
    /// makes the run undone ([`ClusterError::RunAgain`]) or, if it cannot be,
    /// [`ClusterError::Conflict`]. Image data with a patch is merged by the caller.
    pub(super) fn merge_concurrent_changes(&self, run: &Run, kernel: &Kernel, patches: &HashMap<usize, Patch>, done: &BTreeSet<usize>) -> Result<BTreeSet<usize>> {
        let (w, reach, changed) = (run.w, run.reach, run.changed);
        /// One buffer to merge: where the version the kernel started from and the current
        /// version are.
        struct Merge {
            index: usize,
            region: Region,
            base: Option<i32>,
            current: i32,
        }
        // The copies read or patched are held (no kernel starts on them, no transfer
        // overwrites them) and read once no kernel runs on them (see the module's note).
        let mut held: Vec<(u64, i32)> = Vec::new();
        let mut todo = Vec::new();
        let mut included = BTreeSet::new();
        // A copy of the version it started from that no running kernel may change: a worker's
        // (held below), else the head's.
        let base_of = |b: &Buffer, version: u64| {
            let clean = |r: &i32| *r != w && !self.link.live.is_dead(*r) && b.clean_copy(*r, version);
            b.ranks_with(version).filter(|&r| Place::of(r).is_worker()).find(clean).or_else(|| b.ranks_with(version).find(|&r| Place::of(r) == Place::Head).filter(clean))
        };
        let stop = |held: &mut Vec<(u64, i32)>, e: ClusterError| -> ClusterError {
            self.unhold(held);
            e
        };
        loop {
            let mut bufs = self.ledger.buffers.lock();
            unhold_locked(&mut bufs, &mut held);
            // `busy`: a kernel runs on one of the copies; `taken`: another merge holds one
            // (merges of one copy go one at a time: each sees what the one before did).
            let (mut busy, mut taken) = (false, false);
            for (i, (&(addr, _, _, version), _)) in reach.iter().zip(changed).enumerate().filter(|(i, (_, c))| **c && !done.contains(i)) {
                let Some(b) = bufs.get(addr) else { continue };
                if !(needs_merge(b, w, version, patches.contains_key(&i)) || b.undone_on(w) != run.snaps[i].undone_start) {
                    continue;
                }
                let base = base_of(b, version).filter(|&r| Place::of(r).is_worker());
                let ranks: Vec<i32> = [w].into_iter().chain(self.link.live_workers(&b.holders)).chain(base).collect();
                busy |= ranks.iter().any(|r| b.running.get(r).is_some_and(|&n| n > 0));
                taken |= ranks.iter().any(|r| b.holding.contains_key(r));
                held.extend(ranks.into_iter().map(|r| (addr, r)));
            }
            if held.is_empty() {
                return Ok(BTreeSet::new());
            }
            if taken {
                held.clear();
                self.ledger.moved.wait(&mut bufs);
                continue;
            }
            hold_locked(&mut bufs, &held);
            if busy {
                self.ledger.moved.wait(&mut bufs);
                continue;
            }
            for (i, (&(addr, size, _, version), _)) in reach.iter().zip(changed).enumerate().filter(|(i, (_, c))| **c && !done.contains(i)) {
                let Some(b) = bufs.get(addr) else { continue };
                let others: Vec<i32> = b.holders.iter().copied().collect();
                if b.undone_on(w) != run.snaps[i].undone_start {
                    // A kernel that shared this worker's copy was undone, and this run's
                    // changes with it: this run must be made again too.
                    let e = conflict(b, w, others, "a region sharing this copy could not be merged either");
                    drop(bufs);
                    let e = self.rerun_or(e, run, done);
                    return Err(stop(&mut held, e));
                }
                if !needs_merge(b, w, version, patches.contains_key(&i)) {
                    continue;
                }
                if b.merges_from.get(&w).copied().unwrap_or(0) > run.snaps[i].merges_end {
                    // A kernel that shared this worker's copy merged it after this one ended:
                    // this run's changes are in.
                    included.insert(i);
                    continue;
                }
                let Some(current) = b.holders.iter().copied().find(|&r| !self.link.live.is_dead(r)) else {
                    // The other change is lost with its worker: recovery rebuilds it, then this
                    // kernel runs again over it.
                    drop(bufs);
                    self.unhold(&mut held);
                    self.forget_copies_changed(run);
                    return Err(ClusterError::Lost(addr));
                };
                // The version it started from: zeros, or the copy chosen (and held) above.
                let copy = base_of(b, version);
                let why = if b.global_of.is_some() {
                    Some("regions writing device globals or statics, even different ones, must not overlap in time: order them with depend or taskwait")
                } else if version != 0 && copy.is_none() {
                    Some("no copy of the version both started from is left to tell the two changes apart")
                } else {
                    None
                };
                if let Some(why) = why {
                    let e = conflict(b, w, others, why);
                    drop(bufs);
                    let e = self.rerun_or(e, run, done);
                    return Err(stop(&mut held, e));
                }
                let base = if version == 0 { None } else { copy };
                todo.push(Merge { index: i, region: Region { addr, size }, base, current });
            }
            break;
        }
        if todo.is_empty() {
            self.unhold(&mut held);
            return Ok(included);
        }
        // Per buffer: this run's copy, the version it started from, the current version.
        type Copies = (Vec<u8>, Vec<u8>, Vec<u8>);
        let fetched: Result<Vec<Copies>> = todo
            .iter()
            .map(|m| {
                let mine = Movement::of(*self).fetch(m.region, w)?;
                let base = match m.base {
                    None => vec![0u8; m.region.size as usize],
                    Some(r) => Movement::of(*self).fetch(m.region, r)?,
                };
                Ok((mine, base, Movement::of(*self).fetch(m.region, m.current)?))
            })
            .collect();
        let fetched = match fetched {
            Ok(f) => f,
            Err(e) => {
                // Nothing of this run is recorded: it runs again, over the recorded versions.
                self.unhold(&mut held);
                self.forget_copies_changed(run);
                return Err(e);
            }
        };
        // Every buffer is checked before any is changed, so that the kernel can still run
        // again instead.
        let mut plans = Vec::new();
        for (m, (mine, base, current)) in todo.iter().zip(fetched) {
            let mut apply = Vec::new();
            for (off, changed_run) in event_system::protocol::diff(&base, &mine, &[(0, mine.len())]) {
                let range = off as usize..off as usize + changed_run.len();
                // The run joins changed bytes with unchanged ones between them: those keep
                // the current version's bytes.
                let (b, c) = (&base[range.clone()], &current[range]);
                let new: Vec<u8> = changed_run.iter().zip(b).zip(c).map(|((&m, &b), &c)| if m == b { c } else { m }).collect();
                // A byte both changed overlaps even if to the same value: two increments of a
                // counter from one value give one value, but the result must count both.
                if changed_run.iter().zip(b).zip(c).any(|((&m, &b), &c)| m != b && c != b) {
                    // Both changed the same bytes: one region's change must be made over the
                    // other's, as on one device.
                    let e = match self.ledger.buffers.lock().get(m.region.addr) {
                        Some(b) => conflict(b, w, b.holders.iter().copied().collect(), "both changed the same bytes; map it with map(from:) or map(tofrom:) in the regions that write it (they then share one worker) or order them with depend"),
                        None => ClusterError::UnknownAddress(m.region.addr),
                    };
                    let e = self.rerun_or(e, run, done);
                    return Err(stop(&mut held, e));
                }
                apply.push((off, new));
            }
            plans.push((m, apply));
        }
        let mut merged = included;
        for (m, apply) in plans {
            for (off, bytes) in &apply {
                // SAFETY: `bytes` is a readable local vector; the caller holds the gate.
                if let Err(e) = unsafe { Memory::of(*self).submit_inner(m.region.addr + off, bytes.as_ptr(), bytes.len() as u64) } {
                    return Err(stop(&mut held, e));
                }
            }
            self.meter.log(format_args!(
                "MERGE {:#x}: {} run(s) changed by {} on {w} applied to the version changed meanwhile on {}",
                m.region.addr,
                apply.len(),
                kernel.name,
                m.current
            ));
            self.meter.stats.add_merge();
            if let Some(b) = self.ledger.buffers.lock().get_mut(m.region.addr) {
                *b.commits_from.entry(w).or_default() += 1;
                *b.merges_from.entry(w).or_default() += 1;
            }
            merged.insert(m.index);
        }
        self.unhold(&mut held);
        Ok(merged)
    }

    /// Release copies held by [`Self::merge_concurrent_changes`].
    fn unhold(&self, held: &mut Vec<(u64, i32)>) {
        unhold_locked(&mut self.ledger.buffers.lock(), held);
        self.ledger.moved.notify_all();
    }

    /// What to do with a kernel run whose changes cannot be merged (`e` says why): if none of
    /// its changes was merged yet and every version it changed still has a copy elsewhere,
    /// forget its copies and return [`ClusterError::RunAgain`]: it then runs again, over the
    /// other region's change, as one after the other on one device. Else `e`.
    pub(super) fn rerun_or(&self, e: ClusterError, run: &Run, done: &BTreeSet<usize>) -> ClusterError {
        self.rerun_unless(e, run, done, false)
    }

    /// [`Self::rerun_or`] for a run of a region with replicas, whose other runs on its copies
    /// may have replied without being settled (`Buffer::replied`): they change nothing any
    /// more, and do not keep it from being undone.
    pub(super) fn rerun_or_replied(&self, e: ClusterError, run: &Run) -> ClusterError {
        self.rerun_unless(e, run, &BTreeSet::new(), true)
    }

    fn rerun_unless(&self, e: ClusterError, run: &Run, done: &BTreeSet<usize>, replied: bool) -> ClusterError {
        if !self.restorable(run, done, replied) {
            return e;
        }
        self.undo(run);
        self.meter.log(format_args!("RUN AGAIN on {}: {e}", run.w));
        ClusterError::RunAgain(Box::new(e))
    }

    /// A run that changed a copy a run of another region with replicas shares on its worker,
    /// which it was not expected to write (`launch.rs`): undone, to run again
    /// ([`ClusterError::RunAgain`]), if [`Self::rerun_or`] would undo it, but for the other
    /// runs there whose kernels replied and are not settled yet (`Buffer::replied`), which
    /// changed nothing any more. None if it cannot be undone.
    pub(super) fn rerun_shared(&self, run: &Run) -> Option<ClusterError> {
        if !self.restorable(run, &BTreeSet::new(), true) {
            return None;
        }
        let e = {
            let bufs = self.ledger.buffers.lock();
            let (i, _) = run.reach.iter().zip(run.changed).enumerate().find(|(_, (_, c))| **c)?;
            let b = bufs.get(run.reach[i].0)?;
            conflict(b, run.w, b.replica_on.keys().copied().filter(|&r| r != run.w).collect(), "it changed a copy that a region with replicas shares on its worker, which it was not expected to write")
        };
        self.undo(run);
        self.meter.log(format_args!("RUN AGAIN on {}: {e}", run.w));
        Some(ClusterError::RunAgain(Box::new(e)))
    }

    /// Can `run` be undone and run again (see [`Self::rerun_or`])? `replied`: other kernels
    /// on its copies that replied (`Buffer::replied`) do not count as sharing them.
    pub(super) fn restorable(&self, run: &Run, done: &BTreeSet<usize>, replied: bool) -> bool {
        let w = run.w;
        done.is_empty() && {
            let bufs = self.ledger.buffers.lock();
            run.reach.iter().zip(run.changed).zip(run.snaps).filter(|((_, c), _)| **c).all(|((&(addr, _, _, version), _), snap)| {
                // Nothing of this run's changes went elsewhere: no other kernel shares its copy
                // now, none recorded or merged changes from it meanwhile (they would carry this
                // run's too), and no copy was taken from it (a region elsewhere may have used
                // them). And the version it started from is still somewhere.
                bufs.get(addr).is_some_and(|b| {
                    let others = if replied { b.replied.get(&w).copied().unwrap_or(0) } else { 0 };
                    b.running.get(&w).is_none_or(|&n| n <= others)
                        && snap.commits_start == snap.commits_end
                        && b.commits_from.get(&w).copied().unwrap_or(0) == snap.commits_start
                        && !b.torn.values().any(|&s| s == w)
                }) && bufs.get(addr).is_some_and(|b| {
                    version == b.pristine_version()
                        || b.ranks_with(version).any(|r| r != w && !self.link.live.is_dead(r) && b.clean_copy(r, version))
                        || (b.version != version && b.holders.iter().any(|&r| !self.link.live.is_dead(r)))
                })
            })
        }
    }

    /// Forget what the kernel run `run` changed: its worker's copies of those buffers hold no
    /// known version any more (version 0's are made zeros again), and the kernels that shared
    /// them and are not recorded yet run again (see `Buffer::undone`).
    pub(super) fn undo(&self, run: &Run) {
        {
            let mut bufs = self.ledger.buffers.lock();
            for ((addr, ..), _) in run.reach.iter().zip(run.changed).filter(|(_, c)| **c) {
                if let Some(b) = bufs.get_mut(*addr) {
                    *b.undone.entry(run.w).or_default() += 1;
                }
            }
        }
        self.forget_copies_changed(run);
    }

    /// Forget `w`'s copies of the buffers a kernel changed there whose changes are not
    /// recorded (they hold no known version).
    fn forget_copies_changed(&self, run: &Run) {
        let w = run.w;
        let mut zeroed = Vec::new();
        {
            let mut bufs = self.ledger.buffers.lock();
            for ((addr, ..), _) in run.reach.iter().zip(run.changed).filter(|(_, c)| **c) {
                bufs.drop_copy(*addr, w);
                if let Some(b) = bufs.get_mut(*addr).filter(|b| b.version == 0) {
                    // Every backed copy counts as version 0 (zeros): make this one zeros again
                    // before anything can use it.
                    b.incoming.insert(w);
                    zeroed.push(Region { addr: b.addr, size: b.size });
                }
            }
        }
        for r in zeroed {
            let zeros = vec![0u8; r.size as usize];
            // SAFETY: `zeros` is a readable local vector, kept until the send completes (on a
            // dead peer it is leaked below, as `submit_from` requires).
            let sent = unsafe { Movement::of(*self).submit_from(r, zeros.as_ptr(), w) };
            if sent.is_err() {
                std::mem::forget(zeros);
            }
            let mut bufs = self.ledger.buffers.lock();
            if let Some(b) = bufs.get_mut(r.addr) {
                b.incoming.remove(&w);
                // Zeros written over a copy another kernel may still use: no suspect's own.
                b.possibly_written(w);
            }
        }
        self.ledger.moved.notify_all();
    }

}


/// The error for changes of one buffer made at the same time on different workers that
/// cannot be merged.
fn conflict(b: &Buffer, worker: i32, others: Vec<i32>, advice: &'static str) -> ClusterError {
    let what = match b.global_of {
        Some(i) => format!("the device globals and statics of device image {i} (.data and .bss)"),
        None => "the device buffer".to_string(),
    };
    ClusterError::Conflict { what, advice, addr: b.addr, size: b.size, worker, others }
}

/// Must the change a kernel on `w` made to `b`, which it reached at `version`, be merged
/// into a version another worker made meanwhile? (Image data with a patch is merged apart.)
pub(super) fn needs_merge(b: &Buffer, w: i32, version: u64, patched: bool) -> bool {
    b.version != version && !b.holders.contains(&w) && !(b.global_of.is_some() && patched)
}

/// Hold each (buffer, rank) copy in `held` (see `Buffer::holding`).
fn hold_locked(bufs: &mut Buffers, held: &[(u64, i32)]) {
    for &(addr, r) in held {
        if let Some(b) = bufs.get_mut(addr) {
            *b.holding.entry(r).or_default() += 1;
        }
    }
}

/// Release what [`hold_locked`] held, and forget it.
fn unhold_locked(bufs: &mut Buffers, held: &mut Vec<(u64, i32)>) {
    for (addr, r) in held.drain(..) {
        if let Some(b) = bufs.get_mut(addr) {
            if let Some(n) = b.holding.get_mut(&r) {
                *n -= 1;
                if *n == 0 {
                    b.holding.remove(&r);
                }
            }
        }
    }
}
