//! Buddy copies ([`Buddy`]): a second copy, on the head, of versions that only workers hold.
//!
//! Versions are immutable, so a copy of version v taken at any time is as good as the worker's
//! for lineage: once the head holds v, a failure of the worker can cost at most the tasks that
//! made the versions after v (recovery re-runs them from the head's copy), and the task record
//! can forget the tasks before v. The head is every worker's buddy: its copy survives any set
//! of worker failures, unlike a copy on another worker (which dies with its pair).
//!
//! Design note (threads and locks). One thread, `ompc-ft-buddy`, started with the handler
//! when fault tolerance is on and `OMPCLUSTER_FT_BUDDY_INTERVAL` is not 0. Every interval it
//! lists, under the buffer lock, the live buffers whose current version no copy on the head
//! (nor a published checkpoint) holds, the ones furthest ahead of the head's copy first, and
//! copies them one by one:
//! * It holds the gate's read side for each copy, like an offloading request, so a recovery
//!   or a checkpoint never runs while it copies, and it never waits for one while holding the
//!   buffer lock.
//! * It copies a buffer only while no region in flight can reach it on any rank (such a
//!   region may have to merge its changes against the version it started from, of which the
//!   head's copy may be the last one), and takes the version only from a clean copy (nothing
//!   is moving into it, no merge holds it, no submit or device copy is writing the
//!   buffer: `Buffer::host_writes`) and marks that copy as read (`Buffer::buddy_reading`)
//!   while the bytes travel: no kernel starts on it, no submit, device copy or delete changes
//!   it meanwhile (each waits for the mark to go; a move never writes a copy that holds the
//!   current version). The bytes are installed in the head's copy only if the worker's copy
//!   still holds that version.
//! * Writing the head's copy happens under the buffer lock, after any checkpoint still
//!   saving that copy is done, and after keeping the version it replaces apart if lineage
//!   still needs it (as any write of the head's copy does).
//! * After each pass it prunes the task record if due (`Pruner::prune`: the walk holds only
//!   the record's lock), which the copies just made let forget what came before them; a
//!   region prunes only if the record has grown to twice the threshold meanwhile.
//! * Shutdown waits for a batch in progress (`Tolerance::buddy_busy`), so that no MPI call of
//!   this thread outlives the workers or MPI itself.
//! * Bandwidth: after a batch that took `t` it waits `t * (100 - share) / share`
//!   (`OMPCLUSTER_FT_BUDDY_SHARE`, percent), so it spends at most that share of its time
//!   copying. Memory: it backs the head's pages for a buffer only while the head backs at
//!   most `OMPCLUSTER_FT_BUDDY_MEMORY` bytes of buffers; the head's older copies count
//!   against `OMPCLUSTER_FT_RETAIN` as before.

use super::durability::Durability;
use super::head_copies::HeadCopies;
use super::ledger::Ledger;
use super::link::Link;
use super::meter::Meter;
use super::movement::Movement;
use super::offload::Offload;
use super::prune::Pruner;
use super::tolerance::Tolerance;
use super::{Result, Stopped};
use crate::config::Config;
use crate::data::HEAD;
use crate::inject::Injector;
use event_system::protocol::Region;
use ft_handler::buddy::{BuddyPolicy, Candidate};
use std::time::{Duration, Instant};

pub use run_report::BuddyStats;

/// The buddy schedule (`ft_handler::buddy`) from the settings.
pub(super) fn policy(cfg: &Config) -> BuddyPolicy {
    BuddyPolicy::new(Duration::from_millis(cfg.buddy_interval_ms), cfg.buddy_share_percent, cfg.buddy_memory)
}

view! {
    /// Buddy copies: the thread reads every part (liveness, the buffers, the regions in flight,
    /// checkpoints, the settings), copies through [`Movement`], writes the head's copies through
    /// [`HeadCopies`] and prunes through [`Pruner`], under the gate and its own `buddy_busy`: it
    /// borrows the whole cluster.
    pub(super) struct Buddy { link: Link, ledger: Ledger, offload: Offload, tolerance: Tolerance, durability: Durability, meter: Meter, cfg: Config, stopped: Stopped }
    also { tolerance.inject: Injector }
}

impl Buddy<'static> {
    /// Start the buddy thread, if buddy copies are on.
    pub(super) fn start(self) -> std::io::Result<()> {
        if !self.ledger.retains() || !policy(self.cfg).enabled() {
            return Ok(());
        }
        std::thread::Builder::new().name("ompc-ft-buddy".into()).spawn(move || self.buddy_loop()).map(|_| ())
    }
}

impl<'a> Buddy<'a> {
    fn buddy_loop(&self) {
        use watchdog::State;
        let policy = policy(self.cfg);
        // Watched (the `watchdog` crate): running between its waits on workers and the gate.
        let beat = watchdog::global().beat("ompc-ft-buddy", "a pass of buddy copies");
        // Its own: the waits it reaches inside other code (the buffer table's lock, MPI) mark it.
        beat.own();
        loop {
            beat.set(State::Idle, "sleeping between passes");
            std::thread::sleep(policy.interval);
            beat.set(State::Running, "a pass of buddy copies");
            if self.stopped.is_set() || self.offload.local().is_some() {
                return;
            }
            self.buddy_pass(&policy, &beat);
            // The copies just made let the record forget what came before them: pruned here,
            // off the offloading threads' path (see `Pruner::maybe_prune`), like a region,
            // under the gate's read side.
            let _busy = self.tolerance.buddy_busy.lock();
            let _gate = beat.waiting("the gate (a recovery holds it)", || self.tolerance.ft.enter());
            beat.set(State::Running, "pruning the task record");
            if self.stopped.check().is_ok() {
                Pruner::of(*self).prune();
            }
        }
    }

    /// Copy to the head every version that only workers hold, furthest behind first, in
    /// batches from one worker at a time.
    fn buddy_pass(&self, policy: &BuddyPolicy, beat: &watchdog::Beat) {
        let (mut head_bytes, todo) = {
            let bufs = self.ledger.buffers.lock();
            let mut head_bytes = 0;
            let mut todo = Vec::new();
            for b in bufs.iter() {
                if b.staged() {
                    head_bytes += b.span;
                }
                if b.deleted || b.version <= b.pristine_version() || b.holders.is_empty() || b.on_head() {
                    continue;
                }
                if self.durability.ckpt.as_ref().is_some_and(|c| c.holds(b.id, b.version)) {
                    continue;
                }
                let lag = b.version - b.version_on(HEAD).unwrap_or(0);
                todo.push(Candidate { key: b.addr, id: b.id, lag });
            }
            (head_bytes, todo)
        };
        let mut todo: std::collections::VecDeque<Candidate> = {
            let mut v = todo;
            policy.order(&mut v);
            v.into()
        };
        while !todo.is_empty() {
            if self.stopped.is_set() {
                return;
            }
            // The gate, and copies from a worker (bounded by the failure detector).
            match beat.waiting("a batch of copies from a worker", || self.buddy_batch(policy, &mut todo, &mut head_bytes)) {
                Ok(None) => {}
                // Copying takes at most its share of the time: a pause after the time the
                // batch copied (not the time it waited for the gate: a recovery's, say).
                Ok(Some(took)) => beat.waiting("a pause between batches (OMPCLUSTER_FT_BUDDY_SHARE)", || std::thread::sleep(policy.pause_after(took))),
                // A worker died (the handler recovers), or the device stopped: next pass.
                Err(_) => return,
            }
        }
    }

    /// Copy a batch of the versions `todo` lists (taken from its front) to the head: those
    /// still current, not on the head, of which one worker (the first one's source) has a
    /// clean copy, as many as the policy's batch takes. Returns how long it copied, if it
    /// took any.
    fn buddy_batch(&self, policy: &BuddyPolicy, todo: &mut std::collections::VecDeque<Candidate>, head_bytes: &mut u64) -> Result<Option<std::time::Duration>> {
        // Shutdown waits for a batch in progress (its MPI calls) before it stops the workers.
        let _busy = self.tolerance.buddy_busy.lock();
        let _gate = self.tolerance.ft.enter();
        self.stopped.check()?;
        // (candidate, version, region)
        let mut picked: Vec<(Candidate, u64, Region)> = Vec::new();
        let mut src = None;
        {
            let mut bufs = self.ledger.buffers.lock();
            let mut skipped = std::collections::VecDeque::new();
            let mut bytes = 0u64;
            while let Some(c) = todo.pop_front() {
                if policy.batch_full(picked.len(), bytes) {
                    todo.push_front(c);
                    break;
                }
                let Some(b) = bufs.get_mut(c.key).filter(|b| b.id == c.id && !b.deleted) else { continue };
                if b.on_head() || b.incoming.contains(&HEAD) || b.holding.contains_key(&HEAD) || b.host_writes > 0 || b.buddy_reading.is_some() {
                    continue;
                }
                // A region in flight that can reach it, anywhere, may have to merge its changes
                // against the version it started from, which the head's copy may be the last
                // copy of: not overwritten meanwhile.
                if !b.using.is_empty() || b.writing.is_some() {
                    continue;
                }
                let v = b.version;
                let clean = |r: &i32| self.link.is_live_worker(*r) && b.clean_copy(*r, v) && !b.holding.contains_key(r) && !b.incoming.contains(r);
                let from = match src {
                    Some(s) if clean(&s) => s,
                    // Another worker's: for a later batch.
                    Some(_) if b.holders.iter().any(clean) => {
                        skipped.push_back(c);
                        continue;
                    }
                    Some(_) => continue,
                    None => match b.holders.iter().copied().filter(clean).min_by_key(|&r| self.offload.in_flight(r)) {
                        Some(r) => r,
                        None => continue,
                    },
                };
                if !b.staged() {
                    if !policy.admits(*head_bytes, b.span) {
                        self.tolerance.buddy_stats.lock().over_budget += 1;
                        continue;
                    }
                    *head_bytes += b.span;
                }
                src = Some(from);
                b.buddy_reading = Some(from);
                bytes += b.size;
                picked.push((c, v, Region { addr: b.addr, size: b.size }));
            }
            skipped.extend(todo.drain(..));
            *todo = skipped;
        }
        let Some(src) = src else { return Ok(None) };
        let t0 = Instant::now();
        let regions: Vec<Region> = picked.iter().map(|p| p.2).collect();
        let fetched = Movement::of(*self).fetch_many(&regions, src);
        let mut bufs = self.ledger.buffers.lock();
        for (c, ..) in &picked {
            if let Some(b) = bufs.get_mut(c.key).filter(|b| b.id == c.id) {
                b.buddy_reading = None;
            }
        }
        self.ledger.moved.notify_all();
        let fetched = fetched?;
        let mut copied = 0;
        let mut copied_bytes = 0;
        for ((c, version, region), bytes) in picked.iter().zip(fetched) {
            let still = bufs.get(c.key).is_some_and(|b| {
                b.id == c.id && b.version_on(src) == Some(*version) && !b.on_head() && !b.holding.contains_key(&HEAD)
            });
            if !still {
                continue;
            }
            HeadCopies::of(*self).stage_on_head(&mut bufs, c.key)?;
            HeadCopies::of(*self).keep_head_version_before(&mut bufs, c.key, Some(*version));
            self.durability.before_changing_staged(c.key);
            // SAFETY: the head backed this buffer's pages just above; nothing reads the head's
            // copy meanwhile: it holds no current version (so no request sends from it), a
            // checkpoint saving it is done (waited above), and recovery cannot run (the gate
            // is held).
            unsafe { self.offload.write_on_head(c.key, &bytes) };
            bufs.install(c.id, HEAD, *version);
            if let Some(b) = bufs.get_mut(c.key) {
                b.buddy = Some(*version);
            }
            copied += 1;
            copied_bytes += region.size;
            self.meter.log(format_args!("BUDDY buffer {} version {} copied from {src} to the head ({} bytes)", c.id, version, region.size));
        }
        drop(bufs);
        let took = t0.elapsed();
        let mut s = self.tolerance.buddy_stats.lock();
        s.copies += copied as u64;
        s.bytes += copied_bytes;
        s.seconds += took.as_secs_f64();
        Ok(Some(took))
    }
}
