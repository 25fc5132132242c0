//! The link to the ranks: the communicator, the tags of requests, who is alive (the failure
//! detector's view plus the ranks fenced here) and where each rank's process is. Every event
//! the head sends goes through [`Link::post`].
//!
//! Threads: any (offloading threads, the handler, the buddy and checkpoint threads). The
//! communicator is thread-safe (MPI_THREAD_MULTIPLE); the tag allocator and the liveness view
//! are lock-free or lock internally; `told` is one mutex taken alone.

use super::{ClusterError, HeadLiveness, Result};
use crate::data::{Place, HEAD};
use event_system::process::Victim;
use event_system::protocol::{Envelope, Event, Reply};
use event_system::{Comm, Liveness, TagAllocator};
use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::sync::Arc;

/// The head's link to the ranks.
pub(super) struct Link {
    pub(super) comm: Arc<Comm>,
    /// Liveness: the detector's view, plus the ranks fenced here; a rank once dead stays dead.
    pub(super) live: Arc<HeadLiveness>,
    tags: Arc<TagAllocator>,
    /// Rank -> its host and process (for fencing).
    procs: Vec<(u64, Victim)>,
    /// Dead ranks the live workers were told of (FAILED).
    told: Mutex<BTreeSet<i32>>,
}

impl Link {
    pub(super) fn new(comm: Arc<Comm>, live: Arc<HeadLiveness>, procs: Vec<(u64, Victim)>) -> Self {
        Link { tags: Arc::new(TagAllocator::new(comm.tag_ub())), comm, live, procs, told: Mutex::new(BTreeSet::new()) }
    }

    /// The live workers, in rank order.
    pub(super) fn workers(&self) -> impl Iterator<Item = i32> + '_ {
        (1..self.comm.size()).filter(|&r| !self.live.is_dead(r))
    }

    /// Is rank `r` a worker, and alive?
    pub(super) fn is_live_worker(&self, r: i32) -> bool {
        Place::of(r).is_worker() && !self.live.is_dead(r)
    }

    /// The live workers among `ranks`, in their order.
    pub(super) fn live_workers<'s>(&'s self, ranks: &'s BTreeSet<i32>) -> impl Iterator<Item = i32> + 's {
        ranks.iter().copied().filter(|&r| self.is_live_worker(r))
    }

    /// The ranks that died (or were fenced) but the head.
    pub(super) fn dead_workers(&self) -> BTreeSet<i32> {
        let mut dead = self.live.dead_ranks();
        dead.remove(&HEAD);
        dead
    }

    /// Has any rank died (or been fenced) in this run?
    pub(super) fn any_failure(&self) -> bool {
        !self.live.dead_ranks().is_empty()
    }

    /// The host the head runs on.
    pub(super) fn head_host(&self) -> u64 {
        self.procs[HEAD as usize].0
    }

    /// Rank `r`'s host and process, if known.
    pub(super) fn process(&self, r: i32) -> Option<&(u64, Victim)> {
        self.procs.get(r as usize)
    }

    /// The workers that run on the head's host, with their processes.
    pub(super) fn on_head_host(&self) -> Vec<(i32, Victim)> {
        let host = self.head_host();
        (1..self.comm.size()).filter(|&r| self.procs[r as usize].0 == host).map(|r| (r, self.procs[r as usize].1)).collect()
    }

    /// Of the `dead` ranks, the workers not told of yet, now counted as told.
    pub(super) fn newly_told(&self, dead: &BTreeSet<i32>) -> Vec<i32> {
        let mut told = self.told.lock();
        dead.iter().copied().filter(|&r| Place::of(r).is_worker() && told.insert(r)).collect()
    }

    /// A fresh tag, for a request whose events the caller sends itself.
    pub(super) fn next_tag(&self) -> i32 {
        self.tags.next()
    }

    /// Send `event` to `rank` under a fresh tag (its reply, if it has one, and its data travel
    /// on that tag); returns the tag.
    pub(super) fn post(&self, rank: i32, event: Event) -> Result<i32> {
        let tag = self.tags.next();
        self.comm.send_event(rank, &Envelope { tag, event }, self.live.as_ref())?;
        Ok(tag)
    }

    /// Wait for `rank`'s OK to the event posted under `tag`.
    pub(super) fn expect_ok(&self, rank: i32, tag: i32) -> Result<()> {
        match self.comm.recv_msg::<Reply>(rank, tag, self.live.as_ref())? {
            Reply::Ok => Ok(()),
            other => Err(unexpected(rank, other)),
        }
    }
}

/// The error a reply other than the one expected from `rank` stands for.
pub(super) fn unexpected(rank: i32, reply: Reply) -> ClusterError {
    match reply {
        Reply::PeerDead(peer) => ClusterError::PeerDead(peer),
        Reply::Error(msg) => ClusterError::Worker { rank, msg },
        other => ClusterError::Worker { rank, msg: format!("unexpected reply {other:?}") },
    }
}
