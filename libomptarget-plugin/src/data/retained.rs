//! What the head keeps only for recovery, within its budget: buffers the program deleted that
//! recorded tasks read (retired), and versions kept apart on the head (kept).

use super::{Buffer, Buffers};
use std::collections::BTreeSet;
use std::sync::Arc;

impl Buffers {
    /// Keep a deleted buffer for recovery: its head copy stays (and counts against the
    /// budget), its range stays allocated. The caller has taken it out with
    /// [`Buffers::remove`] and released the workers' copies.
    pub(crate) fn retire(&mut self, mut b: Buffer) {
        b.keep_head_only();
        b.incoming.clear();
        self.retained += b.span;
        self.retired.insert(b.id, b);
    }

    /// The version a retired buffer was retired at, if `id` is retired.
    pub(crate) fn retired_version(&self, id: u64) -> Option<u64> {
        self.retired.get(&id).map(|b| b.version)
    }

    /// Forget the retired buffer `id` and return it (re-running recorded tasks can no longer
    /// read it; the caller releases the head's pages, then frees the range).
    pub(crate) fn unretire(&mut self, id: u64) -> Option<Buffer> {
        let b = self.retired.remove(&id)?;
        self.retained -= b.span;
        Some(b)
    }

    /// Ids of the retired buffers.
    pub(crate) fn retired_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.retired.keys().copied()
    }

    /// Retired buffers no recorded task reads any more: forget them and return them (the
    /// caller releases the head's pages, then frees the range).
    pub(crate) fn release_retired(&mut self, still_read: &BTreeSet<u64>) -> Vec<Buffer> {
        let gone: Vec<u64> = self.retired.keys().copied().filter(|id| !still_read.contains(id)).collect();
        let out: Vec<Buffer> = gone.into_iter().filter_map(|id| self.retired.remove(&id)).collect();
        for b in &out {
            self.retained -= b.span;
        }
        out
    }

    /// Keep `bytes` as version `a` (see `kept`), within the retention budget. Returns whether
    /// it is kept.
    pub(crate) fn keep(&mut self, a: task_graph::Access, bytes: Arc<Vec<u8>>) -> bool {
        if self.kept.contains_key(&a) {
            return true;
        }
        let n = bytes.len() as u64;
        if !self.may_retain(n) {
            return false;
        }
        self.retained += n;
        self.kept.insert(a, bytes);
        true
    }

    /// A kept version.
    pub(crate) fn kept(&self, a: task_graph::Access) -> Option<Arc<Vec<u8>>> {
        self.kept.get(&a).cloned()
    }

    /// The versions kept apart.
    pub(crate) fn kept_versions(&self) -> rustc_hash::FxHashSet<task_graph::Access> {
        self.kept.keys().copied().collect()
    }

    /// Forget the kept versions that are not `still_read` (by a recorded task).
    pub(crate) fn release_kept(&mut self, still_read: impl Fn(task_graph::Access) -> bool) {
        let mut freed = 0;
        self.kept.retain(|&a, bytes| {
            let keep = still_read(a);
            if !keep {
                freed += bytes.len() as u64;
            }
            keep
        });
        self.retained -= freed;
    }
}
