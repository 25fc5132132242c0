//! Resuming a job that died (`ompcluster-run --resume`, [`Resumer`]): the program runs again
//! from `main`, and the head fast-forwards through what the log of the newest checkpoint
//! covers.
//!
//! While fast-forwarding, a region whose key ([`crate::journal::key::task`]) the log holds is
//! not run: the buffers it changed get a new version that no rank holds, with the key and
//! pointers its first run left, the task is recorded like any other (recovery can re-run it),
//! and what it printed is printed again. Allocations, submits and deletes run as usual (a
//! submit is staged on the head, which sends nothing to a worker). A retrieve of a version no
//! rank holds is answered from the log, if it logged those bytes.
//!
//! The first request the log cannot answer (a region it does not hold, a retrieve it has no
//! bytes for, a submit into or a device copy from a version no rank holds) switches the job to
//! live for that request: under the gate's write side, the versions it needs that the newest
//! checkpoint holds (same address, same key) are adopted as checkpointed versions of this job:
//! the workers read them (`Event::Restore`), each straight into its memory, in parallel, and
//! check their checksums; the head sends only the requests. The versions it needs that no rank
//! holds then are rebuilt by the recovery algorithm, as after the loss of every worker, by
//! re-running logged regions. Then the request runs live; regions the
//! log holds go on being skipped until every one was, or 1,000 in a row were not.
//! Key matching makes this exact: a version is given the bytes of the first run's version only
//! if it has its key, which names how its contents were made.
//!
//! Lock order: the gate, then `replay`, then `buffers`.

use super::checkpointing::Checkpoints;
use super::durability::Durability;
use super::launch::Launcher;
use super::ledger::Ledger;
use super::link::Link;
use super::meter::Meter;
use super::movement::Movement;
use super::offload::Kernel;
use super::offload::Offload;
use super::recovery::Recovery;
use super::recovery::new_failure;
use super::requests::Requests;
use super::rerun::Rerunner;
use super::tolerance::Tolerance;
use super::{ClusterError, Result, Stopped};
use crate::checkpoint::Checkpointer;
use crate::config::Config;
use crate::data::{Place, PointsTo, HEAD};
use crate::inject::Injector;
use crate::journal::{self, Entry, Loaded};
use event_system::protocol::Region;
use ft_handler::State;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use task_graph::{Access, TaskRecord};

/// Where a resumed job is.
pub(crate) enum Replay {
    /// Not resuming, or switched to live.
    Live,
    /// Fast-forwarding through an earlier job's log.
    FastForward(Box<Loaded>),
}

pub use run_report::ResumeRecord;

/// The log and the resume state a head starts with: with checkpoints on, a log; with
/// `OMPCLUSTER_RESUME=1`, what the newest checkpoint's log holds.
pub(super) fn start(cfg: &Config, ckpt: Option<&Checkpointer>) -> (Option<Arc<journal::Journal>>, Replay, Option<ResumeRecord>) {
    let Some(cp) = ckpt else { return (None, Replay::Live, None) };
    let dir = cp.store.persistent_dir();
    let journal = match journal::Journal::new(dir, !cfg.resume) {
        Ok(_) if !cfg.cp_log => None,
        Ok(j) => Some(Arc::new(j)),
        Err(e) => {
            eprintln!("ompcluster: cannot keep the log for resuming in {}: {e}; a job resumed from these checkpoints will run from the start", dir.join(journal::LOG_DIR).display());
            None
        }
    };
    if !cfg.resume {
        return (journal, Replay::Live, None);
    }
    // This job's checkpoints come after the directory's, whatever it resumes from (even
    // from nothing): numbered from 1, they would be pruned before the first job's.
    if let Ok(Some(latest)) = ckpt_veloc::latest_version(dir) {
        cp.continue_after(latest);
    }
    match Loaded::read(dir) {
        Ok(l) => {
            let mut differs = Vec::new();
            if l.other_argv {
                differs.push("its arguments differ");
            }
            if l.other_exe {
                differs.push("its executable differs");
            }
            eprintln!(
                "ompcluster: resuming from checkpoint {} ({} regions logged; the first job had run {} regions in {:.3} s){}",
                l.checkpoint,
                l.tasks.len(),
                l.regions,
                l.at_seconds,
                if differs.is_empty() { String::new() } else { format!("; {} from the first job's: what no longer matches runs live", differs.join(" and ")) }
            );
            let rec = ResumeRecord { checkpoint: Some(l.checkpoint), first_job_regions: l.regions, first_job_seconds: l.at_seconds, ..Default::default() };
            (journal, Replay::FastForward(Box::new(l)), Some(rec))
        }
        Err(why) => {
            eprintln!("ompcluster: resume: {why}; running from the start");
            (journal, Replay::Live, Some(ResumeRecord { reason: why, ..Default::default() }))
        }
    }
}

/// What a fast-forwarding launch did.
pub(super) enum Skip {
    /// The log held it: not run.
    Done,
    /// Run it live (the job switched).
    Live,
}

/// Fast-forwarding ends after this many regions in a row that the log did not hold (the
/// program took another path: what is left of the log will not be used).
const LIVE_IN_A_ROW: u64 = 1000;

view! {
    /// Resuming: it fast-forwards requests (in their frame, [`Requests`]), and switching to live
    /// rebuilds versions with the recovery algorithm ([`Recovery`]) from checkpoints workers
    /// restore: it borrows the whole cluster.
    pub(super) struct Resumer { link: Link, ledger: Ledger, offload: Offload, tolerance: Tolerance, durability: Durability, meter: Meter, cfg: Config, stopped: Stopped }
    also { tolerance.inject: Injector }
}

impl<'a> Resumer<'a> {
    /// A region of `kernel` while fast-forwarding: skipped if the log holds its key, else the
    /// versions no rank holds are rebuilt if it needs one, and the caller runs it live.
    pub(super) fn skip_launch(&self, kernel: &Kernel, args: &[u64], begins: &[u64], hosts: &[u64]) -> Result<Skip> {
        let needs_rebuild = {
            let _gate = Requests::of(*self).enter()?;
            let mut replay = self.durability.replay.lock();
            let Replay::FastForward(log) = &mut *replay else { return Ok(Skip::Live) };
            let mut bufs = self.ledger.buffers.lock();
            let translated: Vec<(u64, u64)> = begins.iter().zip(hosts).filter(|(_, &h)| h != 0).map(|(&d, &h)| (d, h)).collect();
            let roots: Vec<u64> = args.iter().chain(begins).copied().collect();
            let reached = bufs.reachable(&roots, &translated, kernel.image);
            let key = kernel.region_key(args, reached.iter().filter_map(|a| bufs.get(*a)));
            let logged = log.tasks.get(&key).is_some_and(|t| t.writes.iter().all(|(a, _)| reached.contains(a)));
            if logged {
                let t = log.tasks.remove(&key).expect("looked up above");
                log.live_in_a_row = 0;
                let mut reads = Vec::with_capacity(reached.len());
                let mut writes = Vec::new();
                for a in &reached {
                    if let Some(b) = bufs.get(*a) {
                        reads.push(Access { buffer: b.id, version: b.version });
                    }
                }
                for (addr, ptrs) in &t.writes {
                    let v = bufs.new_version(*addr, BTreeSet::new()).expect("a reached buffer is live");
                    let b = bufs.get_mut(*addr).expect("a reached buffer is live");
                    b.key = journal::key::written(key, *addr);
                    b.points_to = match ptrs {
                        Some(p) => PointsTo::Some(p.iter().copied().collect()),
                        None => PointsTo::All,
                    };
                    writes.push(Access { buffer: b.id, version: v });
                }
                drop(bufs);
                let now = self.meter.start.elapsed().as_secs_f64();
                self.ledger.graph.lock().record(TaskRecord {
                    id: 0,
                    kernel: kernel.name.clone(),
                    image: kernel.image,
                    index: kernel.index,
                    args: args.to_vec(),
                    // It ran on no rank of this job.
                    worker: HEAD,
                    reads,
                    writes,
                    start_s: now,
                    end_s: now,
                    kernel_s: 0.0,
                    op: task_graph::Op::Kernel,
                    allocs: Vec::new(),
                    replicated: false,
                });
                if let Some(r) = self.durability.resume_record.lock().as_mut() {
                    r.regions_skipped += 1;
                    r.skipped_kernel_seconds += t.kernel_s;
                }
                if !t.output.is_empty() || !t.errors.is_empty() {
                    // SAFETY: flushing all C streams is always allowed.
                    unsafe { libc::fflush(std::ptr::null_mut()) };
                    event_system::write_all(1, &t.output);
                    event_system::write_all(2, &t.errors);
                }
                self.meter.log(format_args!("RESUME skipped {} (logged)", kernel.name));
                let done = log.tasks.is_empty();
                if let Some(j) = &self.durability.journal {
                    j.push(Entry::Task(t));
                }
                drop(replay);
                if done {
                    drop(_gate);
                    self.end_fast_forward("every region the log holds was skipped")?;
                }
                return Ok(Skip::Done);
            }
            log.live_in_a_row += 1;
            let region = self.ledger.graph.lock().recorded();
            let mut rec = self.durability.resume_record.lock();
            if let Some(r) = rec.as_mut().filter(|r| r.switched_live_at_region.is_none()) {
                let why = format!("the log does not hold this run of {} (an input, an argument or the program differs, or the first job had not run it before its checkpoint)", kernel.name);
                eprintln!("ompcluster: resume: live from region #{region} at {:.3} s: {why}; {} region(s) skipped so far", self.meter.start.elapsed().as_secs_f64(), r.regions_skipped);
                r.switched_live_at_region = Some(region);
                r.switched_live_at_seconds = Some(self.meter.start.elapsed().as_secs_f64());
                r.reason = why;
            }
            drop(rec);
            if log.live_in_a_row >= LIVE_IN_A_ROW {
                drop(bufs);
                drop(replay);
                drop(_gate);
                self.end_fast_forward(&format!("{LIVE_IN_A_ROW} regions in a row were not in the log"))?;
                return Ok(Skip::Live);
            }
            reached.iter().filter_map(|&a| bufs.get(a).filter(|b| b.version > 0 && b.holders.is_empty()).map(|b| b.id)).collect::<BTreeSet<u64>>()
        };
        if !needs_rebuild.is_empty() {
            self.rebuild_unheld(Some(needs_rebuild))?;
        }
        Ok(Skip::Live)
    }

    /// A retrieve while fast-forwarding: answered from the log if the version no rank holds
    /// has those bytes logged (true), else that version is rebuilt if needed (false: the
    /// caller retrieves as usual).
    ///
    /// # Safety
    /// `host..host+len` must be writable and not accessed by others meanwhile.
    pub(super) unsafe fn retrieve_from_log(&self, host: *mut u8, tgt: u64, len: u64) -> Result<bool> {
        let id = {
            let _gate = Requests::of(*self).enter()?;
            let replay = self.durability.replay.lock();
            let Replay::FastForward(log) = &*replay else { return Ok(false) };
            let bufs = self.ledger.buffers.lock();
            let Some(b) = bufs.containing_range(tgt, len) else { return Ok(false) };
            if b.version == 0 || !b.holders.is_empty() {
                return Ok(false);
            }
            let key = journal::key::retrieved(b.key, tgt - b.addr, len);
            if let Some(bytes) = log.retrieves.get(&key).filter(|b| b.len() as u64 == len) {
                // SAFETY: the caller guarantees the host range is writable; `bytes` has `len`
                // bytes.
                unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), host, bytes.len()) };
                if let Some(j) = &self.durability.journal {
                    j.push(Entry::Retrieve { key, bytes: bytes.clone() });
                }
                if let Some(r) = self.durability.resume_record.lock().as_mut() {
                    r.retrieves_from_log += 1;
                }
                self.meter.log(format_args!("RESUME retrieve {tgt:#x} {len} bytes from the log"));
                return Ok(true);
            }
            b.id
        };
        self.rebuild_unheld(Some([id].into()))?;
        Ok(false)
    }

    /// A submit into, or a device copy from, the buffers at `addrs` while fast-forwarding:
    /// if one holds a version no rank has, it is rebuilt first.
    pub(super) fn live_for(&self, addrs: &[u64]) -> Result<()> {
        let unheld: BTreeSet<u64> = {
            let bufs = self.ledger.buffers.lock();
            addrs.iter().filter_map(|&a| bufs.containing(a).filter(|b| b.version > 0 && b.holders.is_empty()).map(|b| b.id)).collect()
        };
        if !unheld.is_empty() {
            self.rebuild_unheld(Some(unheld))?;
        }
        Ok(())
    }

    /// Fast-forwarding is over: the log is dropped and every version no rank holds is
    /// rebuilt, so that checkpoints can be taken again.
    fn end_fast_forward(&self, why: &str) -> Result<()> {
        let gate = self.tolerance.ft.exclusive(State::Restarting);
        if !matches!(std::mem::replace(&mut *self.durability.replay.lock(), Replay::Live), Replay::FastForward(_)) {
            return Ok(());
        }
        self.durability.stop_fast_forward();
        let region = self.ledger.graph.lock().recorded();
        let at = self.meter.start.elapsed().as_secs_f64();
        let mut skipped = 0;
        if let Some(r) = self.durability.resume_record.lock().as_mut() {
            skipped = r.regions_skipped;
            r.fast_forward_ended_at_seconds = Some(at);
            if r.regions_skipped == r.first_job_regions {
                r.seconds_saved = Some(r.first_job_seconds - at);
            }
        }
        eprintln!("ompcluster: resume: fast-forward over at region #{region} at {at:.3} s ({why}); {skipped} region(s) skipped");
        drop(gate);
        self.rebuild_unheld(None)
    }

    /// Give the versions no rank holds of the buffers `only` names (every one, if None) a
    /// holder again, under the gate's write side: the
    /// checkpoint's versions are adopted (same address, same key), and the recovery algorithm
    /// restores them and re-runs logged regions for the others, as after the loss of every
    /// worker. A worker that dies meanwhile is recovered from by the handler (whose recovery
    /// rebuilds what no rank holds too), then this looks again.
    pub(super) fn rebuild_unheld(&self, only: Option<BTreeSet<u64>>) -> Result<()> {
        loop {
            match self.rebuild_unheld_once(only.as_ref()) {
                Err(ft_handler::RecoverError::NewFailure(r)) if self.tolerance.recovery() => {
                    self.tolerance.ft.notify(r);
                    self.tolerance.ft.wait_recovered(&[r].into()).map_err(ClusterError::Unrecoverable)?;
                }
                Err(e) => {
                    let region = self.ledger.graph.lock().recorded();
                    let msg = format!("cannot resume: the state at region #{region} cannot be rebuilt: {e}");
                    eprintln!("ompcluster: {msg}; ending the job");
                    return Err(ClusterError::Unrecoverable(msg));
                }
                Ok(()) => return Ok(()),
            }
        }
    }

    fn rebuild_unheld_once(&self, only: Option<&BTreeSet<u64>>) -> std::result::Result<(), ft_handler::RecoverError> {
        let _gate = self.tolerance.ft.exclusive(State::Restarting);
        self.adopt_checkpointed(only)?;
        if !self.ledger.buffers.lock().unheld().any(|a| only.is_none_or(|o| o.contains(&a.buffer))) {
            return Ok(());
        }
        let before = self.tolerance.recoveries.lock().len();
        // Dead ranks not yet recovered from are the handler's (it waits for this gate).
        let dead: BTreeSet<i32> = self.link.dead_workers().difference(&self.tolerance.ft.recovered()).copied().collect();
        if let Some(&r) = dead.iter().next() {
            return Err(ft_handler::RecoverError::NewFailure(r));
        }
        Recovery::of(*self).recover_only(&BTreeSet::new(), only)?;
        let (loaded, rebuilt) = self.tolerance.recoveries.lock().get(before).map_or((0, 0), |r| (r.outcome.from_checkpoints, r.outcome.rebuilt));
        if let Some(r) = self.durability.resume_record.lock().as_mut() {
            r.versions_loaded += loaded;
            r.versions_rebuilt += rebuilt;
        }
        self.meter.log(format_args!("RESUME rebuilt: {loaded} loaded, {rebuilt} rebuilt"));
        Ok(())
    }

    /// Adopt the checkpoint's copies of the versions no rank holds (of the buffers `only`
    /// names, every one if None) where their address and key match: see the module's
    /// documentation. Called with the gate's write side held: by a rebuild, and by recovery
    /// in a resumed job, so that a worker's death does not make it re-run what the
    /// checkpoint holds. A worker that died meanwhile gives `NewFailure` (what could be
    /// adopted without it is).
    pub(super) fn adopt_checkpointed(&self, only: Option<&BTreeSet<u64>>) -> std::result::Result<(), ft_handler::RecoverError> {
        let Some(cp) = &self.durability.ckpt else { return Ok(()) };
        if self.durability.adoptable.lock().is_empty() {
            return Ok(());
        }
        let mut adopted = 0;
        /// A version to rebuild that the checkpoint holds.
        struct Candidate {
            id: u64,
            version: u64,
            addr: u64,
            size: u64,
            key: u64,
            rec: ckpt_veloc::RegionRecord,
        }
        // Same address, same key.
        let candidates: Vec<Candidate> = {
            let adoptable = self.durability.adoptable.lock();
            let bufs = self.ledger.buffers.lock();
            bufs.iter()
                .filter(|b| !b.deleted && b.version > b.pristine_version() && b.holders.is_empty() && only.is_none_or(|o| o.contains(&b.id)))
                .filter(|b| !cp.holds(b.id, b.version))
                .filter_map(|b| {
                    let c = adoptable.get(&b.addr).filter(|c| c.key == b.key && c.record.size == b.size)?;
                    Some(Candidate { id: b.id, version: b.version, addr: b.addr, size: b.size, key: b.key, rec: c.record.clone() })
                })
                .collect()
        };
        // Adopted only once its data is checked: the record before an adopted version may
        // be pruned (it is safe), so a damaged file found later could not be rebuilt. The
        // workers read them, each straight into its memory and all at once (the worker
        // that saved one, if it is still a target: the first job's layout), and check them.
        // For one request (`only`), all on one worker, so that it finds its inputs together:
        // the one that saved most of them.
        let targets: Vec<i32> = Launcher::of(*self).targets().collect();
        let mut savers: BTreeMap<i32, usize> = BTreeMap::new();
        for c in &candidates {
            *savers.entry(c.rec.rank as i32).or_default() += 1;
        }
        let together = only.is_some().then(|| savers.iter().filter(|(w, _)| targets.contains(w)).max_by_key(|&(_, n)| *n).map(|(&w, _)| w)).flatten();
        // Per candidate: the tag of its RESTORE, or what became of it already.
        enum Got {
            Posted(i32),
            Done(std::result::Result<(), String>),
            /// Its worker died first.
            Unreached,
        }
        // The head reads and checks a copy itself.
        let head_reads = |rec: &ckpt_veloc::RegionRecord| ckpt_veloc::load_record(cp.store.persistent_dir(), rec);
        let mut posted = Vec::with_capacity(candidates.len());
        let mut failed = None;
        for (i, c) in candidates.into_iter().enumerate() {
            let saver = c.rec.rank as i32;
            let w = match together {
                Some(w) => w,
                None if targets.contains(&saver) => saver,
                None => targets.get(i % targets.len().max(1)).copied().unwrap_or(HEAD),
            };
            let got = if Place::of(w) == Place::Head {
                // No worker left: the head runs the regions, and holds the data itself.
                let a = Access { buffer: c.id, version: c.version };
                Got::Done(head_reads(&c.rec).map_err(|e| e.to_string()).and_then(|bytes| Rerunner::of(*self).put_on_head(a, c.addr, &bytes).map_err(|e| e.to_string())))
            } else {
                let backed = match self.ledger.buffers.lock().by_id_mut(c.id) {
                    Some(b) => Movement::of(*self).back_on(b, w),
                    None => continue,
                };
                match backed.and_then(|()| Checkpoints::of(*self).post_restore(w, Region { addr: c.addr, size: c.size }, &c.rec)) {
                    Ok(tag) => Got::Posted(tag),
                    Err(e) => {
                        failed = failed.or(Some(e));
                        Got::Unreached
                    }
                }
            };
            posted.push((c, w, got));
        }
        for (c, w, got) in posted {
            let got = match got {
                Got::Posted(tag) => match Checkpoints::of(*self).restored(w, tag) {
                    Ok(res) => Got::Done(res),
                    Err(e) => {
                        failed = failed.or(Some(e));
                        Got::Unreached
                    }
                },
                got => got,
            };
            // Where the checked copy is now (None: in the checkpoint only), or why not.
            let held = match got {
                Got::Done(Ok(())) => Ok(Some(w)),
                Got::Done(Err(why)) if Place::of(w) == Place::Head => Err(why),
                Got::Done(Err(why)) => {
                    // Its copy on `w` may hold part of the file: not a version any more.
                    self.ledger.buffers.lock().drop_copy(c.addr, w);
                    // The head checks it too: a worker that could not read a good copy
                    // (its own file system, memory) must not lose it; recovery loads it.
                    head_reads(&c.rec).map(|_| None).map_err(|e| format!("rank {w}: {why}; the head: {e}"))
                }
                // Checked by the head, for recovery to load (the handler recovers from
                // the worker's death when this returns).
                Got::Unreached | Got::Posted(_) => head_reads(&c.rec).map(|_| None).map_err(|e| e.to_string()),
            };
            match held {
                Ok(at) => {
                    cp.adopt(c.id, c.version, c.rec);
                    if let Some(j) = &self.durability.journal {
                        j.adopt(c.id, c.addr, c.size, c.key);
                    }
                    if let Some(w) = at {
                        self.ledger.buffers.lock().install(c.id, w, c.version);
                    }
                    adopted += 1;
                }
                Err(e) => {
                    eprintln!("ompcluster: resume: the checkpoint's copy of the buffer at {:#x} is unusable ({e}); rebuilding it by re-running logged regions", c.addr);
                    self.durability.adoptable.lock().remove(&c.addr);
                }
            }
        }
        if adopted > 0 {
            if let Some(r) = self.durability.resume_record.lock().as_mut() {
                r.versions_adopted += adopted;
            }
            self.meter.log(format_args!("RESUME adopted {adopted} checkpointed version(s), read by the workers"));
        }
        if let Some(e) = failed {
            return Err(new_failure(e));
        }
        Ok(())
    }

    /// The program ended: if it was still fast-forwarding, say so (what the log held beyond
    /// it was not reached: the program took a shorter path).
    pub(super) fn resume_ended(&self) {
        if let Replay::FastForward(log) = &*self.durability.replay.lock() {
            let skipped = self.durability.resume_record.lock().as_ref().map_or(0, |r| r.regions_skipped);
            eprintln!(
                "ompcluster: resume: the program ended while fast-forwarding: {skipped} region(s) skipped, {} region(s) of the log not reached",
                log.tasks.len()
            );
        }
    }
}
