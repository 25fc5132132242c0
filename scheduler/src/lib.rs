//! Placement of target regions on the live workers.
//!
//! * [`Policy::RoundRobin`]: workers in turn.
//! * [`Policy::Locality`] (default): earliest estimated finish time. For each worker the
//!   estimate is the time to move what it lacks (each missing buffer costs the observed
//!   latency of a small move, and its bytes cost the observed bandwidth) plus the work already
//!   queued on it (tasks in flight times the observed mean task time). Data stays where it is
//!   produced unless moving it is cheaper than waiting. The latency term is what keeps small
//!   dependent data in place: a 64-byte buffer costs a round trip between workers to move,
//!   not 64 ns. When every worker has a backlog, the estimates of those backlogs are rough
//!   (kernels share a worker's cores, so their times grow with the backlog) while a move's
//!   cost is certain: among the workers whose estimate is within [`BACKLOG_SLACK`] of the
//!   best one, the one that lacks the fewest bytes wins. A region then follows its data
//!   unless that costs it more than a quarter of the best wait; with an idle worker among
//!   the candidates the slack is nothing, and the choice is the earliest finish.
//!
//! The scheduler knows nothing of MPI or libomptarget: the caller tells it, per worker, how
//! many bytes are missing and how many tasks are in flight. So the same placement runs in a
//! simulation too ([`simulate`]: a recorded task log replayed on any number of workers; the
//! `ompcluster-placement-sim` command).

mod sim;

pub use sim::{min_busy_task_s, simulate, Costs, Head, Placement, ReadLogError, RecordedGraph, SimOutcome};

use parking_lot::Mutex;
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Placement policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Workers in turn.
    RoundRobin,
    /// Earliest estimated finish time (data locality and load).
    Locality,
}

/// Unknown policy name.
#[derive(Debug, thiserror::Error)]
#[error("unknown scheduling policy {0:?} (expected roundrobin or locality)")]
pub struct UnknownPolicy(String);

impl FromStr for Policy {
    type Err = UnknownPolicy;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "roundrobin" | "round-robin" | "rr" => Ok(Policy::RoundRobin),
            "locality" | "eft" => Ok(Policy::Locality),
            _ => Err(UnknownPolicy(s.into())),
        }
    }
}

/// What the scheduler knows of one live worker for one task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// Worker rank.
    pub rank: i32,
    /// Bytes of the task's data the worker lacks.
    pub missing_bytes: u64,
    /// How many of the task's buffers the worker lacks (each is one move).
    pub missing_buffers: u32,
    /// Tasks running or queued on the worker.
    pub in_flight: u32,
}

#[derive(Debug)]
struct Estimates {
    task_s: f64,
    bytes_per_s: f64,
    /// Seconds one small move takes (its latency, whatever its size).
    move_s: f64,
}

/// A placement policy with its running estimates.
#[derive(Debug)]
pub struct Scheduler {
    policy: Policy,
    next: AtomicUsize,
    est: Mutex<Estimates>,
}

const EMA: f64 = 0.2;

/// How much longer than the best estimate a worker's estimate may be and still win by lacking
/// fewer bytes: a fraction of the best estimate (see the module doc). A matmul 2048/256 on 3
/// workers with all its 64 chains in flight moved 2.3 times the bytes of a run with 7 in
/// flight, each chain's block chasing differences of one or two regions between backlogs.
pub const BACKLOG_SLACK: f64 = 0.25;

impl Scheduler {
    /// A scheduler with the given policy.
    pub fn new(policy: Policy) -> Self {
        Scheduler {
            policy,
            next: AtomicUsize::new(0),
            est: Mutex::new(Estimates { task_s: 1e-4, bytes_per_s: 1e9, move_s: 5e-5 }),
        }
    }

    /// The policy.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// Pick a worker among `candidates` (non-empty), or `None` if there is none.
    pub fn choose(&self, candidates: &[Candidate]) -> Option<i32> {
        if candidates.is_empty() {
            return None;
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed) % candidates.len();
        if self.policy == Policy::RoundRobin {
            return Some(candidates[start].rank);
        }
        let est = self.est.lock();
        let cost = |c: &Candidate| {
            c.missing_buffers as f64 * est.move_s + c.missing_bytes as f64 / est.bytes_per_s + c.in_flight as f64 * est.task_s
        };
        // Scan from a rotating start so that ties spread over the workers.
        let rotated = || (0..candidates.len()).map(|i| &candidates[(start + i) % candidates.len()]);
        let best = rotated().map(cost).min_by(f64::total_cmp)?;
        let within = best + best * BACKLOG_SLACK;
        rotated()
            .filter(|c| cost(c) <= within)
            .min_by(|a, b| a.missing_bytes.cmp(&b.missing_bytes).then(cost(a).total_cmp(&cost(b))))
            .map(|c| c.rank)
    }

    /// Feed back a finished task's kernel time.
    pub fn task_finished(&self, kernel_s: f64) {
        let mut e = self.est.lock();
        e.task_s = (1.0 - EMA) * e.task_s + EMA * kernel_s.max(1e-6);
    }

    /// Feed back an observed transfer: small ones measure the latency of a move, large ones
    /// the bandwidth.
    pub fn transfer_finished(&self, bytes: u64, seconds: f64) {
        if seconds <= 0.0 {
            return;
        }
        let mut e = self.est.lock();
        if bytes < (64 << 10) {
            e.move_s = (1.0 - EMA) * e.move_s + EMA * seconds;
        } else {
            e.bytes_per_s = (1.0 - EMA) * e.bytes_per_s + EMA * (bytes as f64 / seconds);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(rank: i32, missing_bytes: u64, in_flight: u32) -> Candidate {
        Candidate { rank, missing_bytes, missing_buffers: u32::from(missing_bytes > 0), in_flight }
    }

    #[test]
    fn round_robin_rotates() {
        let s = Scheduler::new(Policy::RoundRobin);
        let cands = [c(1, 0, 0), c(2, 0, 0), c(3, 0, 0)];
        let picks: Vec<i32> = (0..6).map(|_| s.choose(&cands).unwrap()).collect();
        assert_eq!(picks, vec![1, 2, 3, 1, 2, 3]);
        assert_eq!(s.choose(&[]), None);
    }

    #[test]
    fn locality_prefers_data_and_spreads_ties() {
        let s = Scheduler::new(Policy::Locality);
        // Worker 2 holds the 64 MiB the task needs.
        assert_eq!(s.choose(&[c(1, 64 << 20, 0), c(2, 0, 0), c(3, 64 << 20, 0)]), Some(2));
        // Ties spread over all workers.
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..3 {
            seen.insert(s.choose(&[c(1, 0, 0), c(2, 0, 0), c(3, 0, 0)]).unwrap());
        }
        assert_eq!(seen.len(), 3);
        // A long queue on the data holder sends small tasks elsewhere.
        for _ in 0..50 {
            s.task_finished(0.5);
        }
        assert_eq!(s.choose(&[c(1, 4096, 0), c(2, 0, 8)]), Some(1));
        assert!("bogus".parse::<Policy>().is_err());
        assert_eq!("RoundRobin".parse::<Policy>().unwrap(), Policy::RoundRobin);
    }

    #[test]
    fn small_buffers_stay_put_for_short_tasks_and_spread_for_long_ones() {
        let s = Scheduler::new(Policy::Locality);
        let small = |rank, missing_buffers, in_flight| Candidate { rank, missing_bytes: 64 * u64::from(missing_buffers), missing_buffers, in_flight };
        // Moves of 64 bytes take 100 us, tasks 2 us: a worker holding two of three inputs wins
        // over an idle one that lacks all three, even with a few tasks queued.
        for _ in 0..50 {
            s.transfer_finished(64, 1e-4);
            s.task_finished(2e-6);
        }
        for _ in 0..6 {
            assert_eq!(s.choose(&[small(1, 3, 0), small(2, 1, 4), small(3, 3, 0)]), Some(2));
        }
        // Small moves do not change the bandwidth estimate: 64 MiB still costs its bytes.
        assert_eq!(s.choose(&[c(1, 64 << 20, 0), c(2, 0, 4)]), Some(2));
        // Tasks of 10 ms: waiting behind 4 of them costs more than three moves.
        for _ in 0..50 {
            s.task_finished(1e-2);
        }
        assert_ne!(s.choose(&[small(1, 3, 0), small(2, 1, 4), small(3, 3, 0)]), Some(2));
    }

    #[test]
    fn with_every_worker_backlogged_a_region_follows_its_data() {
        let s = Scheduler::new(Policy::Locality);
        // Tasks of 10 ms, 1 MiB moves of about 1 ms.
        for _ in 0..50 {
            s.task_finished(1e-2);
            s.transfer_finished(1 << 20, 1e-3);
        }
        let mib = 1 << 20;
        // Worker 2 holds the data and is 2 regions behind the others' 20: it keeps the region
        // (plain earliest finish would move 1 MiB to save 20 ms of an estimated 200 ms).
        for _ in 0..6 {
            assert_eq!(s.choose(&[c(1, mib, 20), c(2, 0, 22), c(3, mib, 20)]), Some(2));
        }
        // Far behind (30 against 20), it does not.
        assert_ne!(s.choose(&[c(1, mib, 20), c(2, 0, 30), c(3, mib, 20)]), Some(2));
        // With an idle worker there is no slack: a 10 ms wait loses to a 1 ms move.
        assert_eq!(s.choose(&[c(1, mib, 0), c(2, 0, 1)]), Some(1));
    }
}
