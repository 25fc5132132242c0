//! Recovery from the death of workers: the primitives the recovery algorithm drives.
//!
//! The algorithm (what was lost, where each version comes from, the order of re-runs,
//! planning again, the fatal cases, spares) is `ft_handler::recovery`; reasons and
//! measurements are in `docs/recovery.md`. The handler thread calls [`Recovery::recover`] with
//! the gate held exclusively, so no offloading request is in flight; it records the failures,
//! runs the algorithm over [`Rebuild`] (this device's implementation of its primitives:
//! fencing, forgetting the dead's copies, answering where versions and copies are for the
//! algorithm's decisions (`ft_handler::decide`), running re-runs (`rerun.rs`), restoring
//! versions from checkpoints), then puts the copies it rescued where they belong and writes
//! the report's record. How failures are noticed is `failures.rs`. A rank that dies meanwhile makes it return
//! [`RecoverError::NewFailure`]; the handler calls it again with the larger set (what was
//! rebuilt so far stays rebuilt).

use super::durability::Durability;
use super::failures::Failures;
use super::faults::Faults;
use super::head_copies::HeadCopies;
use super::launch::Launcher;
use super::ledger::Ledger;
use super::link::Link;
use super::meter::Meter;
use super::offload::Offload;
use super::offload::SHORT_KERNEL_NS;
use super::on_head::OnHead;
use super::rerun::Rerunner;
use super::rerun::Side;
use super::resume::Resumer;
use super::tolerance::Tolerance;
use super::{ClusterError, RecoveryRecord, SpareRecord, Stopped};
use crate::checkpoint::Checkpointer;
use crate::config::Config;
use crate::config::Reexec;
use crate::data::{Buffers, Place, HEAD};
use crate::inject::Injector;
use event_system::comm::CommError;
use event_system::process::Victim;
use event_system::protocol::{Event, Region};
use ft_handler::RecoverError;
use ft_handler::decide::{self, Copies};
use ft_handler::recovery::{self as algo, BatchDone, Restored, Stop, View};
use parking_lot::Mutex;
use rustc_hash::FxHashMap as HashMap;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;
use task_graph::{Access, Mark, TaskGraph, TaskRecord};
use timeline::Cat;

/// The primitives of the recovery algorithm (`ft_handler::recovery::Primitives`) over this
/// device, for one call of [`Recovery::recover`]: `side` holds the copies rescued from workers
/// before re-runs overwrote them, for the whole call (an attempt that stops to plan again may
/// already have overwritten where they came from).
struct Rebuild<'a> {
    c: Recovery<'a>,
    side: Side,
    /// Rebuild only the current versions of these buffers (ids) that no rank holds (a resumed
    /// job, `resume.rs`), not every one.
    only: Option<&'a BTreeSet<u64>>,
}

/// Where versions are, for the plan: the buffer, side and record locks are held.
struct HeadView<'a> {
    copies: CopiesView<'a>,
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
pub(super) struct CopiesView<'a> {
    pub(super) bufs: &'a Buffers,
    /// Copies rescued by this recovery.
    pub(super) side: &'a HashMap<Access, Arc<Vec<u8>>>,
    pub(super) ckpt: Option<&'a Checkpointer>,
    /// Checkpointed versions known damaged.
    pub(super) bad: &'a BTreeSet<Access>,
}

impl Copies for CopiesView<'_> {
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
        let live: Vec<i32> = c.link.workers().collect();
        c.fence(dead, &live)?;
        let mut lost = c.ledger.buffers.lock().forget_ranks(dead);
        lost.retain(|a| self.only.is_none_or(|o| o.contains(&a.buffer)));
        Faults::of(c).inject_due(|t| *t == crate::inject::Trigger::DuringRecovery);
        for &r in dead {
            c.tolerance.inject.rearm(r, crate::inject::Trigger::DuringRecovery);
        }
        Ok(lost)
    }

    fn idle_spares(&self) -> Vec<i32> {
        self.c.link.workers().filter(|&w| self.c.tolerance.is_idle_spare(w)).collect()
    }

    fn leave_spares(&self, r: i32, replacing: Option<i32>) {
        let c = self.c;
        c.tolerance.leave_spares(r);
        if let Some(dead) = replacing {
            let at_seconds = c.meter.start.elapsed().as_secs_f64();
            eprintln!("ompcluster: spare rank {r} takes the place of rank {dead} at {at_seconds:.3} s");
            c.tolerance.log_spare(SpareRecord { spare: r, replaced: dead, at_seconds });
        }
    }

    fn targets(&self) -> std::result::Result<Vec<i32>, RecoverError> {
        let c = self.c;
        if c.link.workers().next().is_none() {
            watchdog::waiting("the program's images loaded on the head", || OnHead::of(c).continue_on_head()).map_err(|e| RecoverError::Fatal(format!("every worker died and the head cannot run the target regions itself: {e}")))?;
        }
        Ok(Launcher::of(c).targets().collect())
    }

    fn unheld(&self) -> BTreeSet<Access> {
        self.c.ledger.buffers.lock().unheld().filter(|a| self.only.is_none_or(|o| o.contains(&a.buffer))).collect()
    }

    fn with_view<R>(&self, bad: &BTreeSet<Access>, f: impl FnOnce(&TaskGraph, &dyn View) -> R) -> R {
        // The order every path takes these locks in: buffers, side, record.
        let bufs = self.c.ledger.buffers.lock();
        let side = self.side.lock();
        let graph = self.c.ledger.graph.lock();
        f(&graph, &HeadView { copies: CopiesView { bufs: &bufs, side: &side, ckpt: self.c.durability.ckpt.as_ref(), bad } })
    }

    fn with_copies<R>(&self, bad: &BTreeSet<Access>, f: impl FnOnce(&dyn Copies) -> R) -> R {
        let bufs = self.c.ledger.buffers.lock();
        let side = self.side.lock();
        f(&CopiesView { bufs: &bufs, side: &side, ckpt: self.c.durability.ckpt.as_ref(), bad })
    }

    fn short_kernel_s(&self) -> f64 {
        SHORT_KERNEL_NS as f64 * 1e-9
    }

    fn run_batch(&self, tasks: &[&TaskRecord], w: i32, rescue: &[Access]) -> std::result::Result<BatchDone, Stop> {
        Rerunner::of(self.c).rerun_batch(tasks, w, rescue, &self.side)
    }

    fn restore(&self, a: Access) -> std::result::Result<Option<Restored>, Stop> {
        let c = self.c;
        let (addr, kept) = {
            let bufs = c.ledger.buffers.lock();
            match bufs.by_id(a.buffer) {
                Some(b) if b.ranks_with(a.version).next().is_none() && !self.side.lock().contains_key(&a) => (b.addr, bufs.kept(a)),
                _ => return Ok(None),
            }
        };
        let (bytes, from) = match kept {
            Some(bytes) => (bytes, Restored::Copy),
            None => (Arc::new(Rerunner::of(c).load_checkpointed(a)?), Restored::Checkpoint),
        };
        Rerunner::of(c).put_on_head(a, addr, &bytes).map_err(fatal)?;
        Ok(Some(from))
    }

    fn rerun_done(&self, tasks: &[TaskRecord]) {
        let mut g = self.c.ledger.graph.lock();
        for t in tasks {
            g.mark(t.id, Mark::Reexecuted);
        }
    }

    fn verbose(&self) -> bool {
        self.c.cfg.verbose
    }

    fn log(&self, what: std::fmt::Arguments<'_>) {
        self.c.meter.log(what);
    }

    fn warn(&self, what: std::fmt::Arguments<'_>) {
        eprintln!("ompcluster: {what}");
    }
}

view! {
    /// Recovery: it rebuilds what the dead took, from anywhere, so it borrows the whole cluster
    /// (the settings for the re-run policy, `stopped` for the failures it records).
    pub(super) struct Recovery { link: Link, ledger: Ledger, offload: Offload, tolerance: Tolerance, durability: Durability, meter: Meter, cfg: Config, stopped: Stopped }
    also { tolerance.inject: Injector }
}

impl<'a> Recovery<'a> {
    /// Rebuild what the `dead` ranks took with them (see the module's documentation).
    pub(super) fn recover(&self, dead: &BTreeSet<i32>) -> std::result::Result<(), RecoverError> {
        // A resumed job: what the checkpoint it resumed from holds is loaded, not re-run.
        if self.durability.resumed() {
            for &r in dead {
                Failures::of(*self).record_failure(r, "declared dead");
            }
            watchdog::waiting("the versions of the checkpoint resumed from", || Resumer::of(*self).adopt_checkpointed(None))?;
        }
        self.recover_only(dead, None)
    }

    /// [`Recovery::recover`], rebuilding of the versions no rank holds only those of the
    /// buffers `only` names (all, if None).
    pub(super) fn recover_only(&self, dead: &BTreeSet<i32>, only: Option<&BTreeSet<u64>>) -> std::result::Result<(), RecoverError> {
        let t0 = Instant::now();
        let traced = self.meter.trace_now();
        let at_seconds = self.meter.start.elapsed().as_secs_f64();
        for &r in dead {
            Failures::of(*self).record_failure(r, "declared dead");
        }
        let attempts = self.tolerance.next_attempt();
        let policy = algo::Policy { parallel: self.cfg.ft_reexec == Reexec::Parallel, ..Default::default() };
        let ops = Rebuild { c: *self, side: Mutex::new(HashMap::default()), only };
        // (`spares` is held across the algorithm: only this thread takes it.)
        let outcome = algo::recover(&ops, dead, policy, &mut self.tolerance.spares.lock());
        let out = match outcome {
            Ok(out) => out,
            Err(e) => {
                if let RecoverError::NewFailure(r) = e {
                    Failures::of(*self).record_failure(r, "declared dead during recovery");
                }
                return Err(e);
            }
        };
        // Rescued copies that are still the only copy of a current version go to the head's
        // copy; those a later recovery may need again are kept apart (within the budget).
        for (a, bytes) in ops.side.into_inner() {
            let addr = {
                let mut bufs = self.ledger.buffers.lock();
                match bufs.by_id(a.buffer) {
                    Some(b) if b.version == a.version && b.holders.is_empty() && bufs.get(b.addr).is_some() => b.addr,
                    _ => {
                        if HeadCopies::of(*self).lineage_needs(&bufs, a, &mut { u64::MAX }) {
                            bufs.keep(a, bytes);
                        }
                        continue;
                    }
                }
            };
            Rerunner::of(*self).put_on_head(a, addr, &bytes).map_err(new_failure)?;
        }
        self.release_retired_on_workers()?;
        self.tolerance.reset_attempts();
        let rec = RecoveryRecord {
            dead: dead.iter().copied().collect(),
            at_seconds,
            paused_seconds: t0.elapsed().as_secs_f64(),
            rerun_rate_per_second: if out.rerun_seconds > 0.0 { out.tasks_reexecuted as f64 / out.rerun_seconds } else { 0.0 },
            spares: self.tolerance.take_spare_log(),
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
        self.meter.trace(traced, Cat::Recovery, HEAD, "recovery", || {
            vec![
                ("dead", json!(rec.dead)),
                ("versions_lost", json!(rec.outcome.versions_lost)),
                ("tasks_reexecuted", json!(rec.outcome.tasks_reexecuted)),
                ("from_checkpoints", json!(rec.outcome.from_checkpoints)),
            ]
        });
        self.tolerance.recoveries.lock().push(rec);
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
            let Some(&(host, victim)) = self.link.process(r) else { continue };
            if host == self.link.head_host() {
                event_system::process::kill(victim);
            } else if let Some(&w) = survivors.iter().find(|&&w| self.link.process(w).is_some_and(|p| p.0 == host)) {
                kills.entry(w).or_default().push(victim);
            }
            let _ = self.link.post(r, Event::Fence { ranks: list.clone(), kill: Vec::new() });
        }
        let mut tags = Vec::new();
        for &w in survivors.iter().filter(|&&w| Place::of(w).is_worker()) {
            let kill = kills.remove(&w).unwrap_or_default();
            tags.push((w, self.link.post(w, Event::Fence { ranks: list.clone(), kill }).map_err(new_failure)?));
        }
        for (w, tag) in tags {
            self.link.expect_ok(w, tag).map_err(new_failure)?;
        }
        Ok(())
    }

    /// Retired buffers that recovery backed on workers (to re-run tasks that read them) are
    /// released there again.
    fn release_retired_on_workers(&self) -> std::result::Result<(), RecoverError> {
        let mut bufs = self.ledger.buffers.lock();
        let ids: Vec<u64> = bufs.retired_ids().collect();
        for id in ids {
            let Some(b) = bufs.by_id_mut(id) else { continue };
            let region = Region { addr: b.addr, size: b.span };
            let on: Vec<i32> = b.backed.iter().copied().filter(|&r| Place::of(r).is_worker()).collect();
            b.keep_head_only();
            for r in on {
                match self.link.post(r, Event::Delete(region)) {
                    Ok(_) | Err(ClusterError::Comm(CommError::PeerDead(_))) => {}
                    Err(e) => return Err(new_failure(e)),
                }
            }
        }
        Ok(())
    }
}

/// Where the copies of buffer `id` are, for the verbose log.
fn copies_of(bufs: &Buffers, id: u64) -> String {
    match bufs.by_id(id) {
        Some(b) => format!("holders {:?} of version {}, stale {:?}", b.holders, b.version, b.stale),
        None => "freed".to_string(),
    }
}

/// A request of recovery failed: a new failure if a rank died (recovery starts again with
/// it), else the end.
pub(super) fn new_failure(e: ClusterError) -> RecoverError {
    match e {
        ClusterError::Comm(CommError::PeerDead(r)) | ClusterError::PeerDead(r) => RecoverError::NewFailure(r),
        e => RecoverError::Fatal(e.to_string()),
    }
}

pub(super) fn fatal(e: ClusterError) -> Stop {
    Stop::Recover(new_failure(e))
}

