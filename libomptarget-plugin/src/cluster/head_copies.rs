//! The head's own copies of buffers ([`HeadCopies`]): staging a version there (host submits
//! land in it, and recovery and checkpoints read it), keeping an older version apart when a
//! newer one replaces it while recovery may still need it, and giving the pages back when a
//! buffer goes. What is kept is bounded by the retention budget (`OMPCLUSTER_FT_RETAIN`,
//! `data.rs`).
//!
//! Threads: offloading threads, the handler (recovery installs inputs on the head), the buddy
//! thread; each under the ledger's `buffers` lock where it says so.

use super::durability::Durability;
use super::ledger::Ledger;
use super::link::Link;
use super::meter::Meter;
use super::offload::Offload;
use super::{ClusterError, Result};
use crate::data::{Buffer, Buffers, HEAD};
use event_system::comm::CommError;
use event_system::protocol::{Event, Region};
use std::sync::Arc;
use task_graph::Access;

view! {
    /// The head's own copies: borrows the ledger (versions, what is kept apart, the record that
    /// says what lineage needs), the offload (the head's pages, its own device), the durability
    /// (what checkpoints hold; a checkpoint saving a copy), the link (a block's range given back
    /// to its arena's worker) and the meter (the log).
    pub(super) struct HeadCopies { link: Link, ledger: Ledger, offload: Offload, durability: Durability, meter: Meter }
}

impl<'a> HeadCopies<'a> {
    /// Give back the head's pages of a removed buffer, then its address range (a block of
    /// device code's, to the rank whose arena it is in).
    pub(super) fn release_head_copy(&self, b: &Buffer) -> Result<()> {
        if b.staged() {
            self.durability.before_changing_staged(b.addr);
            self.offload.heap.release(b.addr, b.span)?;
        }
        match b.arena_of {
            Some(owner) if self.link.is_live_worker(owner) => {
                match self.link.post(owner, Event::Reclaim(Region { addr: b.addr, size: b.span })) {
                    Ok(_) | Err(ClusterError::Comm(CommError::PeerDead(_))) => {}
                    Err(e) => return Err(e),
                }
            }
            // The head's arena (replicas' blocks): its range is free again.
            Some(HEAD) => self.offload.reclaim_shared(b.addr),
            // The arena's rank is gone: the range is never given out again.
            Some(_) => {}
            None => self.ledger.buffers.lock().free_range(b.addr),
        }
        Ok(())
    }

    /// The head's copy of the buffer at `addr` is about to be overwritten: if it holds a
    /// version that re-running recorded tasks may need ([`HeadCopies::lineage_needs`]) and that
    /// no checkpoint holds, keep that version apart first, within the retention budget. Over
    /// the budget it is not kept, and a later loss that needs it is reported unrecoverable.
    /// Not once the head runs the regions itself (nothing can be lost any more).
    pub(super) fn keep_head_version(&self, bufs: &mut Buffers, addr: u64) {
        self.keep_head_version_before(bufs, addr, None);
    }

    /// [`HeadCopies::keep_head_version`], knowing that what replaces the head's version is the
    /// buffer's later version `replaced_by` (a buddy copy): a version that feeds nothing but
    /// the buffer's own versions up to that one is not needed, found without a walk.
    pub(super) fn keep_head_version_before(&self, bufs: &mut Buffers, addr: u64, replaced_by: Option<u64>) {
        if !self.ledger.retains() || self.offload.local().is_some() {
            return;
        }
        let Some(b) = bufs.get(addr).filter(|b| b.staged()) else { return };
        let Some(version) = b.version_on(HEAD).filter(|&v| v > 0) else { return };
        if replaced_by.is_some_and(|to| to > version && self.ledger.graph.lock().feeds_only_itself(b.id, version, to)) {
            return;
        }
        let a = Access { buffer: b.id, version };
        if bufs.kept(a).is_some() || self.durability.ckpt.as_ref().is_some_and(|c| c.holds(a.buffer, version)) || !self.lineage_needs(bufs, a, &mut { u64::MAX }) {
            return;
        }
        // SAFETY: the head backed this copy; nobody changes it while the buffer lock is held
        // (writers of the head's copy hold it, or the gate exclusively, around this call).
        let bytes = unsafe { std::slice::from_raw_parts(addr as *const u8, b.size as usize) }.to_vec();
        if bufs.keep(a, Arc::new(bytes)) {
            self.meter.log(format_args!("KEEP buffer {} version {} apart (it feeds the current version of another buffer)", a.buffer, a.version));
        }
    }

    /// Version `a` of a buffer is about to leave the head's copy of it: can a later recovery
    /// still need it? Only if it feeds, through recorded tasks, the current version of
    /// another live buffer that no checkpoint holds (one a failure could lose). The buffer's
    /// own current version does not count: what replaces `a` in the head's copy is that
    /// version or a newer one made from it (a submit, a version recovery rebuilt).
    ///
    /// The walk looks at most at `budget` written versions (taken from it); one that runs out
    /// answers true (needed), the safe answer.
    pub(super) fn lineage_needs(&self, bufs: &Buffers, a: Access, budget: &mut u64) -> bool {
        let is_root = |w: Access| {
            w.buffer != a.buffer
                && bufs.by_id(w.buffer).is_some_and(|b| b.version == w.version && bufs.get(b.addr).is_some_and(|l| l.id == b.id))
                && !self.durability.ckpt.as_ref().is_some_and(|c| c.holds(w.buffer, w.version))
        };
        self.ledger.graph.lock().feeds(a, &is_root, budget)
    }

    pub(super) fn stage_on_head(&self, bufs: &mut Buffers, addr: u64) -> Result<()> {
        let b = bufs.get_mut(addr).expect("caller holds a live buffer");
        if !b.staged() {
            self.offload.heap.back(b.addr, b.span)?;
            b.backed.insert(HEAD);
        }
        Ok(())
    }
}
