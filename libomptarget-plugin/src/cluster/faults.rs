//! Injecting the faults of `OMPCLUSTER_FT_INJECT` (grammar in `crate::inject`): [`Faults`].
//!
//! Threads: any thread that reaches a trigger (offloading threads, the handler, checkpoints,
//! shutdown), and `ompc-ft-inject` for the faults triggered by time, started here.

use super::link::Link;
use super::meter::Meter;
use crate::inject::{Injector, Trigger};
use event_system::Liveness;
use event_system::protocol::Event;

view! {
    /// Injecting faults: borrows the link (to tell a victim), the meter (the clock, the log) and
    /// the fault injector of `Tolerance` (what is due, and when each fault was injected).
    pub(super) struct Faults { link: Link, meter: Meter, inject: Injector }
}

impl<'a> Faults<'a> {
    /// Inject the faults whose trigger `due` accepts.
    pub(super) fn inject_due(&self, due: impl Fn(&Trigger) -> bool) {
        if self.inject.is_empty() {
            return;
        }
        for (action, rank, trigger) in self.inject.due(due) {
            if self.link.live.is_dead(rank) || rank >= self.link.comm.size() {
                continue;
            }
            self.meter.log(format_args!("INJECT {action:?} into rank {rank}"));
            self.inject.injected(rank);
            let event = Event::Inject { signal: action.signal(), at_exit: trigger == Trigger::DuringExit };
            if let Err(e) = self.link.post(rank, event) {
                eprintln!("ompcluster: could not inject {action:?} into rank {rank}: {e}");
            }
        }
    }

    /// Seconds from the injection of `rank`'s fault to now, if one was injected.
    pub(super) fn since_injected(&self, rank: i32) -> Option<f64> {
        self.inject.injected_at(rank).map(|t| t.elapsed().as_secs_f64())
    }
}

impl Faults<'static> {
    /// Faults triggered by time: one thread sleeps until each is due.
    pub(super) fn start_timed(self) {
        let mut delays = self.inject.timed();
        if delays.is_empty() {
            return;
        }
        delays.sort_unstable();
        let spawned = std::thread::Builder::new().name("ompc-ft-inject".into()).spawn(move || {
            for ms in delays {
                let at = std::time::Duration::from_millis(ms);
                if let Some(wait) = at.checked_sub(self.meter.start.elapsed()) {
                    std::thread::sleep(wait);
                }
                self.inject_due(|t| matches!(t, Trigger::AfterMs(m) if *m <= ms));
            }
        });
        if let Err(e) = spawned {
            eprintln!("ompcluster: cannot start the fault injection thread: {e}");
        }
    }
}
