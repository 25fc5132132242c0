//! Re-running lost tasks on a worker (or the head), [`Rerunner`]: the primitives recovery's
//! re-run threads use. Where a task runs, what is rescued first and where each input comes
//! from are decided in `ft_handler::decide`; here the copies are rescued, the inputs installed
//! (from a live copy, a rescued or kept copy, zeros or a checkpoint), the task run through the
//! EXECUTE client (`execute.rs`) and what it made recorded.
//!
//! Threads: recovery's re-run threads, one per worker at a time (the handler holds the gate);
//! each takes the ledger's locks only between transfers.

use super::checkpointing::Checkpoints;
use super::durability::Durability;
use super::execute::{Executed, Execute, Executor};
use super::head_copies::HeadCopies;
use super::ledger::Ledger;
use super::link::Link;
use super::meter::Meter;
use super::movement::Movement;
use super::offload::Offload;
use super::recovery::{fatal, new_failure, CopiesView};
use super::tolerance::Tolerance;
use super::{ClusterError, Result};
use crate::data::{Place, HEAD};
use crate::inject::Injector;
use event_system::protocol::{Event, Region};
use ft_handler::RecoverError;
use ft_handler::decide;
use ft_handler::recovery::{BatchDone, Stop};
use parking_lot::Mutex;
use rustc_hash::FxHashMap as HashMap;
use serde_json::json;
use std::collections::BTreeSet;
use std::sync::Arc;
use task_graph::{Access, Mark, TaskRecord};
use timeline::Cat;

/// Copies that recovery rescued from a worker before overwriting them (the only copy of a
/// version still needed), kept on the head until recovery ends.
pub(super) type Side = Mutex<HashMap<Access, Arc<Vec<u8>>>>;

/// Where one version comes from, for one re-run task's worker.
#[derive(Debug, Clone)]
enum Source {
    /// Already there.
    Present,
    /// A live rank's copy (the head's staged copy if HEAD).
    Copy(i32),
    /// A copy recovery rescued.
    Side(Arc<Vec<u8>>),
    /// Zeros (version 0).
    Zeros,
    /// A published checkpoint.
    Checkpoint,
}

view! {
    /// Re-running recorded tasks: borrows every part, as the inputs come from anywhere: the
    /// ledger (where versions are, what the re-run made), what [`Movement`] and [`HeadCopies`]
    /// borrow (copies moved, staged on the head), what [`Executor`] borrows (the run), and the
    /// tolerance because a worker restoring a checkpointed input is a trigger for injected faults
    /// ([`Checkpoints::post_restore`]).
    pub(super) struct Rerunner { link: Link, ledger: Ledger, offload: Offload, tolerance: Tolerance, durability: Durability, meter: Meter }
    also { tolerance.inject: Injector }
}

impl<'a> Rerunner<'a> {
    /// Re-run the tasks of `batch` on worker `w`, in order: rescue what must be, install the
    /// first task's inputs there at the versions it first read, then run them (their output
    /// is not printed again). A batch of several (a chain: see `ft_handler::recovery`) sends all its
    /// EXECUTEs before waiting for the first reply. If a task changed a buffer its first run
    /// did not (not deterministic), the tasks after it may have read that change: they are
    /// undone (their copies forgotten) and [`BatchDone::done`] says how many are done.
    pub(super) fn rerun_batch(&self, batch: &[&TaskRecord], w: i32, rescue: &[Access], side: &Side) -> std::result::Result<BatchDone, Stop> {
        let first = batch[0];
        let mut out = BatchDone::default();
        let regions = self.install_inputs(first, w, rescue, side, &mut out)?;
        self.forget_rewritten(batch, w);
        if batch.len() == 1 {
            let written = written_of(first);
            let changed = self.run_task(first, w, regions, &written)?;
            self.record_rerun(first, w, &changed, &written);
            out.done = 1;
            return Ok(out);
        }
        self.meter.log(format_args!("RERUN tasks #{}..#{} ({} in a chain) on {w}", first.id, batch[batch.len() - 1].id, batch.len()));
        let mut sent = Vec::with_capacity(batch.len());
        for (k, t) in batch.iter().enumerate() {
            let regions = if k == 0 {
                regions.clone()
            } else {
                let bufs = self.ledger.buffers.lock();
                t.reads
                    .iter()
                    .map(|a| bufs.by_id(a.buffer).map(|b| Region { addr: b.addr, size: b.size }).ok_or_else(|| fatal(ClusterError::Lost(a.buffer))))
                    .collect::<std::result::Result<Vec<_>, _>>()?
            };
            let written = written_of(t);
            let n = regions.len();
            let run = Execute { image: t.image, kernel: t.index, args: &t.args, regions, assume_written: written.clone(), send_back: vec![false; n], replay: Vec::new(), short: true, quiet: true, digest: false, arena: None };
            sent.push((Executor::of(*self).post_execute(w, run).map_err(new_failure)?, written));
        }
        out.done = batch.len();
        for (k, (t, (posted, written))) in batch.iter().zip(sent).enumerate() {
            let ran = Executor::of(*self).await_executed(posted);
            let changed = self.rerun_ran(t, w, ran)?;
            if k < out.done {
                if self.record_rerun(t, w, &changed, &written) {
                    out.done = k + 1;
                }
            } else {
                // Undone: what it changed on `w` holds no recorded version.
                let mut bufs = self.ledger.buffers.lock();
                for (a, c) in t.reads.iter().zip(&changed) {
                    if let Some(addr) = bufs.by_id(a.buffer).filter(|_| *c).map(|b| b.addr) {
                        bufs.drop_copy(addr, w);
                    }
                }
            }
        }
        Ok(out)
    }

    /// The copies on `w` that the tasks of `batch` rewrite in place hold the versions they
    /// read only until they run: forgotten before they do, so that no re-run on another
    /// worker takes one as its input meanwhile ([`Rerunner::record_rerun`] records what they
    /// made). What a later task still needs was rescued first (`ft_handler::decide::place`).
    fn forget_rewritten(&self, batch: &[&TaskRecord], w: i32) {
        let mut bufs = self.ledger.buffers.lock();
        for t in batch {
            for a in t.reads.iter().filter(|a| t.writes.iter().any(|x| x.buffer == a.buffer)) {
                if let Some(addr) = bufs.by_id(a.buffer).map(|b| b.addr) {
                    bufs.drop_copy(addr, w);
                }
            }
        }
    }

    /// Make `t`'s inputs present on `w` at the versions it first read (rescuing the copies
    /// `rescue` lists first); returns their regions, counting where they came from in `out`.
    fn install_inputs(&self, t: &TaskRecord, w: i32, rescue: &[Access], side: &Side, out: &mut BatchDone) -> std::result::Result<Vec<Region>, Stop> {
        if Place::of(w) == Place::Head {
            // Its inputs are installed in the head's own copies: a checkpoint still saving one
            // of them must finish first.
            let addrs: Vec<u64> = {
                let bufs = self.ledger.buffers.lock();
                t.reads.iter().filter_map(|a| bufs.by_id(a.buffer).map(|b| b.addr)).collect()
            };
            for addr in addrs {
                self.durability.before_changing_staged(addr);
            }
        }
        for a in rescue {
            let region = match self.ledger.buffers.lock().by_id(a.buffer) {
                Some(b) => Region { addr: b.addr, size: b.size },
                None => continue,
            };
            let bytes = Movement::of(*self).fetch(region, w).map_err(new_failure)?;
            side.lock().insert(*a, Arc::new(bytes));
            self.meter.log(format_args!("RESCUE buffer {} version {} from rank {w}", a.buffer, a.version));
        }
        let mut regions = Vec::with_capacity(t.reads.len());
        for a in &t.reads {
            let (region, source, buddy) = {
                let mut bufs = self.ledger.buffers.lock();
                let source = {
                    let side = side.lock();
                    let copies = CopiesView { bufs: &bufs, side: &side, ckpt: self.durability.ckpt.as_ref(), bad: &BTreeSet::new() };
                    match decide::source(&copies, *a, w).ok_or_else(|| fatal(ClusterError::Lost(a.buffer)))? {
                        decide::Source::Present => Source::Present,
                        decide::Source::Copy(r) => Source::Copy(r),
                        decide::Source::Apart => Source::Side(side.get(a).cloned().or_else(|| bufs.kept(*a)).expect("held apart")),
                        decide::Source::Zeros => Source::Zeros,
                        decide::Source::Checkpoint => Source::Checkpoint,
                    }
                };
                let b = bufs.by_id_mut(a.buffer).ok_or_else(|| fatal(ClusterError::Lost(a.buffer)))?;
                let region = Region { addr: b.addr, size: b.size };
                let buddy = matches!(source, Source::Copy(HEAD)) && b.buddy == Some(a.version);
                if !b.backed.contains(&w) {
                    Movement::of(*self).back_on(b, w).map_err(new_failure)?;
                }
                if !matches!(source, Source::Present) {
                    // Overwritten from here on: what `w` held is no source for the re-runs
                    // running meanwhile on other workers (recorded again once installed).
                    bufs.drop_copy(region.addr, w);
                }
                (region, source, buddy)
            };
            regions.push(region);
            if self.meter.verbose() {
                let from = match &source {
                    Source::Present => "present".to_string(),
                    Source::Copy(r) if buddy => format!("rank {r}'s buddy copy"),
                    Source::Copy(r) => format!("rank {r}'s copy"),
                    Source::Side(_) => "a rescued or kept copy".to_string(),
                    Source::Zeros => "zeros".to_string(),
                    Source::Checkpoint => "a checkpoint".to_string(),
                };
                self.meter.log(format_args!("RERUN task #{} on {w}: buffer {} version {} from {from}", t.id, a.buffer, a.version));
            }
            match source {
                Source::Present => continue,
                Source::Side(bytes) => {
                    // SAFETY: the bytes are kept alive by the Arc, which is leaked on a dead
                    // peer (MPI may still read them).
                    let res = unsafe { Movement::of(*self).submit_from(region, bytes.as_ptr(), w) };
                    if res.is_err() {
                        std::mem::forget(bytes);
                    }
                    res.map_err(new_failure)?;
                    out.from_live_copies += 1;
                }
                Source::Copy(r) => {
                    Movement::of(*self).copy_between(region, r, w, false).map_err(new_failure)?;
                    if buddy {
                        out.from_buddy_copies += 1;
                    } else {
                        out.from_live_copies += 1;
                    }
                }
                Source::Zeros => {
                    let zeros = vec![0u8; region.size as usize];
                    // SAFETY: a private vector of the region's size, leaked on a dead peer.
                    let res = unsafe { Movement::of(*self).submit_from(region, zeros.as_ptr(), w) };
                    if res.is_err() {
                        std::mem::forget(zeros);
                    }
                    res.map_err(new_failure)?;
                }
                Source::Checkpoint if Place::of(w) != Place::Head => {
                    // The worker reads it itself (in parallel with other workers' re-runs).
                    let rec = self.durability.ckpt.as_ref().and_then(|c| c.record(a.buffer, a.version)).ok_or(Stop::Replan(*a))?;
                    let tag = Checkpoints::of(*self).post_restore(w, region, &rec).map_err(new_failure)?;
                    if let Err(why) = Checkpoints::of(*self).restored(w, tag).map_err(new_failure)? {
                        // Its copy on `w` may hold part of the file: not a version any more.
                        self.ledger.buffers.lock().drop_copy(region.addr, w);
                        return Err(Stop::BadCheckpoint(*a, format!("rank {w}: {why}")));
                    }
                    out.from_checkpoints += 1;
                    self.ledger.graph.lock().mark(t.id, Mark::FromCheckpoint);
                }
                Source::Checkpoint => {
                    let bytes = self.load_checkpointed(*a)?;
                    if bytes.len() as u64 != region.size {
                        return Err(Stop::BadCheckpoint(*a, format!("{} bytes, expected {}", bytes.len(), region.size)));
                    }
                    // SAFETY: a private vector of the region's size, leaked on a dead peer.
                    let res = unsafe { Movement::of(*self).submit_from(region, bytes.as_ptr(), w) };
                    if res.is_err() {
                        std::mem::forget(bytes);
                    }
                    res.map_err(new_failure)?;
                    out.from_checkpoints += 1;
                    self.ledger.graph.lock().mark(t.id, Mark::FromCheckpoint);
                }
            }
            self.ledger.buffers.lock().install(a.buffer, w, a.version);
        }
        Ok(regions)
    }

    /// Run task `t` on `w` over `regions` (its inputs, installed); which regions changed.
    fn run_task(&self, t: &TaskRecord, w: i32, regions: Vec<Region>, written: &[bool]) -> std::result::Result<Vec<bool>, Stop> {
        Ok(match &t.op {
            task_graph::Op::Kernel => self.rerun_kernel(t, w, regions, written)?,
            task_graph::Op::HostUpdate { offset, bytes } => {
                let at = regions.first().map_or(0, |r| r.addr) + offset;
                // SAFETY: the recorded bytes stay alive (the record holds them; a clone of
                // the Arc is leaked on a dead peer).
                let res = unsafe { Movement::of(*self).submit_from(Region { addr: at, size: bytes.len() as u64 }, bytes.as_ptr(), w) };
                if res.is_err() {
                    std::mem::forget(bytes.clone());
                }
                res.map_err(new_failure)?;
                written.to_vec()
            }
            &task_graph::Op::DeviceCopy { src, dst, size } if Place::of(w) == Place::Head => {
                let bytes = Movement::of(*self).fetch(Region { addr: src, size }, HEAD).map_err(fatal)?;
                // SAFETY: both buffers are installed on the head above; recovery holds the gate.
                unsafe { self.offload.write_on_head(dst, &bytes) };
                written.to_vec()
            }
            &task_graph::Op::DeviceCopy { src, dst, size } => {
                let tag = self.link.post(w, Event::Copy { src, dst, size }).map_err(new_failure)?;
                self.link.expect_ok(w, tag).map_err(new_failure)?;
                written.to_vec()
            }
        })
    }

    /// Record what re-running `t` on `w` made: the versions it wrote are on `w` now. Returns
    /// whether it changed a buffer its first run did not (not deterministic): that copy then
    /// holds no recorded version.
    fn record_rerun(&self, t: &TaskRecord, w: i32, changed: &[bool], written: &[bool]) -> bool {
        let mut unexpected = false;
        let mut bufs = self.ledger.buffers.lock();
        for ((a, &c), &wr) in t.reads.iter().zip(changed).zip(written) {
            if wr {
                let v = t.writes.iter().find(|x| x.buffer == a.buffer).expect("written").version;
                bufs.install(a.buffer, w, v);
            } else if c {
                unexpected = true;
                if let Some(b) = bufs.by_id(a.buffer) {
                    let addr = b.addr;
                    bufs.drop_copy(addr, w);
                }
            }
        }
        drop(bufs);
        if w != t.worker {
            self.ledger.graph.lock().mark(t.id, Mark::Moved);
        }
        unexpected
    }

    /// Load version `a` from the published checkpoints; if none holds it (any more), the plan
    /// that counted on it is out of date.
    pub(super) fn load_checkpointed(&self, a: Access) -> std::result::Result<Vec<u8>, Stop> {
        match &self.durability.ckpt {
            Some(c) if c.holds(a.buffer, a.version) => watchdog::waiting("a version read from a checkpoint", || c.load(a.buffer, a.version)).map_err(|e| Stop::BadCheckpoint(a, e)),
            _ => Err(Stop::Replan(a)),
        }
    }

    /// Make the head's copy of the live buffer at `addr` hold version `a` (`bytes`).
    pub(super) fn put_on_head(&self, a: Access, addr: u64, bytes: &[u8]) -> Result<()> {
        let mut bufs = self.ledger.buffers.lock();
        HeadCopies::of(*self).stage_on_head(&mut bufs, addr)?;
        if bufs.get(addr).and_then(|b| b.version_on(HEAD)) != Some(a.version) {
            HeadCopies::of(*self).keep_head_version(&mut bufs, addr);
        }
        self.durability.before_changing_staged(addr);
        let n = bytes.len().min(bufs.get(addr).map_or(0, |b| b.size as usize));
        // SAFETY: the head backed this buffer's pages just above; no request is in flight
        // (recovery holds the gate) and a checkpoint saving them finished (waited above).
        unsafe { self.offload.write_on_head(addr, &bytes[..n]) };
        bufs.install(a.buffer, HEAD, a.version);
        Ok(())
    }

    /// Run the kernel of task `t` on `w` over `regions` (its reads); which regions changed.
    fn rerun_kernel(&self, t: &TaskRecord, w: i32, regions: Vec<Region>, written: &[bool]) -> std::result::Result<Vec<bool>, Stop> {
        decide::same_allocations(t, Place::of(w) == Place::Head, None).map_err(|why| Stop::Recover(RecoverError::Fatal(why)))?;
        // Its allocations take the addresses of its first run's (see `worker/device_alloc.rs`).
        let replay: Vec<Region> = t.allocs.iter().map(|&(addr, size)| Region { addr, size }).collect();
        self.meter.log(format_args!("RERUN task #{} ({}) on {w}, {} device allocation(s) given again", t.id, t.kernel, replay.len()));
        let n = regions.len();
        let run = Execute { image: t.image, kernel: t.index, args: &t.args, regions, assume_written: written.to_vec(), send_back: vec![false; n], replay, short: false, quiet: true, digest: false, arena: None };
        let ran = Executor::of(*self).execute(w, run);
        self.rerun_ran(t, w, ran)
    }

    /// Check what re-running task `t` on `w` gave: which of its regions changed. Its device
    /// allocations must be its first run's.
    fn rerun_ran(&self, t: &TaskRecord, w: i32, ran: Result<Executed>) -> std::result::Result<Vec<bool>, Stop> {
        let ran = ran.map_err(|e| match e {
            ClusterError::Worker { rank, msg } => fatal(ClusterError::Worker { rank, msg: format!("re-running task #{} ({}): {msg}", t.id, t.kernel) }),
            e => fatal(e),
        })?;
        let again: Vec<(u64, u64)> = ran.allocated.iter().map(|a| (a.region.addr, a.span)).collect();
        decide::same_allocations(t, false, Some(&again)).map_err(|why| Stop::Recover(RecoverError::Fatal(why)))?;
        self.meter.trace(ran.traced.map(|(sent, _)| sent), Cat::Rerun, w, t.kernel.clone(), || vec![("task", json!(t.id))]);
        Ok(ran.changed)
    }
}

/// The flags an EXECUTE's `assume_written` takes for re-running `t`: for each buffer it
/// reads, whether its first run wrote it.
fn written_of(t: &TaskRecord) -> Vec<bool> {
    t.reads.iter().map(|a| t.writes.iter().any(|x| x.buffer == a.buffer)).collect()
}
