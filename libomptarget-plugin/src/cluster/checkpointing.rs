//! Taking a consistent checkpoint ([`Checkpoints`]): the pause, the plan of who saves what,
//! and the collection of the savers' answers in the background (design note in
//! `crate::checkpoint`); and having a worker restore a checkpointed version (re-runs,
//! resuming).

use super::durability::Durability;
use super::faults::Faults;
use super::ledger::Ledger;
use super::link::{self, Link};
use super::meter::Meter;
use super::movement::Movement;
use super::offload::Offload;
use super::tolerance::Tolerance;
use super::{ClusterError, Result};
use crate::checkpoint::{Checkpointer, SaveItem};
use crate::data::{Place, HEAD};
use crate::inject::Injector;
use event_system::protocol::{Event, Region, Reply};
use ft_handler::State;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Instant;
use timeline::Cat;

view! {
    /// Checkpoints: a consistent cut of the whole state, so it borrows every part: the gate
    /// (`Tolerance`), the versions to save (`Ledger`), who saves them (`Link`, and `Offload` for
    /// the least busy holder), the store and the log (`Durability`), and the `Meter`.
    pub(super) struct Checkpoints { link: Link, ledger: Ledger, offload: Offload, tolerance: Tolerance, durability: Durability, meter: Meter }
    also { tolerance.inject: Injector }
}

impl<'a> Checkpoints<'a> {
    /// Have worker `w` read a checkpointed version (`rec` says where it is) straight into its
    /// copy at `region`, which must be backed there: the head neither reads it nor sends it.
    /// Several may be posted before their answers are awaited ([`Checkpoints::restored`]).
    pub(super) fn post_restore(&self, w: i32, region: Region, rec: &ckpt_veloc::RegionRecord) -> Result<i32> {
        Faults::of(*self).inject_due(|t| *t == crate::inject::Trigger::DuringRestore);
        let record = serde_json::to_vec(rec).map_err(|e| ClusterError::Worker { rank: w, msg: format!("cannot encode a checkpoint record: {e}") })?;
        self.link.post(w, Event::Restore { region, record })
    }

    /// The answer to [`Checkpoints::post_restore`]: `Ok(Err(why))` if the copy is unusable
    /// (damaged, missing: the worker checked it against its checksum).
    pub(super) fn restored(&self, w: i32, tag: i32) -> Result<std::result::Result<(), String>> {
        match self.link.comm.recv_msg::<Reply>(w, tag, self.link.live.as_ref())? {
            Reply::Ok => Ok(Ok(())),
            Reply::Error(why) => Ok(Err(why)),
            other => Err(link::unexpected(w, other)),
        }
    }

    /// SIGTERM (`crate::sigterm`): take a checkpoint now, whatever the interval, and wait
    /// until it is published. Nothing while fast-forwarding (versions no rank holds cannot
    /// be saved: a resume of this job starts from the checkpoint this one resumed from).
    pub(super) fn final_checkpoint(&self) {
        let Some(cp) = &self.durability.ckpt else { return };
        if self.durability.fast_forward() {
            eprintln!("ompcluster: SIGTERM while fast-forwarding a resumed job: no final checkpoint");
            return;
        }
        self.checkpoint(cp, true);
        cp.wait();
    }

    /// Take a consistent checkpoint: pause offloading, decide who saves which changed buffer,
    /// tell the saving workers, resume; the saves that follow and the flush run in the
    /// background (design note in `checkpoint.rs`).
    pub(super) fn checkpoint(&self, cp: &Checkpointer, force: bool) {
        let t0 = Instant::now();
        let traced = self.meter.trace_now();
        let gate = self.tolerance.ft.exclusive(State::Checkpointing);
        if force {
            // At most one checkpoint in progress: one a region took before this one got the
            // gate (its pause may have held it as SIGTERM came) is saved and flushed first.
            // Started beside it, this one's log cut replaced that one's, and both failed to
            // publish while SIGTERM said "final checkpoint done". No region runs meanwhile;
            // the flush needs no gate.
            if cp.in_progress() {
                eprintln!("ompcluster: SIGTERM: a checkpoint in progress is published first");
                cp.wait();
            }
        } else if !cp.due(self.ledger.device_bytes()) {
            return; // another thread took it while we waited
        }
        // A failure not yet recovered from: no checkpoint now (a buffer whose only holders
        // died cannot be saved, and a checkpoint missing it would not be a consistent cut).
        // Recovery holds the gate next; the checkpoint is taken at the first request after it.
        if !self.link.live.dead_ranks().is_subset(&self.tolerance.ft.recovered()) {
            return;
        }
        let saved = cp.saved_versions();
        let mut plan: BTreeMap<i32, Vec<SaveItem>> = BTreeMap::new();
        // The content keys of what it saves, for the log (`journal.rs`).
        let mut keys = Vec::new();
        {
            let bufs = self.ledger.buffers.lock();
            for b in bufs.iter().filter(|b| b.version > b.pristine_version() && saved.get(&b.id) != Some(&b.version)) {
                if self.durability.journal.is_some() {
                    keys.push((b.id, b.addr, b.size, b.key));
                }
                match Movement::of(*self).current_holder(b) {
                    Some(r) => plan.entry(r).or_default().push((b.id, b.addr, b.size, b.version)),
                    // A rank died since the check above: as above, not now.
                    None => return,
                }
            }
        }
        // Nothing changed or freed since the last checkpoint: a new version would publish the
        // same state (before the program maps anything, an empty one). The interval restarts.
        if plan.is_empty() && !cp.forgot_any() && !force {
            cp.skip();
            return;
        }
        let ckpt = cp.begin();
        if let Some(j) = &self.durability.journal {
            // Every request before the pause has completed: its entries go with this checkpoint.
            j.cut(ckpt, self.meter.start.elapsed().as_secs_f64(), self.ledger.graph.lock().recorded(), keys);
        }
        let mut posted = Vec::new();
        let mut post_failed = None;
        for (&r, items) in plan.iter().filter(|(&r, _)| Place::of(r).is_worker()) {
            let regions = items.iter().map(|&(id, addr, size, _)| (id, Region { addr, size })).collect();
            match self.link.post(r, Event::Checkpoint { ckpt, regions }) {
                Ok(tag) => posted.push((r, tag)),
                Err(e) => {
                    // This checkpoint fails; the workers already told still answer, and the
                    // background thread collects their answers like any others.
                    post_failed = Some(format!("rank {r}: {e}"));
                    break;
                }
            }
        }
        Faults::of(*self).inject_due(|t| *t == crate::inject::Trigger::DuringCheckpoint);
        let head_items = plan.get(&HEAD).cloned().unwrap_or_default();
        let items: Vec<SaveItem> = plan.values().flatten().copied().collect();
        let pause = t0.elapsed();
        self.meter.trace(traced, Cat::Checkpoint, HEAD, format!("checkpoint {ckpt}"), || {
            let bytes: u64 = items.iter().map(|&(_, _, size, _)| size).sum();
            vec![("buffers", json!(items.len())), ("bytes", json!(bytes))]
        });
        let (comm, live, trace) = (self.link.comm.clone(), self.link.live.clone(), self.meter.trace.clone());
        let paused = self.meter.trace_now();
        self.meter.log(format_args!("CHECKPOINT {ckpt}: {} regions, pause {:.3} ms", items.len(), pause.as_secs_f64() * 1e3));
        cp.end_pause(ckpt, &items, head_items, pause, self.durability.journal.clone(), move |own_flush, saved| {
            // Each worker answers twice on its tag: saved (Ok), then flushed (Flushed). Every
            // answer is collected, even after a failure, so that none is left behind.
            let mut failed = post_failed;
            let mut flushing = Vec::new();
            for &(r, tag) in &posted {
                match comm.recv_msg::<Reply>(r, tag, live.as_ref()) {
                    Ok(Reply::Ok) => flushing.push((r, tag)),
                    Ok(Reply::Error(e)) => failed = failed.or(Some(format!("rank {r}: {e}"))),
                    Ok(other) => failed = failed.or(Some(format!("rank {r}: unexpected reply {other:?}"))),
                    Err(e) => failed = failed.or(Some(e.to_string())),
                }
            }
            saved();
            let mut records = Vec::new();
            match own_flush.and_then(|h| h.wait()) {
                Ok(own) => records.extend(own.records),
                Err(e) => failed = failed.or(Some(e.to_string())),
            }
            for (r, tag) in flushing {
                let recs = match comm.recv_msg::<Reply>(r, tag, live.as_ref()) {
                    Ok(Reply::Flushed(bytes)) => serde_json::from_slice::<Vec<ckpt_veloc::RegionRecord>>(&bytes)
                        .map_err(|e| format!("bad flush records from rank {r}: {e}"))
                        .and_then(|recs| match recs.iter().all(|x| x.rank == r as u32 && x.ckpt == ckpt) {
                            true => Ok(recs),
                            false => Err(format!("rank {r} sent records of another rank or checkpoint")),
                        }),
                    Ok(Reply::Error(e)) => Err(format!("rank {r}: {e}")),
                    Ok(other) => Err(format!("rank {r}: unexpected reply {other:?}")),
                    Err(e) => Err(e.to_string()),
                };
                match recs {
                    Ok(recs) => records.extend(recs),
                    Err(e) => failed = failed.or(Some(e)),
                }
            }
            if let (Some(t), Some(since)) = (trace, paused) {
                let outcome = failed.clone().unwrap_or_else(|| "saved and flushed".into());
                t.span(Cat::CheckpointFlush, HEAD, format!("checkpoint {ckpt} in the background"), since, vec![("outcome", json!(outcome))]);
            }
            failed.map_or(Ok(records), Err)
        });
        drop(gate);
    }
}
