//! Failures as the head learns of them ([`Failures`]): the handler's view of this device
//! ([`HeadDevice`]), the prober that watches the worker processes on the head's host, the
//! notices from the failure detector and from requests that met a dead rank, telling the live
//! workers, and the report's records of failures and recoveries. Recovery itself is
//! `recovery.rs`.
//!
//! Threads: the prober (`ompc-ft-prober`, started here) and the detector's callback thread
//! note failures without MPI; the handler thread tells the workers (it may use MPI).

use super::recovery::Recovery;
use super::faults::Faults;
use super::link::Link;
use super::meter::Meter;
use super::tolerance::Tolerance;
use super::{Cluster, ClusterError, Stopped};
use crate::data::{Place, HEAD};
use crate::inject::Injector;
use event_system::Liveness;
use event_system::comm::CommError;
use event_system::process::Victim;
use event_system::protocol::Event;
use ft_handler::{Device, RecoverError};
use serde_json::json;
use std::collections::BTreeSet;
use timeline::Cat;

/// How often the head looks whether the worker processes on its host still exist.
const PROBE_PERIOD: std::time::Duration = std::time::Duration::from_millis(20);

pub use run_report::{FailureRecord, RecoveryRecord, SpareRecord};

/// The cluster device as the handler sees it.
pub(crate) struct HeadDevice {
    c: &'static Cluster,
    /// What to do when recovery is impossible; never returns (given by the runtime).
    on_fatal: fn(&str) -> !,
}

impl Device for HeadDevice {
    fn dead(&self) -> BTreeSet<i32> {
        self.c.link.dead_workers()
    }

    fn noticed(&self, dead: &BTreeSet<i32>) {
        Failures::of(self.c).tell_workers(dead);
    }

    fn recover(&self, dead: &BTreeSet<i32>) -> std::result::Result<(), RecoverError> {
        if self.c.tolerance.inject.panic_due_in_recovery() {
            panic!("injected panic (OMPCLUSTER_FT_INJECT=panic:during=recovery)");
        }
        Recovery::of(self.c).recover(dead)
    }

    fn fatal(&self, why: &str) {
        // The runtime's answer: the head's end ends the job (the workers leave when they see
        // it gone).
        (self.on_fatal)(why)
    }
}

impl HeadDevice {
    /// The handler's view of `c`; `on_fatal` ends the job when recovery is impossible.
    pub(super) fn new(c: &'static Cluster, on_fatal: fn(&str) -> !) -> Self {
        HeadDevice { c, on_fatal }
    }
}

view! {
    /// Failures as the head learns of them: borrows the link (liveness, fencing, telling the
    /// workers), the tolerance (the handler told, the records of failures and recoveries, when a
    /// fault was injected) and the meter (the clock, the timeline); a failure after shutdown is
    /// only fenced (`stopped`).
    pub(super) struct Failures { link: Link, tolerance: Tolerance, meter: Meter, stopped: Stopped }
    also { tolerance.inject: Injector }
}

impl Failures<'static> {
    /// Start the prober that watches the workers on the head's host (with the handler, see
    /// [`Cluster::start_handler`]).
    pub(super) fn start_prober(self) -> std::io::Result<()> {
        let local: Vec<(i32, Victim)> = self.link.on_head_host();
        if local.is_empty() {
            return Ok(());
        }
        std::thread::Builder::new().name("ompc-ft-prober".into()).spawn(move || self.probe(&local)).map(|_| ())
    }
}

impl<'a> Failures<'a> {
    /// A worker process on the head's host that has ended is dead now, not only after the
    /// heartbeat timeout: look every [`PROBE_PERIOD`] (a read of `/proc/PID/stat` each).
    /// It runs until the process ends: during shutdown too, where a dead worker must not
    /// make the head wait for the heartbeat timeout (it is then only fenced, not recovered).
    fn probe(&self, local: &[(i32, Victim)]) {
        // Watched (the `watchdog` crate): every round reads /proc and notes failures, no wait.
        let beat = watchdog::global().beat("ompc-ft-prober", "looking at the workers on this host");
        loop {
            beat.tick();
            for &(r, v) in local {
                if !self.link.live.is_dead(r) && event_system::process::is_gone(v) {
                    if self.stopped.is_set() {
                        self.link.live.fence(r);
                    } else {
                        self.note_failure(r, "its process ended: seen by the head on their shared host");
                    }
                }
            }
            std::thread::sleep(PROBE_PERIOD);
        }
    }

    /// A rank failed (the failure detector said so, or a peer reported it): record and report
    /// the first notice of each rank and tell the handler. Called on the heartbeat thread: no
    /// MPI here, and no lock held across anything but the record (the handler thread tells
    /// the workers, see [`Failures::tell_workers`]).
    pub(super) fn note_failure(&self, rank: i32, how: &str) {
        if Place::of(rank) == Place::Head || self.stopped.is_set() {
            return;
        }
        self.note_dead(rank, how);
        self.tolerance.ft.notify(rank);
    }

    /// Fence `rank` and, the first time, record and report its failure (no MPI).
    fn note_dead(&self, rank: i32, how: &str) {
        self.link.live.fence(rank);
        let mut f = self.tolerance.failures.lock();
        if !f.iter().any(|x| x.rank == rank) {
            let at = self.meter.start.elapsed().as_secs_f64();
            eprintln!("ompcluster: worker rank {rank} failed ({how}) at {at:.3} s; recovering");
            let latency = Faults::of(*self).since_injected(rank);
            if let Some(t) = &self.meter.trace {
                t.instant(Cat::Failure, HEAD, format!("rank {rank} failed"), vec![("rank", json!(rank)), ("noticed_by", json!(how))]);
            }
            f.push(FailureRecord { rank, at_seconds: at, noticed_by: how.to_string(), detection_latency_seconds: latency });
        }
    }

    /// Tell the live workers (FAILED), once per dead rank, that the `dead` ranks died: a
    /// transfer of theirs with a dead rank ends now rather than at their own heartbeat
    /// timeout (3 s by default), and with it the request recovery waits for. The handler
    /// thread calls it before it waits for the requests in flight.
    pub(super) fn tell_workers(&self, dead: &BTreeSet<i32>) {
        let new: Vec<i32> = self.link.newly_told(dead);
        if new.is_empty() {
            return;
        }
        for w in self.link.workers() {
            // A worker that cannot be told is dead too, or notices by itself.
            let _ = self.link.post(w, Event::Failed { ranks: new.clone() });
        }
    }

    /// [`Failures::note_dead`] and [`Failures::tell_workers`] (on a thread that may use MPI).
    pub(super) fn record_failure(&self, rank: i32, how: &str) {
        self.note_dead(rank, how);
        self.tell_workers(&[rank].into());
    }

    /// Failures and recoveries so far, for the report.
    pub(super) fn ft_report(&self) -> (Vec<FailureRecord>, Vec<RecoveryRecord>) {
        (self.tolerance.failures.lock().clone(), self.tolerance.recoveries.lock().clone())
    }

    /// The dead ranks an error is explained by, if it is one recovery deals with: a wait that
    /// gave up on a dead rank (fenced here if a worker was the one to notice), or a buffer or
    /// worker missing while some dead rank is not yet recovered from.
    pub(super) fn failure_behind(&self, e: &ClusterError) -> Option<BTreeSet<i32>> {
        let mut dead = self.link.live.dead_ranks();
        if let Some(r) = self.dead_peer(e) {
            dead.insert(r);
        } else {
            // A buffer or worker missing is explained by a failure not yet recovered from.
            let missing = matches!(e, ClusterError::NoWorker | ClusterError::Lost(_));
            if !missing || dead.is_subset(&self.tolerance.ft.recovered()) {
                return None;
            }
        }
        dead.remove(&HEAD);
        Some(dead)
    }

    /// If `e` says a rank died (a wait gave up on it, or a worker reported its exchange
    /// partner dead), fence that rank, tell the handler, and return it.
    pub(super) fn dead_peer(&self, e: &ClusterError) -> Option<i32> {
        match e {
            ClusterError::Comm(CommError::PeerDead(r)) | ClusterError::PeerDead(r) => {
                // Recorded (and fenced) here with how it was noticed, before the handler can
                // record it in general terms.
                let how = match e {
                    ClusterError::PeerDead(_) => "declared dead by the failure detector of the worker on the other side of a transfer",
                    _ => "declared dead by the failure detector, noticed by a request waiting for it",
                };
                if self.stopped.is_set() {
                    self.link.live.fence(*r);
                } else {
                    self.record_failure(*r, how);
                }
                self.tolerance.ft.notify(*r);
                Some(*r)
            }
            _ => None,
        }
    }
}
