//! Pruning the task record ([`Pruner`]): recovery needs only the lineage of what a failure of
//! workers could take, so the record forgets the rest once it has grown (`OMPCLUSTER_FT_*`:
//! the record is first pruned at [`FIRST_PRUNE`] tasks, then each time it has doubled). What
//! is safe from a failure is recovery's own definition (`ft_handler::decide::safe`), asked of
//! a snapshot of the head's copies.

use super::durability::Durability;
use super::head_copies::HeadCopies;
use super::ledger::Ledger;
use super::link::Link;
use super::meter::Meter;
use super::offload::Offload;
use super::buddy;
use crate::checkpoint::Checkpointer;
use crate::config::Config;
use crate::data::{Place, HEAD};
use ft_handler::decide::{self, Copies};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::collections::BTreeSet;
use task_graph::Access;

/// The record is first pruned when it holds this many tasks (then when it has doubled).
pub(super) const FIRST_PRUNE: u64 = 4096;

/// What pruning knows of copies: the head's, taken under the buffer lock, and the checkpoints.
/// Workers' copies count for nothing (a failure may take them).
struct Snapshot<'a> {
    /// Buffer id -> the version the head's copy holds.
    on_head: HashMap<u64, u64>,
    /// Versions the head keeps apart.
    kept: HashSet<Access>,
    ckpt: Option<&'a Checkpointer>,
}

impl Copies for Snapshot<'_> {
    /// Not known here: pruning asks only what is safe, which needs no sizes.
    fn buffer(&self, _id: u64) -> Option<(u64, u64)> {
        None
    }

    fn version_on(&self, id: u64, r: i32) -> Option<u64> {
        (Place::of(r) == Place::Head).then(|| self.on_head.get(&id).copied()).flatten()
    }

    fn holders(&self, a: Access) -> Vec<i32> {
        if self.on_head.get(&a.buffer) == Some(&a.version) {
            vec![HEAD]
        } else {
            Vec::new()
        }
    }

    fn held_apart(&self, a: Access) -> bool {
        self.kept.contains(&a)
    }

    fn checkpointed(&self, a: Access) -> bool {
        self.ckpt.is_some_and(|c| c.holds(a.buffer, a.version))
    }
}

view! {
    /// Pruning the record: borrows the ledger (the record, the buffers' snapshot, the
    /// threshold), the durability (what checkpoints hold), the settings (whether the buddy thread
    /// prunes), and what [`HeadCopies`] borrows (a released buffer's head copy).
    pub(super) struct Pruner { link: Link, ledger: Ledger, offload: Offload, durability: Durability, meter: Meter, cfg: Config }
}

impl<'a> Pruner<'a> {
    /// Does the buddy thread prune the task record (see [`Pruner::maybe_prune`])?
    fn buddy_prunes(&self) -> bool {
        self.ledger.retains() && buddy::policy(self.cfg).enabled() && self.offload.local().is_none()
    }

    /// Keep the task record bounded (called after each region). With buddy copies on, the
    /// buddy thread prunes after each pass, off the offloading threads' path; a region prunes
    /// only if the record has grown to twice the threshold meanwhile (the buddy thread is far
    /// behind, or its interval long).
    pub(super) fn maybe_prune(&self) {
        let at = self.ledger.prune_at();
        let due = if self.buddy_prunes() { at.saturating_mul(2) } else { at };
        if (self.ledger.graph.lock().len() as u64) >= due {
            self.prune();
        }
    }

    /// Forget the tasks recovery can no longer need, if the record holds `prune_at` tasks:
    /// every task outside the lineage of the current versions a failure could take, lineage
    /// stopping at what a failure of workers cannot take (version 0, a published checkpoint,
    /// the head's copies, versions it keeps apart); then the versions kept apart and the
    /// retired buffers only those tasks read.
    ///
    /// The walk and the removals hold only the record's lock, so regions go on meanwhile
    /// (placing, moving data, running; only recording waits): the buffers' side is a snapshot
    /// taken under the buffer lock with the record's length then (tasks are recorded under the
    /// buffer lock, so the two agree). Tasks recorded since are kept, and so is the lineage of
    /// what they read; what became safe since is not used (the snapshot errs on keeping), and
    /// what stopped being safe since was kept apart by whoever overwrote it (`keep_head_version`
    /// asks the record, not yet pruned).
    pub(super) fn prune(&self) {
        if (self.ledger.graph.lock().len() as u64) < self.ledger.prune_at() {
            return;
        }
        let (roots, on_head, kept, upto) = {
            let bufs = self.ledger.buffers.lock();
            let upto = self.ledger.graph.lock().recorded();
            let on_head: HashMap<u64, u64> = bufs
                .iter()
                .map(|b| b.id)
                .chain(bufs.retired_ids())
                .filter_map(|id| bufs.by_id(id).and_then(|b| b.version_on(HEAD)).map(|v| (id, v)))
                .collect();
            let kept = bufs.kept_versions();
            let roots: Vec<Access> = bufs.iter().map(|b| Access { buffer: b.id, version: b.version }).collect();
            (roots, on_head, kept, upto)
        };
        let snapshot = Snapshot { on_head, kept, ckpt: self.durability.ckpt.as_ref() };
        let safe = |a: Access| decide::safe(&snapshot, a);
        let roots: BTreeSet<Access> = roots.into_iter().filter(|&a| !safe(a)).collect();
        let (removed, len) = {
            let mut g = self.ledger.graph.lock();
            let removed = g.prune(&roots, &safe, upto);
            (removed, g.len())
        };
        let released = {
            let mut bufs = self.ledger.buffers.lock();
            let g = self.ledger.graph.lock();
            // A kept version stays while a recorded task reads it, or while it is the current
            // version of a live buffer (lineage of that version stops there: its producer is
            // gone from the record).
            let current: BTreeSet<Access> = bufs.iter().map(|b| Access { buffer: b.id, version: b.version }).collect();
            bufs.release_kept(|a| g.is_read(a) || current.contains(&a));
            bufs.release_retired(&g.buffers_read())
        };
        self.ledger.set_prune_at(FIRST_PRUNE.max(2 * len as u64));
        self.meter.log(format_args!("PRUNE {removed} tasks; {len} kept"));
        for b in released {
            if let Err(e) = HeadCopies::of(*self).release_head_copy(&b) {
                eprintln!("ompcluster: cannot release buffer {:#x}: {e}", b.addr);
            }
        }
    }
}
