//! Memory requests: allocation, deletion, host submits and retrieves, device-to-device copies
//! ([`Memory`]; the requests' gate and retries are in `mod.rs`).
use super::durability::Durability;
use super::head_copies::HeadCopies;
use super::ledger::Ledger;
use super::link::Link;
use super::meter::Meter;
use super::movement::Movement;
use super::offload::Offload;
use super::{ClusterError, Result};
use crate::data::{Buffer, Buffers, Place, PointsTo, HEAD};
use crate::inject::Injector;
use event_system::comm::CommError;
use event_system::protocol::{Event, Region};
use serde_json::json;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use task_graph::{Access, TaskRecord};
use timeline::Cat;

/// Deciding whether recovery may still re-run a task that read a deleted buffer walks the
/// task record; it is worth it for the buffers a region maps for itself (a version or two),
/// whose ranges would otherwise stay taken until the next prune. A buffer with more versions
/// than this is kept without a walk (until the next prune), and so is one whose walk visits
/// more than [`WALK_BUDGET`] written versions. Unbounded, the `target exit data` of matmul
/// 1024/32 (3072 deletes after 32,768 tasks) took 2.4 s instead of 1.1: each delete re-walked the
/// lineage of up to 64 kept inputs, as fewer and fewer outputs were live; bounded by the
/// versions walked (each an input of 32 tasks), each delete still took 15-38 us (median)
/// instead of 1.7.
const MAX_VERSIONS_WALKED: u64 = 4;

/// The most written versions one such decision looks at in the task record (see above).
const WALK_BUDGET: u64 = 16;

view! {
    /// The work of memory requests (the caller holds the gate: `mod.rs` makes the requests):
    /// borrows the ledger (buffers, versions, the record of host updates and copies), the
    /// offload (the heap, the kernels that send data back), the link (DELETEs, SUBMITs, COPYs),
    /// the durability (keys and the log, what checkpoints hold), the meter, and through
    /// [`Movement`] the fault injector.
    pub(super) struct Memory { link: Link, ledger: Ledger, offload: Offload, durability: Durability, meter: Meter, inject: Injector }
}

impl<'a> Memory<'a> {
    /// Allocate a device buffer (the caller holds the gate).
    pub(super) fn alloc(&self, size: u64, host: u64) -> Result<u64> {
        let addr = self.ledger.buffers.lock().create(size, host)?.addr;
        self.ledger.add_device_bytes(size);
        self.meter.log(format_args!("ALLOC {addr:#x} {size} bytes"));
        Ok(addr)
    }

    /// Allocate host memory for `llvm_omp_target_alloc_host`: pages of the symmetric heap that
    /// only the head backs. The program uses it as host memory (maps copy it like any host
    /// data); a region that dereferences it directly faults on its worker, where the range is
    /// reserved but never backed, instead of reading whatever the worker has at that address.
    pub(super) fn alloc_host(&self, size: u64) -> Result<u64> {
        let (addr, span) = self.ledger.buffers.lock().reserve_raw(size)?;
        self.offload.heap.back(addr, span)?;
        self.ledger.host_allocs.lock().insert(addr, span);
        self.meter.log(format_args!("ALLOC_HOST {addr:#x} {size} bytes"));
        Ok(addr)
    }

    /// Free host memory from [`Memory::alloc_host`], if `addr` is such memory (then true).
    pub(super) fn free_host(&self, addr: u64) -> Result<bool> {
        if let Some(span) = self.ledger.host_allocs.lock().remove(&addr) {
            self.offload.heap.release(addr, span)?;
            self.ledger.buffers.lock().free_range(addr);
            return Ok(true);
        }
        Ok(false)
    }

    /// Delete the device buffer at `addr` (the caller holds the gate). If a region in flight
    /// may reach it, once that region is done with it ([`Memory::finish_deletes`]): a
    /// worker must never be asked for a buffer it released, nor hash freed pages. Only if
    /// `only` accepts the buffer there, checked under the lock that removes it (two regions
    /// ending at once must not delete one buffer twice, nor a new buffer at the same address).
    pub(super) fn remove_buffer(&self, addr: u64, only: impl Fn(&Buffer) -> bool) -> Result<()> {
        let (b, retire) = {
            let mut bufs = self.ledger.buffers.lock();
            match bufs.get(addr) {
                None => return Err(ClusterError::UnknownAddress(addr)),
                Some(b) if !only(b) => return Ok(()),
                Some(_) => {}
            }
            if bufs.get(addr).is_some_and(|b| b.global_of.is_some()) {
                // An image's data lives as long as the image: not libomptarget's to free.
                return Err(ClusterError::UnknownAddress(addr));
            }
            // A buddy copy reading one of its copies finishes first.
            while bufs.get(addr).is_some_and(|b| b.buddy_reading.is_some()) {
                self.ledger.moved.wait(&mut bufs);
            }
            if bufs.get(addr).is_some_and(|b| !b.using.is_empty()) {
                bufs.doom(addr);
                self.meter.log(format_args!("DELETE {addr:#x} once the regions in flight that may reach it are done"));
                return Ok(());
            }
            let b = bufs.remove(addr).ok_or(ClusterError::UnknownAddress(addr))?;
            // A recorded task that recovery may still re-run read it: keep the head's copy
            // (and the address range), within the budget, until the record no longer needs
            // it. A task that read its version 0 (zeros: a `map(from:)` buffer) needs no copy,
            // only the range, to run again (say, to rebuild what device code allocated in it).
            let retire = self.ledger.retains()
                && bufs.may_retain(b.span)
                && (b.version_on(HEAD).is_some() || self.ledger.graph.lock().is_read(Access { buffer: b.id, version: 0 }))
                && self.reruns_may_read(&bufs, b.id, b.version, &mut { WALK_BUDGET });
            (b, retire)
        };
        self.ledger.sub_device_bytes(b.size);
        if let Some(cp) = &self.durability.ckpt {
            cp.forget(b.id);
        }
        if let Some(j) = &self.durability.journal {
            j.forget(b.id);
        }
        let region = Region { addr: b.addr, size: b.span };
        for r in self.link.live_workers(&b.backed) {
            match self.link.post(r, Event::Delete(region)) {
                // No reply is expected: a rank that died has no copy left to free.
                Ok(_) | Err(ClusterError::Comm(CommError::PeerDead(_))) => {}
                Err(e) => return Err(e),
            }
        }
        let (id, version) = (b.id, b.version);
        if retire {
            self.ledger.buffers.lock().retire(b);
        } else {
            HeadCopies::of(*self).release_head_copy(&b)?;
        }
        self.meter.log(format_args!("DELETE {addr:#x}{}", if retire { " (head copy kept for recovery)" } else { "" }));
        if self.ledger.retains() {
            self.release_unneeded_inputs(id, version)?;
        }
        Ok(())
    }

    /// Can re-running recorded tasks still read buffer `id` (no longer live), whose last
    /// version is `version`? Only if a task that read one of its versions feeds, through
    /// recorded tasks, the current version of a live buffer that no checkpoint holds
    /// ([`HeadCopies::lineage_needs`]): a recovery re-runs nothing else, and a task recorded later
    /// reads only current versions, whose lineage is walked here already. A buffer of more
    /// versions, or a walk longer, than [`MAX_VERSIONS_WALKED`] and `budget` allow is assumed
    /// needed (until the next prune).
    fn reruns_may_read(&self, bufs: &Buffers, id: u64, version: u64, budget: &mut u64) -> bool {
        version > MAX_VERSIONS_WALKED
            || (0..=version).any(|v| {
                let a = Access { buffer: id, version: v };
                self.ledger.graph.lock().is_read(a) && HeadCopies::of(*self).lineage_needs(bufs, a, budget)
            })
    }

    /// Buffer `id` (versions up to `version`) was just deleted: the retired buffers that the
    /// tasks producing its versions read may have been kept only for it (a region's inputs,
    /// deleted before its output). Release those that re-running recorded tasks can no longer
    /// read, now rather than at the next prune, so that their address ranges (and mappings)
    /// are reused by the next buffers.
    fn release_unneeded_inputs(&self, id: u64, version: u64) -> Result<()> {
        if version > MAX_VERSIONS_WALKED {
            return Ok(());
        }
        let released: Vec<Buffer> = {
            let mut bufs = self.ledger.buffers.lock();
            let inputs: BTreeSet<u64> = {
                let g = self.ledger.graph.lock();
                (1..=version)
                    .filter_map(|v| g.producer(Access { buffer: id, version: v }))
                    .flat_map(|t| t.reads.iter().map(|r| r.buffer))
                    .filter(|&r| r != id && bufs.retired_version(r).is_some())
                    .collect()
            };
            let mut budget = WALK_BUDGET;
            let unneeded: Vec<u64> = inputs
                .into_iter()
                .filter(|&r| bufs.retired_version(r).is_some_and(|v| !self.reruns_may_read(&bufs, r, v, &mut budget)))
                .collect();
            unneeded.into_iter().filter_map(|r| bufs.unretire(r)).collect()
        };
        for b in released {
            HeadCopies::of(*self).release_head_copy(&b)?;
            self.meter.log(format_args!("RELEASE retired {:#x}: no recorded task recovery may re-run reads it", b.addr));
        }
        Ok(())
    }

    /// Delete the buffers at `addrs` that the program deleted while regions could reach them,
    /// if no region uses them any more.
    pub(super) fn finish_deletes(&self, addrs: Vec<u64>) -> Result<()> {
        for addr in addrs {
            // Gone already: another region that reached it finished the delete.
            match self.remove_buffer(addr, |b| b.deleted && b.using.is_empty()) {
                Ok(()) | Err(ClusterError::UnknownAddress(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// [`Cluster::submit`](super::Cluster::submit) without the gate (the caller holds it).
    ///
    /// # Safety
    /// As for `submit`.
    pub(super) unsafe fn submit_inner(&self, tgt: u64, host: *const u8, len: u64) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        // SAFETY: the caller guarantees `host..host+len` is readable until we return.
        let patched = self.attach_pointers(tgt, unsafe { std::slice::from_raw_parts(host, len as usize) });
        let host = patched.as_ref().map_or(host, |p| p.as_ptr());
        let (lo, hi) = (self.offload.heap.base(), self.offload.heap.end());
        // SAFETY: the caller guarantees `host..host+len` is readable until we return.
        let scan = || PointsTo::from(unsafe { event_system::protocol::scan_pointers(host, len as usize, lo, hi) });
        // SAFETY: forwarded contract (readable host bytes).
        let (addr, targets, whole, found) = unsafe { self.submit_bytes(tgt, host, len, scan)? };
        let mut bufs = self.ledger.buffers.lock();
        let mut made = None;
        if let Some(b) = bufs.get_mut(addr) {
            // The write is done and becomes a version under this lock (see `host_writes`).
            if targets.iter().any(|&r| Place::of(r).is_worker()) {
                b.host_write_done(targets.iter().copied().filter(|&r| Place::of(r).is_worker()));
            }
            if whole {
                b.points_to = found;
            } else {
                b.points_to.add(found);
            }
            let before = Access { buffer: b.id, version: b.version };
            // Its content key: the old one plus these bytes (`journal.rs`).
            let key = self.durability.keyed().then(|| {
                // SAFETY: the caller guarantees `host..host+len` is readable.
                crate::journal::key::submit(b.key, tgt - addr, unsafe { std::slice::from_raw_parts(host, len as usize) })
            });
            let worker = targets.first().copied().unwrap_or(HEAD);
            let on_head = targets.contains(&HEAD);
            let v = bufs.new_version(addr, targets.into_iter().collect()).expect("live buffer");
            if let (Some(key), Some(b)) = (key, bufs.get_mut(addr)) {
                b.key = key;
            }
            made = (!on_head && self.ledger.retains()).then_some((before, v, worker));
        }
        drop(bufs);
        if let Some((before, v, worker)) = made {
            // A partial update of a buffer that lives on workers only: the head keeps no
            // copy it could patch, so the update itself is recorded, to be replayed if the
            // version it made is lost.
            // SAFETY: the caller guarantees `host..host+len` is readable.
            let bytes: Arc<[u8]> = unsafe { std::slice::from_raw_parts(host, len as usize) }.into();
            let op = task_graph::Op::HostUpdate { offset: tgt - addr, bytes };
            self.record_op("target update to (host bytes)", worker, vec![before], Access { buffer: before.buffer, version: v }, op);
        }
        self.meter.log(format_args!("SUBMIT {tgt:#x} {len} bytes"));
        Ok(())
    }

    /// The pointer members libomptarget attached, kept attached (see
    /// `data::Buffers::attach`): the bytes to submit instead of `bytes`, if they differ.
    fn attach_pointers(&self, tgt: u64, bytes: &[u8]) -> Option<Vec<u8>> {
        let heap = self.offload.heap.base()..self.offload.heap.end();
        let word = bytes.len() == 8 && tgt % 8 == 0;
        // Only a device address can attach; anything else matters once something is attached
        // (a scalar mapped `tofrom` takes no lock here).
        let attaches = word && heap.contains(&u64::from_ne_bytes(bytes.try_into().expect("8 bytes")));
        if !attaches && !self.offload.attached() {
            return None;
        }
        let mut bufs = self.ledger.buffers.lock();
        // The slot's value before this submit, from the head's staged copy of the current
        // version.
        let staged_old = bufs.containing_range(tgt, 8).filter(|b| word && b.on_head()).map(|_| {
            // SAFETY: the head holds the buffer's current version, so its pages are backed;
            // `tgt..tgt+8` lies inside it and is 8-aligned.
            unsafe { std::ptr::read_volatile(tgt as *const u64) }
        });
        // Never written: nothing of it is the program's yet.
        let fresh = bufs.containing(tgt).is_some_and(|b| b.version == 0);
        let patched = bufs.attach(tgt, bytes, heap, staged_old, fresh);
        if word && bufs.containing(tgt).is_some_and(|b| !b.attached.is_empty()) {
            self.offload.set_attached();
        }
        patched
    }

    /// Record an operation other than a kernel that made version `made` on `worker` from
    /// `reads` (see [`task_graph::Op`]), so that recovery can replay it.
    pub(super) fn record_op(&self, what: &str, worker: i32, reads: Vec<Access>, made: Access, op: task_graph::Op) {
        let t = self.meter.start.elapsed().as_secs_f64();
        self.ledger.graph.lock().record(TaskRecord {
            id: 0,
            kernel: what.into(),
            image: 0,
            index: 0,
            args: Vec::new(),
            worker,
            reads,
            writes: vec![made],
            start_s: t,
            end_s: t,
            kernel_s: 0.0,
            op,
            allocs: Vec::new(),
            replicated: false,
        });
    }

    /// Move the bytes of a submit where they belong; returns the buffer, where its current
    /// version now is, whether the submit covered all of it, and what `scan` (which reads
    /// the host bytes) found: it runs while the bytes travel to the first worker. If it
    /// succeeds and a target is a worker, the caller takes back the buffer's `host_writes`
    /// under the lock that records the new version.
    ///
    /// # Safety
    /// `host..host+len` must be readable.
    pub(super) unsafe fn submit_bytes(
        &self,
        tgt: u64,
        host: *const u8,
        len: u64,
        scan: impl FnOnce() -> PointsTo,
    ) -> Result<(u64, Vec<i32>, bool, PointsTo)> {
        let (addr, targets, whole) = {
            let mut bufs = self.ledger.buffers.lock();
            // A buddy copy reading a worker's copy this submit may write: let it finish first
            // (see `buddy.rs`).
            while bufs.containing_range(tgt, len).is_some_and(|b| b.buddy_reading.is_some()) {
                self.ledger.moved.wait(&mut bufs);
            }
            let b = bufs.containing_range(tgt, len).ok_or(ClusterError::UnknownAddress(tgt))?;
            let addr = b.addr;
            let whole = tgt == b.addr && len >= b.size;
            let on_workers = b.version > 0 && !b.holders.is_empty() && !b.on_head();
            let targets: Vec<i32> = if !on_workers {
                // Fresh or staged on the head: stage here, move lazily to where it is used.
                vec![HEAD]
            } else if whole {
                // It lives on workers: update it where it is used (one holder is enough).
                // With recovery on, the head keeps a copy too: host data has no producer to
                // re-run, so the head's copy is where recovery finds it.
                let holders = b.holders.clone();
                let mut t = vec![Movement::of(*self).least_busy(&holders).ok_or(ClusterError::Lost(addr))?];
                if self.ledger.retains() {
                    t.push(HEAD);
                }
                t
            } else {
                // A piece of it: patch every copy of the current version.
                b.holders.iter().copied().collect()
            };
            if targets.contains(&HEAD) {
                HeadCopies::of(*self).stage_on_head(&mut bufs, addr)?;
                HeadCopies::of(*self).keep_head_version(&mut bufs, addr);
            }
            if targets.iter().any(|&r| Place::of(r).is_worker()) {
                bufs.get_mut(addr).expect("found above").host_writes += 1;
            }
            (addr, targets, whole)
        };
        if targets.contains(&HEAD) {
            self.durability.before_changing_staged(addr);
        }
        let mut scan = Some(scan);
        // The head's copy is written while the bytes travel to the first worker, if any.
        // SAFETY: `tgt..tgt+len` lies in a buffer the head has backed (staged above); the
        // host range is readable (caller).
        let mut head_copy = targets.contains(&HEAD).then_some(move || unsafe { self.offload.write_on_head(tgt, std::slice::from_raw_parts(host, len as usize)) });
        let mut found = None;
        // SAFETY: forwarded contract (readable, unchanged host bytes).
        let sent = unsafe { self.send_submit(&targets, tgt, host, len, &mut head_copy, &mut scan, &mut found) };
        if sent.is_err() && targets.contains(&HEAD) && head_copy.is_none() {
            // The head's copy already has the new bytes, but the submit did not happen: it
            // holds no recorded version any more.
            self.ledger.buffers.lock().drop_copy(addr, HEAD);
        }
        if sent.is_err() && targets.iter().any(|&r| Place::of(r).is_worker()) {
            if let Some(b) = self.ledger.buffers.lock().get_mut(addr) {
                b.host_write_done(targets.iter().copied().filter(|&r| Place::of(r).is_worker()));
            }
        }
        sent?;
        let found = match (found, scan) {
            (Some(f), _) => f,
            (None, Some(s)) => s(),
            (None, None) => PointsTo::All,
        };
        Ok((addr, targets, whole, found))
    }

    /// The sends of [`Memory::submit_bytes`]: to each target in turn, writing the head's
    /// copy (`head_copy`, taken when done) while the bytes travel to the first worker, and
    /// scanning them (`scan`) meanwhile.
    ///
    /// # Safety
    /// `host..host+len` must be readable and unchanged until this returns.
    #[allow(clippy::too_many_arguments)]
    unsafe fn send_submit(
        &self,
        targets: &[i32],
        tgt: u64,
        host: *const u8,
        len: u64,
        head_copy: &mut Option<impl FnOnce()>,
        scan: &mut Option<impl FnOnce() -> PointsTo>,
        found: &mut Option<PointsTo>,
    ) -> Result<()> {
        for &r in targets {
            if Place::of(r) == Place::Head {
                if let Some(copy) = head_copy.take() {
                    copy();
                }
            } else {
                let t = self.meter.trace_now();
                let during = || {
                    let f = scan.take().map(|s| s());
                    if let Some(copy) = head_copy.take() {
                        copy();
                    }
                    f
                };
                // SAFETY: host range readable (caller) and unchanged until we return; the
                // scan only reads it.
                let (tag, f) = unsafe { Movement::of(*self).post_submit(Region { addr: tgt, size: len }, host, r, during)? };
                if found.is_none() {
                    *found = f;
                }
                self.link.expect_ok(r, tag)?;
                self.meter.stats.add_submitted(len);
                self.meter.trace(t, Cat::Submit, r, "submit", || vec![("bytes", json!(len)), ("addr", json!(tgt))]);
            }
        }
        Ok(())
    }

    /// [`Cluster::retrieve`](super::Cluster::retrieve) without the gate (the caller holds it).
    ///
    /// # Safety
    /// As for `retrieve`.
    pub(super) unsafe fn retrieve_inner(&self, host: *mut u8, tgt: u64, len: u64) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let (src, made_by, key) = {
            let mut bufs = self.ledger.buffers.lock();
            let b = bufs.containing_range(tgt, len).ok_or(ClusterError::UnknownAddress(tgt))?;
            // What the log keeps of it (`journal.rs`): small retrieves, by content key.
            let key = (self.durability.journal.is_some() && len <= crate::journal::RETRIEVE_LOG_MAX).then(|| crate::journal::key::retrieved(b.key, tgt - b.addr, len));
            // The kernel that made this version sent it back with its reply.
            let (addr, at) = (b.addr, (tgt - b.addr) as usize);
            let sent_back = b.sent_back.as_ref().filter(|(v, _)| *v == b.version).and_then(|(_, bytes)| bytes.get(at..at + len as usize));
            if let Some(bytes) = sent_back {
                let whole = at == 0 && len >= b.size;
                // SAFETY: the caller guarantees the host range is writable; `bytes` has `len`
                // readable bytes.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), host, len as usize) };
                if whole {
                    // Retrieved: its memory is not kept for another retrieve.
                    bufs.take_sent_back(addr);
                }
                self.meter.stats.add_retrieved(len);
                self.meter.log(format_args!("RETRIEVE {tgt:#x} {len} bytes, sent back with the EXECUTE reply"));
                // SAFETY: the caller guarantees the host range is ours; it holds `len` bytes now.
                unsafe { self.log_retrieve(key, host, len) };
                return Ok(());
            }
            if b.version == 0 {
                (None, None, key)
            } else {
                let made_by = b.made_by.filter(|(v, ..)| *v == b.version).map(|(_, e, m)| (e, m));
                (Some(Movement::of(*self).current_holder(b).ok_or(ClusterError::Lost(b.addr))?), made_by, key)
            }
        };
        if let (Some(w), Some((entry, args))) = (src, made_by) {
            if let Place::Worker(_) = Place::of(w) {
                // Retrieved right after the kernel that made it: that kernel sends it back
                // next time (see `Kernel::send_back`).
                if let Some(k) = self.offload.kernels.read().get(&entry) {
                    k.send_back.fetch_or(args, Ordering::Relaxed);
                }
            }
        }
        match src.map(Place::of) {
            // SAFETY: the caller guarantees the host range is writable.
            None => unsafe { std::ptr::write_bytes(host, 0, len as usize) },
            // SAFETY: the head holds the current version in its staged copy at `tgt`.
            Some(Place::Head) => unsafe { std::ptr::copy_nonoverlapping(tgt as *const u8, host, len as usize) },
            Some(Place::Worker(w)) => {
                let (t, region) = (self.meter.trace_now(), Region { addr: tgt, size: len });
                // SAFETY: the caller guarantees the host range is writable and exclusive.
                unsafe { Movement::of(*self).retrieve_into(region, w, host)? };
                Movement::of(*self).note_retrieved(region, w, t);
            }
        }
        self.meter.log(format_args!("RETRIEVE {tgt:#x} {len} bytes from {src:?}"));
        // SAFETY: the caller guarantees the host range is ours; it holds `len` bytes now.
        unsafe { self.log_retrieve(key, host, len) };
        Ok(())
    }

    /// Log what a retrieve gave the host, under `key` (see `journal.rs`).
    ///
    /// # Safety
    /// `host..host+len` must be readable.
    unsafe fn log_retrieve(&self, key: Option<u64>, host: *const u8, len: u64) {
        if let (Some(key), Some(j)) = (key, &self.durability.journal) {
            // SAFETY: forwarded contract.
            let bytes = unsafe { std::slice::from_raw_parts(host, len as usize) }.to_vec();
            j.push(crate::journal::Entry::Retrieve { key, bytes });
        }
    }

    /// Device-to-device copy inside the cluster device (`omp_target_memcpy`), once (the
    /// caller holds the gate).
    pub(super) fn copy_once(&self, src: u64, dst: u64, len: u64) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let (src_buf, dst_buf, at, whole) = {
            let bufs = self.ledger.buffers.lock();
            let s = bufs.containing_range(src, len).ok_or(ClusterError::UnknownAddress(src))?;
            let d = bufs.containing_range(dst, len).ok_or(ClusterError::UnknownAddress(dst))?;
            let at = if s.version == 0 { HEAD } else { Movement::of(*self).current_holder(s).ok_or(ClusterError::Lost(s.addr))? };
            (s.addr, d.addr, at, dst == d.addr && len >= d.size)
        };
        if Place::of(at) == Place::Head {
            // Do it on the head: the source's current version is staged there (or is zeros).
            let mut tmp = vec![0u8; len as usize];
            // SAFETY: `tmp` has `len` writable bytes.
            unsafe { self.retrieve_inner(tmp.as_mut_ptr(), src, len)? };
            // SAFETY: `tmp` has `len` readable bytes.
            return unsafe { self.submit_inner(dst, tmp.as_ptr(), len) };
        }
        Movement::of(*self).ensure_present(src_buf, at)?;
        if !whole {
            Movement::of(*self).ensure_present(dst_buf, at)?;
        } else {
            let mut bufs = self.ledger.buffers.lock();
            let b = bufs.get_mut(dst_buf).ok_or(ClusterError::UnknownAddress(dst))?;
            Movement::of(*self).back_on(b, at)?;
        }
        {
            // A buddy copy reading the destination's copy there, a merge reading or patching
            // it (`Buffer::holding`), a kernel there that may still write it (a replica
            // running on after its region took another's result, `Buffer::using`), or a move
            // writing it (`Buffer::incoming`: its bytes would land over or under these): let
            // it finish first, so that its end does not take the copied bytes for its own.
            let mut bufs = self.ledger.buffers.lock();
            while bufs.get(dst_buf).is_some_and(|b| b.buddy_reading == Some(at) || b.holding.contains_key(&at) || b.using.contains_key(&at) || b.incoming.contains(&at)) {
                self.ledger.moved.wait(&mut bufs);
            }
            let b = bufs.get_mut(dst_buf).ok_or(ClusterError::UnknownAddress(dst))?;
            b.host_writes += 1;
            // An older version there is overwritten from now on: no source for recovery (a
            // move received in place drops it at its start too, `Buffer::begin_move_into`).
            b.stale.remove(&at);
        }
        let copied = self.link.post(at, Event::Copy { src, dst, size: len }).and_then(|tag| self.link.expect_ok(at, tag));
        let mut bufs = self.ledger.buffers.lock();
        // Done: it becomes a version under this same lock.
        if let Some(b) = bufs.get_mut(dst_buf) {
            b.host_write_done([at]);
        }
        copied?;
        let from = bufs.get(src_buf).map(|b| (b.points_to.clone(), Access { buffer: b.id, version: b.version }));
        let mut made = None;
        if let (Some((points, src_access)), Some(b)) = (from, bufs.get_mut(dst_buf)) {
            b.points_to.add(points);
            let before = Access { buffer: b.id, version: b.version };
            let v = bufs.new_version(dst_buf, [at].into()).expect("live buffer");
            made = Some((vec![src_access, before], Access { buffer: before.buffer, version: v }));
        }
        drop(bufs);
        if let Some((reads, made)) = made.filter(|_| self.ledger.retains()) {
            self.record_op("omp_target_memcpy", at, reads, made, task_graph::Op::DeviceCopy { src, dst, size: len });
        }
        self.meter.log(format_args!("COPY {src:#x} -> {dst:#x} {len} bytes on {at}"));
        Ok(())
    }
}
