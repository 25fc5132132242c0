//! An offloading request's frame ([`Requests`]): enter the gate, taking a checkpoint first if
//! one is due, and run the request again after the recovery from a failure it met. The
//! requests libomptarget makes are in `mod.rs` (memory requests) and `launch.rs`, each in
//! this frame; what they do inside it is in their own views.
//!
//! Threads: offloading threads and region threads (every request), the SIGTERM thread (a
//! final checkpoint, see `checkpointing.rs`).

use super::checkpointing::Checkpoints;
use super::durability::Durability;
use super::failures::Failures;
use super::ledger::Ledger;
use super::link::Link;
use super::meter::Meter;
use super::offload::Offload;
use super::resume::Resumer;
use super::tolerance::Tolerance;
use super::{ClusterError, Result, Stopped};
use crate::config::Config;
use crate::inject::Injector;

view! {
    /// A request's frame: borrows the whole cluster, since a checkpoint may be due at any
    /// request, and a request that met a failure may wait for a recovery or (a resumed job)
    /// rebuild the versions it needs.
    pub(super) struct Requests { link: Link, ledger: Ledger, offload: Offload, tolerance: Tolerance, durability: Durability, meter: Meter, cfg: Config, stopped: Stopped }
    also { tolerance.inject: Injector }
}

impl<'a> Requests<'a> {
    /// Enter an offloading request: take a checkpoint first if one is due, then hold the
    /// gate's read side for the request.
    pub(super) fn enter(&self) -> Result<parking_lot::RwLockReadGuard<'a, ()>> {
        self.stopped.check()?;
        if let Some(cp) = &self.durability.ckpt {
            // While fast-forwarding, versions no rank holds cannot be saved: no checkpoint.
            if let Some(_claim) = cp.claim(self.ledger.device_bytes()).filter(|_| !self.durability.fast_forward()) {
                Checkpoints::of(*self).checkpoint(cp, false);
            }
        }
        Ok(self.tolerance.ft.enter())
    }

    /// Run one offloading request; if it failed because a rank died, wait for the recovery
    /// from that failure and run it again from the start. The request is written so that a
    /// partial first attempt does no harm: nothing is recorded until it completes, and a
    /// repeated transfer writes the same bytes again.
    pub(super) fn resilient<T>(&self, mut request: impl FnMut() -> Result<T>) -> Result<T> {
        let mut rebuilt = 0;
        loop {
            let err = match request() {
                // A resumed job: a version a skipped region made, needed by a request that
                // started before another made it (`resume.rs`), is rebuilt, then it runs again.
                Err(ClusterError::Lost(addr)) if self.durability.resumed() && rebuilt < 3 && self.link.live.dead_ranks().is_subset(&self.tolerance.ft.recovered()) => {
                    rebuilt += 1;
                    let id = self.ledger.buffers.lock().get(addr).map(|b| b.id);
                    Resumer::of(*self).rebuild_unheld(id.map(|id| [id].into()))?;
                    continue;
                }
                Err(e) if self.tolerance.recovery() => e,
                done => return done,
            };
            let Some(dead) = Failures::of(*self).failure_behind(&err) else { return Err(err) };
            self.meter.log(format_args!("request failed ({err}); waiting for recovery from the loss of {dead:?}"));
            self.tolerance.ft.wait_recovered(&dead).map_err(ClusterError::Unrecoverable)?;
        }
    }
}
