//! The head's record of device buffers: where each lives in the symmetric heap, its current
//! version, which ranks hold that version, which ranks hold an older version they still have
//! (what recovery can rebuild from), and which buffers its contents point to.
//!
//! This module is pure bookkeeping (no MPI): the cluster device decides and moves, this
//! records. Every change of versions and holders goes through a method here, so that the
//! retention budget (bytes the head keeps only for recovery) stays exact.

use event_system::heap::{ExtentAllocator, HeapError};
use rustc_hash::FxHashMap as HashMap;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Rank of the head.
pub(crate) const HEAD: i32 = event_system::HEAD;

/// Unallocated device addresses left before every buffer (virtual space only). A pointer that
/// lands in a gap (a section's base, `p - 1` passed with `has_device_addr`) can only belong
/// to the buffer right after it, or be one past the end of the buffer right before it.
pub(crate) const GUARD_GAP: u64 = 64 << 10;

mod buffer;
mod lookup;
mod place;
mod retained;
pub(crate) use buffer::{Blame, Buffer, CopyState, PointsTo, Suspect};
pub(crate) use place::Place;

/// What a finished move left on its destination ([`Buffers::move_done`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Moved {
    /// The copy holds the version moved, still the current one.
    Holds,
    /// A newer version was made meanwhile: the copy holds no recorded version.
    Superseded,
    /// A kernel that could reach the source changed the buffer meanwhile: the copy may hold
    /// part of its changes, and holds no version.
    Touched,
    /// The copy did not arrive whole.
    Failed,
    /// The program deleted the buffer meanwhile.
    Gone,
}

/// All buffers, by address.
#[derive(Debug)]
pub(crate) struct Buffers {
    alloc: ExtentAllocator,
    /// Live buffers by address (looked up several times per region: a hash map).
    by_addr: HashMap<u64, Buffer>,
    /// Their addresses in order, for lookups by range ([`Buffers::containing`]) and for
    /// iterating in address order.
    order: BTreeSet<u64>,
    /// Device address minus host address -> buffers. libomptarget translates a host pointer
    /// `h` of a mapping to `device + (h - host)`, also for pointers outside the mapped section
    /// (a section's base, a zero-length section matched through its base), so an argument
    /// with host pointer `h` and device value `d` belongs to the buffer with delta `d - h`.
    by_delta: HashMap<u64, Vec<u64>>,
    /// Image -> its data buffers, which every kernel of the image reaches (kept apart so that
    /// a launch need not scan all buffers for them).
    image_data: HashMap<u32, Vec<u64>>,
    /// Buffer id -> address, for live buffers.
    by_id: HashMap<u64, u64>,
    /// Buffers the program deleted whose head copy is kept because a recorded task read them
    /// (recovery may re-run it). Their address range stays allocated, so it is not reused
    /// while a re-run could write there.
    retired: HashMap<u64, Buffer>,
    next_id: u64,
    /// Workers blamed and not yet told (see `Buffer::suspects`).
    blames: Vec<Blame>,
    /// Versions the head keeps apart from its copies of the buffers: its copy of one was
    /// overwritten (or a recovery rescued it from a worker) while it still fed the current
    /// version of another buffer (`HeadCopies::lineage_needs`); the only place lineage can still
    /// find them.
    kept: HashMap<task_graph::Access, Arc<Vec<u8>>>,
    /// Bytes the head keeps only for recovery: its copies of older versions, retired
    /// buffers, and kept versions.
    retained: u64,
    /// Most bytes the head may keep for recovery (`OMPCLUSTER_FT_RETAIN`).
    budget: u64,
    /// Bytes held in `Buffer::sent_back` (at most [`SENT_BACK_BUDGET`]).
    sent_back_bytes: u64,
    /// Buffer id -> size, of every buffer made since [`Buffers::remember_sizes`].
    sizes: Option<HashMap<u64, u64>>,
    /// Pointer members attached in structs the program deleted: host address of the slot ->
    /// (the host pointer it held, the device pointer attached over it). libomptarget keeps
    /// its own record of them (its shadow pointers) when only part of such a struct is
    /// unmapped, and then does not attach them again in the struct's next device copy (see
    /// [`Buffers::attach`]). At most [`MAX_ORPHANS`].
    orphans: BTreeMap<u64, (u64, u64)>,
}

/// Most attachments of deleted structs remembered (see `Buffers::orphans`).
const MAX_ORPHANS: usize = 4096;

/// Most bytes the head holds of versions sent back with EXECUTE replies and not retrieved yet.
const SENT_BACK_BUDGET: u64 = 32 << 20;

impl Buffers {
    pub(crate) fn new(base: u64, size: u64) -> Self {
        Buffers {
            alloc: ExtentAllocator::new(base, size),
            by_addr: HashMap::default(),
            order: BTreeSet::new(),
            by_delta: HashMap::default(),
            image_data: HashMap::default(),
            by_id: HashMap::default(),
            retired: HashMap::default(),
            next_id: 1,
            blames: Vec::new(),
            kept: HashMap::default(),
            retained: 0,
            budget: 0,
            sent_back_bytes: 0,
            sizes: None,
            orphans: BTreeMap::new(),
        }
    }

    /// Remember the size of every buffer made from now on, deleted ones included: the full
    /// task log (`OMPCLUSTER_TASKS`) names buffers long gone when it is written.
    pub(crate) fn remember_sizes(&mut self) {
        self.sizes.get_or_insert_with(HashMap::default);
    }

    /// The size of buffer `id`, if remembered (see [`Buffers::remember_sizes`]).
    pub(crate) fn size_of(&self, id: u64) -> Option<u64> {
        self.sizes.as_ref()?.get(&id).copied()
    }

    /// Hold `bytes`, the contents of `version` of the buffer at `addr` that the kernel that
    /// made it sent back (see `Buffer::sent_back`), in place of any held before. Not held if
    /// that would exceed [`SENT_BACK_BUDGET`]; returns whether they are.
    pub(crate) fn set_sent_back(&mut self, addr: u64, version: u64, bytes: Vec<u8>) -> bool {
        self.take_sent_back(addr);
        let len = bytes.len() as u64;
        if self.sent_back_bytes + len > SENT_BACK_BUDGET {
            return false;
        }
        let Some(b) = self.by_addr.get_mut(&addr) else { return false };
        b.sent_back = Some((version, bytes.into()));
        self.sent_back_bytes += len;
        true
    }

    /// Stop holding the bytes sent back for the buffer at `addr`; returns them, if any.
    pub(crate) fn take_sent_back(&mut self, addr: u64) -> Option<(u64, Arc<[u8]>)> {
        let taken = self.by_addr.get_mut(&addr)?.sent_back.take();
        if let Some((_, bytes)) = &taken {
            self.sent_back_bytes -= bytes.len() as u64;
        }
        taken
    }

    /// Let the head keep up to `bytes` of copies that only recovery needs.
    pub(crate) fn set_retention_budget(&mut self, bytes: u64) {
        self.budget = bytes;
    }

    /// Bytes the head keeps only for recovery.
    pub(crate) fn retained_bytes(&self) -> u64 {
        self.retained
    }

    /// Can the head keep `span` more bytes for recovery?
    pub(crate) fn may_retain(&self, span: u64) -> bool {
        self.retained.saturating_add(span) <= self.budget
    }

    /// Change the buffer at `addr` with `f`, keeping the retained-bytes count exact.
    fn track<R>(&mut self, addr: u64, f: impl FnOnce(&mut Buffer) -> R) -> Option<R> {
        let b = self.by_addr.get_mut(&addr)?;
        let before = b.head_keeps_old();
        let r = f(b);
        let after = b.head_keeps_old();
        let span = b.span;
        match (before, after) {
            (false, true) => self.retained += span,
            (true, false) => self.retained -= span,
            _ => {}
        }
        Some(r)
    }

    /// A new version of the buffer at `addr` now exists on `holders` (a kernel's write, a
    /// submit, a copy). The old holders not among them keep the old version, as stale copies;
    /// the head's old copy is kept only while the retention budget allows (if it is not,
    /// the head has no known version any more and the caller may discard its pages).
    /// Returns the new version.
    pub(crate) fn new_version(&mut self, addr: u64, holders: BTreeSet<i32>) -> Option<u64> {
        // Bytes sent back were of the version this one replaces.
        self.take_sent_back(addr);
        let budget_ok = self.by_addr.get(&addr).is_some_and(|b| self.may_retain(b.span));
        self.track(addr, |b| {
            let old = b.version;
            for r in std::mem::take(&mut b.holders) {
                if !holders.contains(&r) && (Place::of(r).is_worker() || budget_ok) && old > 0 {
                    b.stale.insert(r, old);
                }
            }
            for r in &holders {
                b.stale.remove(r);
                b.torn.remove(r);
            }
            b.holders = holders;
            b.version += 1;
            b.key = crate::journal::key::fresh();
            b.lineage_ns = 0;
            b.version
        })
    }

    /// A kernel on `w` that could reach the buffer at `addr` is done (`changed`: it changed
    /// it; `possible`: it may have written it as its region's kernel, see
    /// `Buffer::possible_writes`). The copies taken from `w` meanwhile are forgotten if it
    /// changed it, and trusted once no kernel there uses it any more if not (see
    /// `Buffer::torn`). Once none does, a suspect whose change nothing else can have made is
    /// blamed ([`Buffers::take_blames`]). Returns the copies forgotten.
    pub(crate) fn kernel_done(&mut self, addr: u64, w: i32, changed: bool, possible: bool) -> Vec<i32> {
        let mut blamed = None;
        let forgotten = self.track(addr, |b| {
            if let Some(n) = b.using.get_mut(&w) {
                *n -= 1;
                if *n == 0 {
                    b.using.remove(&w);
                }
            }
            if possible {
                b.possibly_written(w);
            }
            if !b.using.contains_key(&w) {
                let now = b.possible_writes_on(w);
                blamed = b.suspects.remove(&w).filter(|s| s.since == now).map(|suspect| Blame { rank: w, addr, suspect });
            }
            let from_w: Vec<i32> = b.torn.iter().filter(|(_, &s)| s == w).map(|(&d, _)| d).collect();
            if changed {
                *b.kernel_changes.entry(w).or_default() += 1;
                // And the copies taken from those while they were in use, and so on: they
                // may hold the same part of the change.
                let mut forgotten = from_w;
                let mut at = 0;
                while at < forgotten.len() {
                    let d = forgotten[at];
                    b.torn.remove(&d);
                    b.holders.remove(&d);
                    b.stale.remove(&d);
                    forgotten.extend(b.torn.iter().filter(|(_, &s)| s == d).map(|(&x, _)| x));
                    at += 1;
                }
                forgotten
            } else {
                if !b.using.contains_key(&w) {
                    for d in from_w {
                        b.torn.remove(&d);
                    }
                }
                Vec::new()
            }
        })
        .unwrap_or_default();
        self.blames.extend(blamed);
        forgotten
    }

    /// The workers blamed for changes of their copies that no region made (see
    /// `Buffer::suspects`), once each.
    pub(crate) fn take_blames(&mut self) -> Vec<Blame> {
        std::mem::take(&mut self.blames)
    }

    /// A replica on `w` that could reach the buffer at `addr` is done (see
    /// `Buffer::replica_on`); nothing if none ran there.
    pub(crate) fn replica_done(&mut self, addr: u64, w: i32) {
        self.track(addr, |b| {
            if let Some(n) = b.replica_on.get_mut(&w) {
                *n -= 1;
                if *n == 0 {
                    b.replica_on.remove(&w);
                }
            }
        });
    }

    /// A move of `version` from `src`'s copy into `w`'s, which started when the source was
    /// in state `before`, is done (`arrived`: all of it). `w` holds the version if it is still
    /// the current one and no kernel that could reach the source changed the buffer
    /// meanwhile: such a copy may hold part of the changes. While a kernel there may still
    /// change it, the copy is torn (see `Buffer::torn`).
    pub(crate) fn move_done(&mut self, addr: u64, w: i32, src: i32, version: u64, before: CopyState, arrived: bool) -> Moved {
        let Some(b) = self.by_addr.get_mut(&addr) else { return Moved::Gone };
        b.incoming.remove(&w);
        let now = b.copy_state(src);
        // (A move that did not arrive wrote nothing, if staged, or its copy was dropped.)
        if arrived && now.in_use() {
            b.torn.insert(w, src);
        } else if arrived {
            b.torn.remove(&w);
        }
        let outcome = if !arrived {
            Moved::Failed
        } else if before.touched(&now) && before.changed(&now) || b.version_on(src) != Some(version) {
            // A kernel there changed it, or the source's copy was forgotten meanwhile (taken
            // from a copy a kernel changed, or written over): the bytes may be mixed.
            Moved::Touched
        } else if b.version != version {
            Moved::Superseded
        } else {
            Moved::Holds
        };
        if outcome == Moved::Holds {
            self.add_holder(addr, w);
        } else if arrived {
            // Its bytes are in the copy (a staged move left its older version listed).
            if let Some(b) = self.by_addr.get_mut(&addr) {
                b.stale.remove(&w);
            }
        }
        outcome
    }

    /// A submit of `bytes` to `tgt`, seen for the pointer members libomptarget attaches, and
    /// the bytes to send instead if it must be repaired.
    ///
    /// libomptarget 16 writes a pointer member's device address into the device copy of its
    /// struct with an 8-byte submit (the "shadow pointer"), and does not always write it
    /// again after sending the whole struct: a struct mapped through a `declare mapper` and
    /// kept by `enter data` has no reference count of its own, so the next region mapping it
    /// sends it again (`getTargetPointer`, `IsNew` for a count of 1) while its shadow pointer
    /// is already known; and a mapper's `alloc` member is attached before the struct's own
    /// bytes are sent (docs/mapped-structs.md). Either way the device copy would get the
    /// host pointer back. So: an 8-byte, 8-aligned submit of a heap address over a slot that
    /// held a host pointer (`staged_old`, the head's staged copy) or into a buffer never
    /// written (`fresh`) is an attachment; a later submit that brings that host pointer (or,
    /// into a fresh buffer's slot, any address outside the heap, then remembered) back into
    /// the slot sends the device pointer instead; one that brings anything else ends it.
    pub(crate) fn attach(&mut self, tgt: u64, bytes: &[u8], heap: std::ops::Range<u64>, staged_old: Option<u64>, fresh: bool) -> Option<Vec<u8>> {
        let len = bytes.len() as u64;
        let addr = self.containing_range(tgt, len)?.addr;
        let b = self.by_addr.get_mut(&addr)?;
        let off = tgt - addr;
        let word = |at: usize| u64::from_ne_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        if len == 8 && tgt % 8 == 0 {
            let value = word(0);
            match staged_old {
                _ if !heap.contains(&value) => _ = b.attached.remove(&off),
                Some(old) if !heap.contains(&old) => _ = b.attached.insert(off, (Some(old), value)),
                None if fresh => _ = b.attached.insert(off, (None, value)),
                _ => {
                    if let Some(e) = b.attached.get_mut(&off) {
                        e.1 = value;
                    }
                }
            }
            return None;
        }
        let mut copy: Option<Vec<u8>> = None;
        let mut ended = Vec::new();
        for (&slot, (host_value, device_value)) in b.attached.range_mut(off..off + len) {
            if slot + 8 > off + len {
                continue;
            }
            let at = (slot - off) as usize;
            let incoming = word(at);
            if host_value.is_none() && !heap.contains(&incoming) {
                *host_value = Some(incoming);
            }
            if *host_value == Some(incoming) {
                copy.get_or_insert_with(|| bytes.to_vec())[at..at + 8].copy_from_slice(&device_value.to_ne_bytes());
            } else if incoming != *device_value {
                ended.push(slot);
            }
        }
        for slot in ended {
            b.attached.remove(&slot);
        }
        // A new device copy of a struct part of which the program unmapped (`exit data
        // map(from : s.a[:n])` of a struct mapped through a mapper deletes the struct's own
        // entry, whose count the mapper never raised): libomptarget 16 forgets only the
        // shadow pointers of the part unmapped, and does not attach the others again while
        // their pointees stay where they were (its check compares the pointee's device
        // address only). A slot that held such a pointer, bringing the same host pointer back
        // while a live mapping still translates it to the same device pointer, gets that
        // device pointer, which is what libomptarget holds the slot to be.
        if fresh && b.host != 0 && !self.orphans.is_empty() {
            let lo = b.host.wrapping_add(off);
            let found: Vec<(u64, (u64, u64))> = self.orphans.range(lo..lo.saturating_add(len)).map(|(&k, &v)| (k, v)).collect();
            for (slot_host, (host_value, device_value)) in found {
                let at = (slot_host - lo) as usize;
                if at + 8 > bytes.len() {
                    continue;
                }
                self.orphans.remove(&slot_host);
                if word(at) == host_value && self.by_delta.contains_key(&device_value.wrapping_sub(host_value)) {
                    copy.get_or_insert_with(|| bytes.to_vec())[at..at + 8].copy_from_slice(&device_value.to_ne_bytes());
                    b.attached.insert(off + at as u64, (Some(host_value), device_value));
                }
            }
        }
        copy
    }

    /// Rank `r`'s copy of the buffer at `addr` now holds the current version.
    pub(crate) fn add_holder(&mut self, addr: u64, r: i32) {
        self.track(addr, |b| {
            b.stale.remove(&r);
            b.holders.insert(r);
        });
    }

    /// Rank `r`'s copy of buffer `id` (live or retired) now holds `version` (recovery moved
    /// or rebuilt it there).
    pub(crate) fn install(&mut self, id: u64, r: i32, version: u64) {
        let set = |b: &mut Buffer| {
            if version == b.version {
                b.stale.remove(&r);
                b.holders.insert(r);
            } else {
                b.holders.remove(&r);
                b.stale.insert(r, version);
            }
        };
        if let Some(&addr) = self.by_id.get(&id) {
            self.track(addr, set);
        } else if let Some(b) = self.retired.get_mut(&id) {
            set(b);
        }
    }

    /// The copy on rank `r` of the buffer at `addr` (live or retired) holds no known version
    /// any more: its pages were given back, or a transfer into it failed half-way.
    pub(crate) fn drop_copy(&mut self, addr: u64, r: i32) {
        let forget = |b: &mut Buffer| {
            b.holders.remove(&r);
            b.stale.remove(&r);
            b.torn.remove(&r);
        };
        if self.by_addr.contains_key(&addr) {
            self.track(addr, forget);
        } else if let Some(b) = self.retired.values_mut().find(|b| b.addr == addr) {
            forget(b);
        }
    }

    /// Forget every copy the `dead` ranks had, of every buffer. Returns the versions lost: the
    /// current version of each live buffer that no live rank holds any more.
    pub(crate) fn forget_ranks(&mut self, dead: &BTreeSet<i32>) -> BTreeSet<task_graph::Access> {
        let mut lost = BTreeSet::new();
        let all = self.by_addr.values_mut().chain(self.retired.values_mut());
        for b in all {
            b.holders.retain(|r| !dead.contains(r));
            b.stale.retain(|r, _| !dead.contains(r));
            b.backed.retain(|r| !dead.contains(r));
            b.incoming.retain(|r| !dead.contains(r));
            if b.writing.is_some_and(|(w, _)| dead.contains(&w)) {
                b.writing = None;
            }
            b.using.retain(|r, _| !dead.contains(r));
            b.running.retain(|r, _| !dead.contains(r));
            b.replied.retain(|r, _| !dead.contains(r));
            b.holding.retain(|r, _| !dead.contains(r));
            b.suspects.retain(|r, _| !dead.contains(r));
            // A copy taken from a rank that died in the middle of a kernel may hold part of
            // its changes.
            let torn: Vec<i32> = b.torn.iter().filter(|(d, s)| dead.contains(d) || dead.contains(s)).map(|(&d, _)| d).collect();
            for d in torn {
                b.torn.remove(&d);
                b.holders.remove(&d);
                b.stale.remove(&d);
            }
        }
        self.blames.retain(|b| !dead.contains(&b.rank));
        for b in self.by_addr.values().filter(|b| !b.deleted) {
            if b.version > 0 && b.holders.is_empty() {
                lost.insert(task_graph::Access { buffer: b.id, version: b.version });
            }
        }
        lost
    }

    /// The current versions of live buffers that no rank holds (after a failure).
    pub(crate) fn unheld(&self) -> impl Iterator<Item = task_graph::Access> + '_ {
        self.iter()
            .filter(|b| !b.deleted && b.version > 0 && b.holders.is_empty())
            .map(|b| task_graph::Access { buffer: b.id, version: b.version })
    }

    /// A buffer by id, live or retired.
    pub(crate) fn by_id(&self, id: u64) -> Option<&Buffer> {
        match self.by_id.get(&id) {
            Some(addr) => self.by_addr.get(addr),
            None => self.retired.get(&id),
        }
    }

    /// Mutable [`Buffers::by_id`] (for backing and moving copies, not versions).
    pub(crate) fn by_id_mut(&mut self, id: u64) -> Option<&mut Buffer> {
        match self.by_id.get(&id) {
            Some(addr) => self.by_addr.get_mut(addr),
            None => self.retired.get_mut(&id),
        }
    }

    /// Make a new buffer of `size` bytes.
    pub(crate) fn create(&mut self, size: u64, host: u64) -> Result<&mut Buffer, HeapError> {
        let (start, extent) = self.alloc.alloc(size.max(1) + GUARD_GAP)?;
        let (addr, span) = (start + GUARD_GAP, extent - GUARD_GAP);
        if host != 0 {
            self.by_delta.entry(addr.wrapping_sub(host)).or_default().push(addr);
        }
        Ok(self.insert(addr, host, size, span, None))
    }

    /// Track a new buffer (a fresh id) at `addr`.
    fn insert(&mut self, addr: u64, host: u64, size: u64, span: u64, global_of: Option<u32>) -> &mut Buffer {
        let id = self.next_id;
        self.next_id += 1;
        if let Some(sizes) = &mut self.sizes {
            sizes.insert(id, size);
        }
        self.by_id.insert(id, addr);
        self.order.insert(addr);
        self.by_addr.entry(addr).or_insert(Buffer::new(id, addr, host, size, span, global_of))
    }

    /// Forget that libomptarget translates host pointers to the buffer at `addr` (mapped for
    /// host address `host`).
    fn forget_translation(&mut self, addr: u64, host: u64) {
        if host == 0 {
            return;
        }
        let key = addr.wrapping_sub(host);
        if let Some(v) = self.by_delta.get_mut(&key) {
            v.retain(|&a| a != addr);
            if v.is_empty() {
                self.by_delta.remove(&key);
            }
        }
    }

    /// Track a block that device code allocated in the arena of rank `owner`: `[addr,
    /// addr+size)` holds data, `span` bytes are reserved. Refused if it overlaps a buffer.
    pub(crate) fn adopt(&mut self, addr: u64, size: u64, span: u64, owner: i32) -> Option<&mut Buffer> {
        let end = addr.checked_add(span)?;
        if size > span || addr % event_system::heap::PAGE != 0 || self.order.range(..end).next_back().is_some_and(|a| a + self.by_addr[a].span > addr) {
            return None;
        }
        let b = self.insert(addr, 0, size, span, None);
        b.arena_of = Some(owner);
        Some(b)
    }

    /// Reserve page-aligned address space for a device image of `extent` bytes (after a
    /// guard gap, like a buffer); returns its base. It is never given back: images stay
    /// loaded for the life of the program.
    pub(crate) fn reserve_image(&mut self, extent: u64) -> Result<u64, HeapError> {
        let (start, _) = self.alloc.alloc(extent.max(1) + GUARD_GAP)?;
        Ok(start + GUARD_GAP)
    }

    /// Track `[addr, addr+size)`, the writable data of image `image` loaded inside a range
    /// from [`Buffers::reserve_image`] (`addr` page-aligned), as a buffer.
    pub(crate) fn add_image_data(&mut self, addr: u64, size: u64, image: u32) -> &mut Buffer {
        let of_image = self.image_data.entry(image).or_default();
        if !of_image.contains(&addr) {
            of_image.push(addr);
        }
        self.insert(addr, 0, size, event_system::heap::page_round(size), Some(image))
    }

    /// The program deleted the buffer at `addr`, but a region in flight may reach it: no new
    /// region finds it any more (see [`Buffer::deleted`]).
    pub(crate) fn doom(&mut self, addr: u64) {
        let Some(b) = self.by_addr.get_mut(&addr) else { return };
        b.deleted = true;
        let host = b.host;
        self.forget_translation(addr, host);
        self.orphan_attachments(addr);
    }

    /// Remember the attached pointer members of the buffer at `addr`, which the program
    /// deleted, by their host addresses (see `Buffers::orphans`).
    fn orphan_attachments(&mut self, addr: u64) {
        let Some(b) = self.by_addr.get(&addr) else { return };
        if b.host == 0 || b.attached.is_empty() {
            return;
        }
        for (&off, &(host_value, device_value)) in &b.attached {
            if let Some(h) = host_value {
                self.orphans.insert(b.host.wrapping_add(off), (h, device_value));
            }
        }
        if self.orphans.len() > MAX_ORPHANS {
            // Those whose pointee is no longer mapped at the same place can never be used.
            let by_delta = &self.by_delta;
            self.orphans.retain(|_, (h, d)| by_delta.contains_key(&d.wrapping_sub(*h)));
            // Down to three quarters, so that the next deletes do not scan them all again.
            while self.orphans.len() > MAX_ORPHANS / 4 * 3 {
                self.orphans.pop_first();
            }
        }
    }

    /// Forget a buffer (its range stays allocated until [`Buffers::free_range`]).
    pub(crate) fn remove(&mut self, addr: u64) -> Option<Buffer> {
        self.take_sent_back(addr);
        // A doomed buffer's attachments were remembered when the program deleted it; since
        // then a new struct at the same host address may have used and attached them again.
        if self.by_addr.get(&addr).is_some_and(|b| !b.deleted) {
            self.orphan_attachments(addr);
        }
        let b = self.by_addr.remove(&addr)?;
        self.order.remove(&addr);
        self.by_id.remove(&b.id);
        if b.head_keeps_old() {
            self.retained -= b.span;
        }
        if let Some(image) = b.global_of {
            if let Some(v) = self.image_data.get_mut(&image) {
                v.retain(|&a| a != addr);
            }
        }
        self.forget_translation(addr, b.host);
        Some(b)
    }

    /// Reserve a page-aligned range that is not a device buffer (host memory the head backs);
    /// returns its address and extent.
    pub(crate) fn reserve_raw(&mut self, size: u64) -> Result<(u64, u64), HeapError> {
        let (start, extent) = self.alloc.alloc(size.max(1) + GUARD_GAP)?;
        Ok((start + GUARD_GAP, extent - GUARD_GAP))
    }

    /// Return a removed buffer's range (and its guard gap) to the allocator.
    pub(crate) fn free_range(&mut self, addr: u64) {
        self.alloc.free(addr - GUARD_GAP);
    }
}

#[cfg(test)]
mod tests;
