//! One device buffer as the head records it: where it is, its current version and who holds
//! it, older versions still held, what it points to, and the marks of regions using it
//! (design notes on each field). `Buffers` (`data.rs`) changes these only through its methods.

use super::HEAD;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Device buffers a buffer's contents point to (found by scanning submitted or written data).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PointsTo {
    /// Device addresses found in it.
    Some(BTreeSet<u64>),
    /// Too many to track: it may reach any buffer.
    All,
}

impl From<event_system::protocol::FoundPointers> for PointsTo {
    fn from(found: event_system::protocol::FoundPointers) -> Self {
        match found {
            event_system::protocol::FoundPointers::Many => PointsTo::All,
            event_system::protocol::FoundPointers::Some(v) => PointsTo::Some(v.into_iter().collect()),
        }
    }
}

impl PointsTo {
    pub(crate) fn none() -> Self {
        PointsTo::Some(BTreeSet::new())
    }

    pub(crate) fn add(&mut self, found: PointsTo) {
        match (self, found) {
            (PointsTo::All, _) => {}
            (me, PointsTo::All) => *me = PointsTo::All,
            (PointsTo::Some(a), PointsTo::Some(b)) => a.extend(b),
        }
    }
}

/// One device buffer, or the writable data of a loaded device image (its globals and statics).
#[derive(Debug, Clone)]
pub(crate) struct Buffer {
    /// Never reused, unlike addresses.
    pub(crate) id: u64,
    pub(crate) addr: u64,
    /// Host address libomptarget mapped it for (0 if none).
    pub(crate) host: u64,
    /// Bytes libomptarget asked for.
    pub(crate) size: u64,
    /// Page-rounded extent in the heap.
    pub(crate) span: u64,
    /// 0: zero-filled as allocated; each change makes a new version.
    pub(crate) version: u64,
    /// The current version's content key (`crate::journal::key`): how its contents were made.
    /// A new version gets a fresh key unless its maker sets one.
    pub(crate) key: u64,
    /// Ranks holding the current version (HEAD = the head's staging copy).
    pub(crate) holders: BTreeSet<i32>,
    /// Ranks whose copy holds an older version, unchanged since (rank -> that version):
    /// sources for recovery, which may need an older version to re-run a task.
    pub(crate) stale: BTreeMap<i32, u64>,
    /// Ranks that have pages (or, for an image's data, the loaded image) for it.
    pub(crate) backed: BTreeSet<i32>,
    /// Workers a copy is being sent to right now.
    pub(crate) incoming: BTreeSet<i32>,
    pub(crate) points_to: PointsTo,
    /// For an image's writable data: the image.
    pub(crate) global_of: Option<u32>,
    /// For a block device code allocated (`malloc`, `new` in a region): the rank whose arena
    /// it lies in, which gets the range back once it is freed.
    pub(crate) arena_of: Option<i32>,
    /// The program deleted it while a region in flight could reach it (a pointer next to it
    /// is taken as possibly its, see [`Buffers::near`]): no new region reaches it, and it is
    /// deleted once no region uses it (see `Memory::remove_buffer`).
    pub(crate) deleted: bool,
    /// Kernels in flight that may write it (see `cluster/launch.rs`): their worker and how
    /// many. Every kernel that can reach the buffer meanwhile runs on that worker, so that
    /// concurrent regions share one copy, as they would share one device memory.
    pub(crate) writing: Option<(i32, u32)>,
    /// Kernels in flight with replicas that may write it (`cluster/replicas.rs`): no other
    /// region reaches it until they end, so that each replica's copy is its own.
    pub(crate) replicated: u32,
    /// Per worker: runs in flight there of regions with replicas (the first-placed one too)
    /// that can reach it. Such a run may be undone once the region is decided, so its copies
    /// are shared only while [`Buffer::shareable_on`], and a run that changed a shared copy it
    /// was not expected to write is not recorded (`cluster/launch.rs`).
    pub(crate) replica_on: BTreeMap<i32, u32>,
    /// Kernels in flight that can reach it, per worker: a copy a running kernel uses is never
    /// overwritten with another version (the kernel may be changing it).
    pub(crate) using: BTreeMap<i32, u32>,
    /// Per rank: kernels placed on its copy so far. A move compares it before and after: a
    /// kernel placed on the source meanwhile may have changed the bytes it sent (its EXECUTE
    /// can reach the worker before the move's own request does).
    pub(crate) uses_begun: BTreeMap<i32, u64>,
    /// Copies taken from a rank while a kernel there could reach it, at the copy's start or
    /// placed there before it was done (rank -> that source; see [`CopyState`]):
    /// if the kernel turns out to change it, they may hold part of its changes and are
    /// forgotten ([`Buffers::kernel_done`]); until then they are no source of a version for
    /// merges and re-runs.
    pub(crate) torn: BTreeMap<i32, i32>,
    /// Per rank: kernel runs that changed its copy there so far (whether or not recorded as a
    /// version): a copy in flight from a copy in use is no version if the source's count
    /// moved meanwhile. Per rank, because a kernel elsewhere (a replica settling on its own
    /// copy) does not touch the source's bytes.
    pub(crate) kernel_changes: BTreeMap<i32, u64>,
    /// Per rank: writes into its copy there that may be a region's own: kernel runs that
    /// changed it, but for replicas whose region took a result that did not change it (an
    /// outvoted or voided replica's change is no region's write), and the head's writes (a
    /// submit, a device copy, an undo's zeros), counted once done. See [`Buffer::suspects`].
    pub(crate) possible_writes: BTreeMap<i32, u64>,
    /// Per rank: with voting, the last-started of the ballots voided for a change of its copy
    /// while another region's kernel used it (`SetRun::void` in `cluster/replicas.rs`: the
    /// change may be that one's write). Once no kernel uses the copy, a suspect with no
    /// possible write since it started names its worker
    /// ([`crate::data::Buffers::kernel_done`]): nothing but the worker itself changed that
    /// copy. (An earlier-started suspect of the copy has seen at least as many possible
    /// writes: it names no one unless this one does.)
    pub(crate) suspects: BTreeMap<i32, Suspect>,
    /// Per worker: changes of kernels recorded or merged from its copy so far. A kernel that
    /// shared the copy with one of them cannot be undone (its changes may have gone with
    /// that one's).
    pub(crate) commits_from: BTreeMap<i32, u64>,
    /// Per worker: merges of its copy's changes so far (taken once no kernel ran on it, so
    /// they carry the whole changes of every kernel that ended there before).
    pub(crate) merges_from: BTreeMap<i32, u64>,
    /// Per worker: kernels whose copy of it is executing now (EXECUTE sent, no reply yet).
    pub(crate) running: BTreeMap<i32, u32>,
    /// Per worker: runs of regions with replicas whose kernel replied there and that are not
    /// settled yet (still counted in `running`): a run that changed a copy such a run shares
    /// waits only for the others' kernels, not for their regions' decisions
    /// (`cluster/launch.rs`, "Replicas share what they only read").
    pub(crate) replied: BTreeMap<i32, u32>,
    /// Per rank: merges reading or patching its copy; no kernel starts on it and nothing
    /// overwrites it meanwhile.
    pub(crate) holding: BTreeMap<i32, u32>,
    /// Per worker: runs undone so far whose changes were in its copy. A kernel that shared
    /// the copy and is not yet recorded lost its changes too, and runs again.
    pub(crate) undone: BTreeMap<i32, u64>,
    /// A version's contents as the kernel that made it sent them back with its reply (see
    /// `Event::Execute::send_back`): (version, bytes). A retrieve of that version copies
    /// them instead of asking a worker. Only a transport shortcut: no holder, no source for
    /// recovery. Set and cleared by [`Buffers`] only (it counts them against a budget).
    pub(crate) sent_back: Option<(u64, Arc<[u8]>)>,
    /// The version the last recorded kernel run made, that kernel's entry token and the
    /// arguments it reached the buffer through (a `launch.rs` argument mask): a retrieve of
    /// that version teaches the kernel to send it back next time.
    pub(crate) made_by: Option<(u64, usize, u64)>,
    /// Kernel time (ns) behind the current version: the run that made it and the largest
    /// unsaved time behind what that run read ([`Buffer::exposed_ns`]); 0 for a version a
    /// submit, a copy or an allocation made. For `OMPCLUSTER_FT_REPLICATE=auto`
    /// (`cluster/replica_choice.rs`) only: recovery never reads it.
    pub(crate) lineage_ns: u64,
    /// The version the head's copy got from a buddy copy (`cluster/buddy.rs`), while the
    /// head's copy still holds it: for the recovery report.
    pub(crate) buddy: Option<u64>,
    /// Submits and device copies writing a worker's copy of it right now: a buddy copy
    /// takes no copy meanwhile (see `cluster/buddy.rs`).
    pub(crate) host_writes: u32,
    /// The worker whose copy a buddy copy is reading right now (`cluster/buddy.rs`): no
    /// kernel starts on that copy, and no submit, device copy or delete changes it meanwhile.
    pub(crate) buddy_reading: Option<i32>,
    /// Pointer members libomptarget attached to their pointees' device copies (offset ->
    /// the host pointer the slot held, if known yet, and the device pointer written over
    /// it): see [`crate::data::Buffers::attach`].
    pub(crate) attached: BTreeMap<u64, (Option<u64>, u64)>,
}

impl Buffer {
    /// A buffer no rank holds yet (version 0), with nothing in flight.
    pub(super) fn new(id: u64, addr: u64, host: u64, size: u64, span: u64, global_of: Option<u32>) -> Self {
        Buffer {
            id,
            addr,
            host,
            size,
            span,
            version: 0,
            key: crate::journal::key::zero(size),
            holders: BTreeSet::new(),
            stale: BTreeMap::new(),
            backed: BTreeSet::new(),
            incoming: BTreeSet::new(),
            points_to: PointsTo::none(),
            global_of,
            arena_of: None,
            deleted: false,
            writing: None,
            replicated: 0,
            replica_on: BTreeMap::new(),
            using: BTreeMap::new(),
            uses_begun: BTreeMap::new(),
            torn: BTreeMap::new(),
            kernel_changes: BTreeMap::new(),
            possible_writes: BTreeMap::new(),
            suspects: BTreeMap::new(),
            commits_from: BTreeMap::new(),
            merges_from: BTreeMap::new(),
            running: BTreeMap::new(),
            replied: BTreeMap::new(),
            holding: BTreeMap::new(),
            undone: BTreeMap::new(),
            sent_back: None,
            made_by: None,
            lineage_ns: 0,
            buddy: None,
            host_writes: 0,
            buddy_reading: None,
            attached: BTreeMap::new(),
        }
    }

    /// A kernel placed on `w` can reach it from now until [`crate::data::Buffers::kernel_done`].
    pub(crate) fn begin_use(&mut self, w: i32) {
        *self.using.entry(w).or_default() += 1;
        *self.uses_begun.entry(w).or_default() += 1;
    }

    /// Whether a replica may use `r`'s copy while other regions in flight use it too, or a
    /// region may use it while a replica does (`cluster/launch.rs`, "Replicas share what they
    /// only read"): no region in flight may write it, `r` holds the current version (not on
    /// its way, not taken from a copy in use), and that version is pristine or held by another
    /// rank `live` says is up, so that forgetting `r`'s copy (an undone run changed it) loses
    /// nothing and a run again finds its input.
    pub(crate) fn shareable_on(&self, r: i32, live: impl Fn(i32) -> bool) -> bool {
        // A held copy on its way (being overwritten) is ruled out by `shareable_once_on`.
        self.held_by(r) && self.shareable_once_on(r, live)
    }

    /// A copy of the current version is on its way into `w`'s (which does not hold it): the
    /// bytes there are being overwritten, so `w` holds no version of it until the move is done
    /// (`Buffers::move_done` records it a holder only if the copy arrived whole and clean).
    /// Left listed, an older version `w` held stayed a source for recovery after a move that
    /// did not end as a holder (taken from a copy a kernel changed meanwhile): re-runs read
    /// whatever had arrived as that version (a wrong Cholesky result, 2 runs in 241).
    /// `staged`: the bytes are received aside and written into the copy only once all
    /// arrived (`Event::ExchangeRecv::staged`), so its older version stays listed until the
    /// move ends: as a holder, or overwritten ([`crate::data::Buffers::move_done`]), or not
    /// (its source died half-way: the copy is as it was).
    pub(crate) fn begin_move_into(&mut self, w: i32, staged: bool) {
        if !staged {
            self.stale.remove(&w);
        }
        self.incoming.insert(w);
    }

    /// Whether `r`'s copy is shareable ([`Buffer::shareable_on`]) once the current version
    /// is there: it may still be on its way for a region placed there (not held: a region
    /// placed on it waits for it), but no kernel executes on an older version of it, it is
    /// not taken from a copy in use, and it is not a copy counted as held that is being
    /// overwritten (zeros sent over an undone run's changes to version 0).
    pub(crate) fn shareable_once_on(&self, r: i32, live: impl Fn(i32) -> bool) -> bool {
        !(self.held_by(r) && self.incoming.contains(&r))
            && self.writing.is_none()
            && self.replicated == 0
            && !self.running_unheld(r)
            && !self.torn.contains_key(&r)
            && (self.version == self.pristine_version() || self.holders.iter().any(|&h| h != r && live(h)))
    }

    /// A kernel still executes on `w`'s copy: one counted in `running` that has not replied
    /// (see [`Buffer::replied`]).
    pub(crate) fn executing_on(&self, w: i32) -> bool {
        self.running.get(&w).copied().unwrap_or(0) > self.replied.get(&w).copied().unwrap_or(0)
    }

    /// What a move from `src`'s copy compares when it is done (see [`CopyState`]).
    pub(crate) fn copy_state(&self, src: i32) -> CopyState {
        CopyState {
            in_use: self.using.get(&src).is_some_and(|&n| n > 0),
            begun: self.uses_begun.get(&src).copied().unwrap_or(0),
            kernel_changes: self.changes_on(src),
        }
    }

    /// See [`Buffer::kernel_changes`].
    pub(crate) fn changes_on(&self, r: i32) -> u64 {
        self.kernel_changes.get(&r).copied().unwrap_or(0)
    }

    /// See [`Buffer::possible_writes`].
    pub(crate) fn possible_writes_on(&self, r: i32) -> u64 {
        self.possible_writes.get(&r).copied().unwrap_or(0)
    }

    /// A write into `r`'s copy that may be a region's own is done (see
    /// [`Buffer::possible_writes`]).
    pub(crate) fn possibly_written(&mut self, r: i32) {
        *self.possible_writes.entry(r).or_default() += 1;
    }

    /// A submit or device copy into the workers' copies `ranks` (one at least) is done or
    /// given up: it leaves [`Buffer::host_writes`], and what it wrote counts in
    /// [`Buffer::possible_writes`].
    pub(crate) fn host_write_done(&mut self, ranks: impl IntoIterator<Item = i32>) {
        self.host_writes -= 1;
        for r in ranks {
            self.possibly_written(r);
        }
    }

    /// `s` suspects `r`'s copy (see [`Buffer::suspects`]): kept if it started last.
    pub(crate) fn suspect(&mut self, r: i32, s: Suspect) {
        if self.suspects.get(&r).is_none_or(|old| old.since < s.since) {
            self.suspects.insert(r, s);
        }
    }

    /// See [`Buffer::undone`].
    pub(crate) fn undone_on(&self, w: i32) -> u64 {
        self.undone.get(&w).copied().unwrap_or(0)
    }

    /// Rank `r` holds a copy of `version` that nothing is changing: not a copy a running
    /// kernel uses, nor one taken from such a copy, nor one a move is writing (a staged move
    /// leaves its older version listed until it ends).
    pub(crate) fn clean_copy(&self, r: i32, version: u64) -> bool {
        self.version_on(r) == Some(version) && !self.torn.contains_key(&r) && !self.incoming.contains(&r) && self.using.get(&r).is_none_or(|&n| n == 0)
    }
}

impl Buffer {
    /// The kernel time a loss of the current version's holders would make recovery run
    /// again, at most ([`Buffer::lineage_ns`]): none once two ranks, or the head, hold it.
    pub(crate) fn exposed_ns(&self) -> u64 {
        if self.holders.len() >= 2 || self.holders.contains(&HEAD) {
            0
        } else {
            self.lineage_ns
        }
    }

    /// The version whose contents need no saving: what allocation (zeros, version 0) or the
    /// loading of its image (an image's initial data, version 1) gives back on any rank.
    pub(crate) fn pristine_version(&self) -> u64 {
        u64::from(self.global_of.is_some())
    }

    /// Can rank `r` have the current version without a transfer? Version 0 is zero pages,
    /// which any rank gets by backing the buffer.
    pub(crate) fn held_by(&self, r: i32) -> bool {
        self.version == 0 || self.holders.contains(&r)
    }

    /// `w`'s copy is not the current version and a kernel placed on `w` uses it: it is on its
    /// way there for that kernel (or about to be), or, if that kernel already executes, it
    /// is an older version no other may be moved over.
    pub(crate) fn used_unheld(&self, w: i32) -> bool {
        !self.held_by(w) && self.using.get(&w).is_some_and(|&n| n > 0)
    }

    /// A kernel executes on `w`'s copy and that copy is not the current version (see
    /// [`Buffer::used_unheld`]).
    pub(crate) fn running_unheld(&self, w: i32) -> bool {
        !self.held_by(w) && self.running.get(&w).is_some_and(|&n| n > 0)
    }

    /// The version rank `r`'s copy holds, if it holds a known one.
    pub(crate) fn version_on(&self, r: i32) -> Option<u64> {
        if self.holders.contains(&r) {
            Some(self.version)
        } else {
            self.stale.get(&r).copied()
        }
    }

    /// Ranks whose copy holds `version`.
    pub(crate) fn ranks_with(&self, version: u64) -> impl Iterator<Item = i32> + '_ {
        let current = (version == self.version).then_some(&self.holders);
        current.into_iter().flatten().copied().chain(self.stale.iter().filter(move |(_, &v)| v == version).map(|(&r, _)| r))
    }

    pub(super) fn head_keeps_old(&self) -> bool {
        self.stale.contains_key(&HEAD)
    }

    /// Does the head's copy hold the current version?
    pub(crate) fn on_head(&self) -> bool {
        self.holders.contains(&HEAD)
    }

    /// Has the head pages for it (its staged copy)?
    pub(crate) fn staged(&self) -> bool {
        self.backed.contains(&HEAD)
    }

    /// Forget every worker's copy, and its pages there: only the head's stays.
    pub(crate) fn keep_head_only(&mut self) {
        self.holders.retain(|&r| r == HEAD);
        self.stale.retain(|&r, _| r == HEAD);
        self.backed.retain(|&r| r == HEAD);
    }
}

/// A ballot voided for a change of a copy shared while it ran (see [`Buffer::suspects`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Suspect {
    /// Its region's kernel.
    pub(crate) kernel: Arc<str>,
    /// The workers whose result its region took.
    pub(crate) majority: Vec<i32>,
    /// [`Buffer::possible_writes`] on its worker when it started.
    pub(crate) since: u64,
}

/// A worker whose copy of a buffer changed while no region wrote it (see
/// [`Buffer::suspects`]): it loses a vote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Blame {
    pub(crate) rank: i32,
    pub(crate) addr: u64,
    pub(crate) suspect: Suspect,
}

/// A source copy's state when a move from it starts. The bytes moved are exactly the version
/// moved only if no kernel used the copy all along: else the destination may hold part of a
/// kernel's changes ([`CopyState::touched`]), and it holds no version if one changed the
/// buffer meanwhile ([`CopyState::changed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CopyState {
    /// A kernel placed on the source could reach the copy.
    in_use: bool,
    /// `Buffer::uses_begun` of the source.
    begun: u64,
    /// `Buffer::kernel_changes` of the source.
    kernel_changes: u64,
}

impl CopyState {
    /// A kernel could reach the source copy at some moment of the move: at its start, or
    /// placed there since.
    pub(crate) fn touched(&self, now: &CopyState) -> bool {
        self.in_use || now.in_use || now.begun != self.begun
    }

    /// A kernel placed on the source can reach the copy now.
    pub(crate) fn in_use(&self) -> bool {
        self.in_use
    }

    /// A kernel changed the source's copy since the move started.
    pub(crate) fn changed(&self, now: &CopyState) -> bool {
        now.kernel_changes != self.kernel_changes
    }
}

