//! Discrete-event simulator: runs the same `Core` state machines as the MPI driver over a
//! simulated network and clock, on one thread.
//!
//! Model: each rank's detector thread wakes on a grid of `timestep` (with a per-rank random
//! phase), exactly as the MPI driver polls once per timestep; a message that arrives is
//! handled at the receiver's next grid point; the wire adds `latency`. A killed rank stops
//! handling anything and messages to it are lost. Between wakes the simulator skips time,
//! so a rank costs nothing while it has nothing to do.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::sync::Arc;

use serde::Serialize;

use crate::core::{Core, CoreConfig, Msg, Net, Ring, Time};
use crate::{BcastAlgo, Notice};

/// Where the simulated failures fall.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Consecutive rank numbers (a node or a rack).
    Sequential,
    /// Distinct ranks drawn at random.
    Random,
}

/// Parameters of one simulation.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Number of ranks.
    pub ranks: usize,
    /// Number of ranks killed (all at the same instant).
    pub failures: usize,
    /// Which ranks.
    pub pattern: Pattern,
    /// Broadcast algorithm.
    pub bcast: BcastAlgo,
    /// Ring shuffle.
    pub shuffle: bool,
    /// Detector timestep (ms).
    pub timestep_ms: f64,
    /// Heartbeat period (ms).
    pub period_ms: f64,
    /// Heartbeat timeout (ms).
    pub timeout_ms: f64,
    /// One-way network latency (microseconds).
    pub latency_us: u64,
    /// When the failures happen (ms after start).
    pub kill_at_ms: f64,
    /// Seed for phases and random failures.
    pub seed: u64,
    /// Include per-survivor `notified_ms` maps in the report.
    pub full: bool,
    /// Number of ranks (not among the failures) frozen at the failure instant.
    pub stalls: usize,
    /// How long they stay frozen (ms); longer than the timeout provokes false positives.
    pub stall_ms: f64,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            ranks: 480,
            failures: 16,
            pattern: Pattern::Sequential,
            bcast: BcastAlgo::Chord,
            shuffle: true,
            timestep_ms: 10.0,
            period_ms: 100.0,
            timeout_ms: 1000.0,
            latency_us: 5,
            kill_at_ms: 1000.0,
            seed: 1,
            full: true,
            stalls: 0,
            stall_ms: 0.0,
        }
    }
}

/// Per-failure result.
#[derive(Debug, Clone, Serialize)]
pub struct FailureReport {
    /// The killed rank.
    pub rank: i32,
    /// Survivor -> ms from the kill to its FAILURE notice (present when `full`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notified_ms: Option<BTreeMap<String, f64>>,
    /// ms until the first survivor knew (detection).
    pub detected_ms: f64,
    /// ms until every survivor knew (largest `notified_ms`).
    pub consistent_ms: f64,
}

/// Result of a simulation, printed as JSON by `ompcluster-ftbench --simulate`.
#[derive(Debug, Clone, Serialize)]
pub struct SimReport {
    /// Number of ranks.
    pub ranks: usize,
    /// Always true.
    pub simulated: bool,
    /// Broadcast algorithm name.
    pub bcast: String,
    /// Ring shuffle.
    pub shuffle: bool,
    /// Failure pattern name.
    pub pattern: String,
    /// One entry per killed rank.
    pub failures: Vec<FailureReport>,
    /// Survivors declared dead (none expected in the simulator).
    pub false_positives: Vec<serde_json::Value>,
    /// Broadcast messages sent by all ranks (originated, forwarded, repaired).
    pub broadcast_messages: u64,
    /// Broadcast messages re-sent because a relay died.
    pub relay_repairs: u64,
    /// View-repair messages.
    pub view_messages: u64,
    /// Largest `consistent_ms` over all failures: all survivors know every failure.
    pub consistent_ms: f64,
    /// Whether every survivor learnt every failure before the simulation ended.
    pub all_consistent: bool,
    /// Wall-clock seconds the simulation took.
    pub wall_s: f64,
}

#[derive(PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Ev {
    Wake(u32),
    Deliver { to: u32, from: u32, msg_id: usize },
}

struct Collect<'a> {
    me: u32,
    now: Time,
    out: &'a mut Vec<(u32, u32, Msg)>,
    notices: &'a mut Vec<(u32, Time, Notice)>,
}

impl Net for Collect<'_> {
    fn send(&mut self, to: u32, msg: Msg) {
        self.out.push((self.me, to, msg));
    }
    fn notice(&mut self, notice: Notice) {
        self.notices.push((self.me, self.now, notice));
    }
}

fn lcg(state: &mut u64) -> u64 {
    *state = state
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *state >> 33
}

/// Run one simulation.
pub fn run(cfg: &SimConfig) -> SimReport {
    let wall = std::time::Instant::now();
    let n = cfg.ranks;
    let us = |ms: f64| (ms * 1000.0).round() as Time;
    let ts = us(cfg.timestep_ms).max(1);
    let core_cfg = CoreConfig::new(us(cfg.period_ms), us(cfg.timeout_ms), ts, cfg.bcast);
    let ring = Arc::new(Ring::new(n, cfg.shuffle));
    let mut rng = cfg.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    // each rank's timestep grid has its own phase, and each rank starts at a random time
    // within the first period, so beats are not aligned with the failures
    let phase: Vec<Time> = (0..n).map(|_| lcg(&mut rng) % ts).collect();
    let mut cores: Vec<Core> = (0..n)
        .map(|r| {
            let start = phase[r] + (lcg(&mut rng) % (core_cfg.period / ts).max(1)) * ts;
            Core::new(r as u32, ring.clone(), core_cfg.clone(), start)
        })
        .collect();

    // victims
    let f = cfg.failures.min(n.saturating_sub(1));
    let victims: Vec<u32> = match cfg.pattern {
        Pattern::Sequential => {
            let start = n / 3;
            (0..f).map(|i| ((start + i) % n) as u32).collect()
        }
        Pattern::Random => {
            let mut v: Vec<u32> = (0..n as u32).collect();
            for i in 0..f {
                let j = i + (lcg(&mut rng) as usize) % (n - i);
                v.swap(i, j);
            }
            v.truncate(f);
            v.sort_unstable();
            v
        }
    };
    let kill_at = us(cfg.kill_at_ms);
    let mut stalled: Vec<u32> = Vec::new();
    while stalled.len() < cfg.stalls.min(n - victims.len() - 1) {
        let r = (lcg(&mut rng) % n as u64) as u32;
        if !victims.contains(&r) && !stalled.contains(&r) {
            stalled.push(r);
        }
    }
    stalled.sort_unstable();
    let stall_end = kill_at + us(cfg.stall_ms);
    let mut is_stalled = vec![false; n];
    for &s in &stalled {
        is_stalled[s as usize] = true;
    }
    // per stalled rank: first FAILURE notice time, and how many ranks got FALSE_POSITIVE
    let mut fp_declared: BTreeMap<u32, Time> = BTreeMap::new();
    let mut fp_readmit: BTreeMap<u32, (usize, Time)> = BTreeMap::new();
    let mut dead = vec![false; n];
    let mut is_victim = vec![false; n];
    for &v in &victims {
        is_victim[v as usize] = true;
    }
    let survivors = n - victims.len();
    // first failure notice per (victim index, survivor)
    let victim_idx: BTreeMap<u32, usize> =
        victims.iter().enumerate().map(|(i, &v)| (v, i)).collect();
    let mut notified: Vec<Vec<Option<Time>>> =
        vec![vec![None; if cfg.full { n } else { 0 }]; victims.len()];
    let mut count_notified = vec![0usize; victims.len()];
    let mut first_notice: Vec<Option<Time>> = vec![None; victims.len()];
    let mut last_notice: Vec<Option<Time>> = vec![None; victims.len()];
    let mut fp_ranks: Vec<u32> = Vec::new();

    let grid = |r: usize, t: Time| -> Time {
        let p = phase[r];
        if t <= p {
            p
        } else {
            p + (t - p).div_ceil(ts) * ts
        }
    };
    let mut heap: BinaryHeap<Reverse<(Time, u64, Ev)>> = BinaryHeap::new();
    let mut evseq = 0u64;
    let mut wake_at: Vec<Time> = vec![Time::MAX; n];
    let mut msgs: Vec<Option<Msg>> = Vec::new();
    let mut free_ids: Vec<usize> = Vec::new();
    for r in 0..n {
        let w = grid(r, cores[r].next_wakeup());
        wake_at[r] = w;
        heap.push(Reverse((w, evseq, Ev::Wake(r as u32))));
        evseq += 1;
    }
    let mut killed = false;
    let mut consistent_at: Option<Time> = None;
    let horizon = kill_at + (victims.len() as Time + 3) * 2 * core_cfg.timeout + 20_000_000;
    let mut out: Vec<(u32, u32, Msg)> = Vec::new();
    let mut notices: Vec<(u32, Time, Notice)> = Vec::new();

    while let Some(Reverse((t, _, ev))) = heap.pop() {
        if !killed && t >= kill_at {
            killed = true;
            for &v in &victims {
                dead[v as usize] = true;
            }
            if victims.is_empty() {
                consistent_at = Some(kill_at);
            }
        }
        if t > horizon {
            break;
        }
        if let Some(c) = consistent_at {
            let quiet = if stalled.is_empty() {
                c
            } else {
                c.max(stall_end + 2 * core_cfg.timeout)
            };
            if t > quiet + 2 * core_cfg.period {
                break;
            }
        }
        // a frozen rank handles nothing until it is resumed: postpone its events
        let target = match &ev {
            Ev::Wake(r) => *r,
            Ev::Deliver { to, .. } => *to,
        };
        if is_stalled[target as usize] && t >= kill_at && t < stall_end {
            let at = grid(target as usize, stall_end);
            if let Ev::Wake(r) = ev {
                if wake_at[r as usize] != t {
                    continue;
                }
                wake_at[r as usize] = at;
            }
            heap.push(Reverse((at, evseq, ev)));
            evseq += 1;
            continue;
        }
        let r = match ev {
            Ev::Wake(r) => {
                if dead[r as usize] || wake_at[r as usize] != t {
                    continue;
                }
                wake_at[r as usize] = Time::MAX;
                let mut net = Collect {
                    me: r,
                    now: t,
                    out: &mut out,
                    notices: &mut notices,
                };
                cores[r as usize].on_tick(t, &mut net);
                r
            }
            Ev::Deliver { to, from, msg_id } => {
                let msg = msgs[msg_id].take().expect("message delivered twice");
                free_ids.push(msg_id);
                if dead[to as usize] {
                    continue;
                }
                let mut net = Collect {
                    me: to,
                    now: t,
                    out: &mut out,
                    notices: &mut notices,
                };
                cores[to as usize].on_message(t, from, msg, &mut net);
                to
            }
        };
        for (from, to, msg) in out.drain(..) {
            let id = match free_ids.pop() {
                Some(id) => {
                    msgs[id] = Some(msg);
                    id
                }
                None => {
                    msgs.push(Some(msg));
                    msgs.len() - 1
                }
            };
            let at = grid(to as usize, t + cfg.latency_us);
            heap.push(Reverse((
                at,
                evseq,
                Ev::Deliver {
                    to,
                    from,
                    msg_id: id,
                },
            )));
            evseq += 1;
        }
        for (who, when, notice) in notices.drain(..) {
            match notice {
                Notice::Failure(x) => {
                    if let Some(&i) = victim_idx.get(&(x as u32)) {
                        if cfg.full {
                            if notified[i][who as usize].is_none() {
                                notified[i][who as usize] = Some(when);
                                count_notified[i] += 1;
                            }
                        } else {
                            count_notified[i] += 1;
                        }
                        first_notice[i] = Some(first_notice[i].map_or(when, |f| f.min(when)));
                        last_notice[i] = Some(last_notice[i].map_or(when, |f| f.max(when)));
                    } else {
                        if !fp_ranks.contains(&(x as u32)) {
                            fp_ranks.push(x as u32);
                        }
                        fp_declared.entry(x as u32).or_insert(when);
                    }
                }
                Notice::FalsePositive(x) => {
                    let e = fp_readmit.entry(x as u32).or_insert((0, 0));
                    e.0 += 1;
                    e.1 = e.1.max(when);
                }
                Notice::Checkpoint | Notice::CheckpointDone => {}
            }
        }
        if killed && consistent_at.is_none() && count_notified.iter().all(|&c| c >= survivors) {
            consistent_at = Some(t);
        }
        let w = grid(r as usize, cores[r as usize].next_wakeup().max(t + 1));
        if w < wake_at[r as usize] {
            wake_at[r as usize] = w;
            heap.push(Reverse((w, evseq, Ev::Wake(r))));
            evseq += 1;
        }
    }

    let ms = |t: Time| (t.saturating_sub(kill_at)) as f64 / 1000.0;
    let failures: Vec<FailureReport> = victims
        .iter()
        .enumerate()
        .map(|(i, &v)| FailureReport {
            rank: v as i32,
            notified_ms: if cfg.full {
                Some(
                    (0..n)
                        .filter(|&s| !is_victim[s])
                        .filter_map(|s| notified[i][s].map(|t| (s.to_string(), ms(t))))
                        .collect(),
                )
            } else {
                None
            },
            detected_ms: first_notice[i].map_or(f64::NAN, ms),
            consistent_ms: last_notice[i].map_or(f64::NAN, ms),
        })
        .collect();
    let all_consistent = count_notified.iter().all(|&c| c >= survivors);
    let consistent_ms = failures.iter().map(|f| f.consistent_ms).fold(0.0, f64::max);
    let stats = cores.iter().fold((0, 0, 0), |a, c| {
        (
            a.0 + c.stats.bcast_msgs,
            a.1 + c.stats.relay_repairs,
            a.2 + c.stats.view_msgs,
        )
    });
    SimReport {
        ranks: n,
        simulated: true,
        bcast: cfg.bcast.name().to_string(),
        shuffle: cfg.shuffle,
        pattern: match cfg.pattern {
            Pattern::Sequential => "sequential".into(),
            Pattern::Random => "random".into(),
        },
        failures,
        false_positives: fp_ranks
            .iter()
            .map(|r| {
                let (count, last) = fp_readmit.get(r).copied().unwrap_or((0, 0));
                serde_json::json!({
                    "rank": r,
                    "stalled": is_stalled[*r as usize],
                    "readmitted": count >= survivors,
                    "declared_dead_ms": fp_declared.get(r).map(|&t| ms(t)),
                    "readmitted_ms": if count > 0 { Some(ms(last)) } else { None },
                })
            })
            .collect(),
        broadcast_messages: stats.0,
        relay_repairs: stats.1,
        view_messages: stats.2,
        consistent_ms,
        all_consistent,
        wall_s: wall.elapsed().as_secs_f64(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sim(n: usize, f: usize, pattern: Pattern, bcast: BcastAlgo, shuffle: bool) -> SimReport {
        run(&SimConfig {
            ranks: n,
            failures: f,
            pattern,
            bcast,
            shuffle,
            ..SimConfig::default()
        })
    }

    #[test]
    fn every_algorithm_reaches_consistency() {
        for algo in [BcastAlgo::Chord, BcastAlgo::Bmg, BcastAlgo::Hba] {
            for pattern in [Pattern::Sequential, Pattern::Random] {
                let r = sim(100, 5, pattern, algo, true);
                assert!(r.all_consistent, "{algo:?} {pattern:?}: {r:?}");
                assert!(r.false_positives.is_empty());
                assert_eq!(r.failures.len(), 5);
                for f in &r.failures {
                    assert_eq!(f.notified_ms.as_ref().unwrap().len(), 95);
                }
            }
        }
    }

    #[test]
    fn chord_is_cheapest_and_shuffle_helps_consecutive_failures() {
        let chord = sim(480, 16, Pattern::Random, BcastAlgo::Chord, true);
        let bmg = sim(480, 16, Pattern::Random, BcastAlgo::Bmg, true);
        let hba = sim(480, 16, Pattern::Random, BcastAlgo::Hba, true);
        assert!(chord.broadcast_messages < bmg.broadcast_messages);
        assert!(chord.broadcast_messages < hba.broadcast_messages);
        let on = sim(480, 16, Pattern::Sequential, BcastAlgo::Chord, true);
        let off = sim(480, 16, Pattern::Sequential, BcastAlgo::Chord, false);
        assert!(on.all_consistent && off.all_consistent);
        assert!(
            on.consistent_ms * 3.0 < off.consistent_ms,
            "on {} off {}",
            on.consistent_ms,
            off.consistent_ms
        );
    }

    #[test]
    fn stalled_ranks_are_readmitted_and_short_stalls_are_not_noticed() {
        let r = run(&SimConfig {
            ranks: 480,
            failures: 2,
            stalls: 3,
            stall_ms: 2500.0,
            ..SimConfig::default()
        });
        assert!(r.all_consistent);
        assert_eq!(r.false_positives.len(), 3, "{:?}", r.false_positives);
        for fp in &r.false_positives {
            assert_eq!(fp["stalled"], true);
            assert_eq!(fp["readmitted"], true, "{fp}");
            let d = fp["declared_dead_ms"].as_f64().unwrap();
            let a = fp["readmitted_ms"].as_f64().unwrap();
            assert!(d > 800.0 && d < 1300.0 && a > 2500.0 && a < 3000.0, "{fp}");
        }
        let r = run(&SimConfig {
            ranks: 480,
            failures: 0,
            stalls: 5,
            stall_ms: 400.0,
            ..SimConfig::default()
        });
        assert!(r.false_positives.is_empty(), "{:?}", r.false_positives);
    }

    #[test]
    fn no_failure_no_notice() {
        let r = sim(64, 0, Pattern::Random, BcastAlgo::Chord, true);
        assert!(r.failures.is_empty() && r.false_positives.is_empty());
        assert_eq!(r.broadcast_messages, 0);
    }
}
