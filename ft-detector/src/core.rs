//! The detector's algorithms as a pure state machine: heartbeat ring (observer/emitter),
//! fault-tolerant broadcast (chord, BMG, HBA), ring shuffle, false positives, view repair.
//!
//! Nothing here knows about MPI, threads or wall clocks. A driver feeds the machine with
//! [`Core::on_message`] and [`Core::on_tick`] and carries out what it asks through [`Net`].
//! Two drivers exist: `mpi_driver` (real processes) and `sim` (discrete-event simulator),
//! so the simulator runs exactly this code.
//!
//! # State of a rank
//! Every rank keeps a *version* per rank (sparse: absent means 0). Odd versions mean DEAD,
//! even versions ALIVE. A failure declaration moves a rank from an even version `v` to `v+1`,
//! a re-admission (false positive) from odd `v` to `v+1`. Updates are applied only if they
//! carry a higher version, so status updates commute: the order in which broadcasts or view
//! repairs arrive does not matter, two observers declaring the same failure produce the same
//! update, and every rank sees the same sequence of notices per subject rank (a jump of two
//! versions delivers both intermediate notices). This is what makes "every live rank
//! receives every notice exactly once" and "all live ranks agree on the dead set" hold.

use std::collections::HashMap;
use std::sync::Arc;

use crate::{BcastAlgo, Notice};

/// Time in microseconds since an arbitrary origin (the driver's clock).
pub(crate) type Time = u64;

/// Parameters of the state machine (all times in microseconds).
#[derive(Clone, Debug)]
pub(crate) struct CoreConfig {
    pub(crate) period: Time,
    pub(crate) timeout: Time,
    /// A gap between two ticks longer than this means this process itself was stalled.
    pub(crate) stall_guard: Time,
    /// Timeout for an emitter adopted because the previous one died, until its first beat:
    /// it was told (NewObserver) or learnt by broadcast to beat to us at once, so waiting a
    /// full timeout for each of several dead ranks in a row (the thesis's limit) is not needed.
    pub(crate) adopt_timeout: Time,
    pub(crate) bcast: BcastAlgo,
}

impl CoreConfig {
    /// Derived parameters from the user's period, timeout and timestep (microseconds).
    pub(crate) fn new(period: Time, timeout: Time, timestep: Time, bcast: BcastAlgo) -> CoreConfig {
        CoreConfig {
            period,
            timeout,
            stall_guard: (timeout / 2).max(period + 2 * timestep),
            adopt_timeout: (timeout / 3).max(3 * period + 2 * timestep).min(timeout),
            bcast,
        }
    }
}

/// What a broadcast carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Payload {
    /// Status update of `subject` to `version` (odd = dead, even = alive).
    Status { subject: u32, version: u32 },
    /// A checkpoint begins.
    Checkpoint,
    /// A checkpoint is complete.
    CheckpointDone,
}

/// A broadcast message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Bcast {
    pub(crate) origin: u32,
    pub(crate) seq: u32,
    /// Algorithm-specific routing word (chord: exclusive limit offset; HBA: arrival dimension).
    pub(crate) route: u32,
    pub(crate) payload: Payload,
}

/// Messages exchanged by detectors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Msg {
    /// Heartbeat from an emitter to its observer, with a digest of the sender's view and
    /// the status updates it learnt recently (gossip along the ring: a broadcast that lost
    /// a relay still reaches everyone within a few periods).
    Beat {
        digest: u64,
        recent: Vec<(u32, u32)>,
    },
    /// "I am your new observer": sent by an observer to its new emitter after a failure,
    /// with the versions of the ranks between them (the dead ones), so the emitter agrees
    /// at once on who its observer is.
    NewObserver { between: Vec<(u32, u32)> },
    /// View repair: the sender's non-zero versions. `reply` asks the receiver to answer
    /// with its own view if it knew something the sender did not.
    View {
        versions: Vec<(u32, u32)>,
        reply: bool,
    },
    /// A broadcast.
    Bcast(Bcast),
}

/// What the state machine asks its driver to do.
pub(crate) trait Net {
    /// Send `msg` to `to` (best effort; the message may be lost if `to` is dead).
    fn send(&mut self, to: u32, msg: Msg);
    /// Deliver a notice to the local user, in order.
    fn notice(&mut self, notice: Notice);
}

/// Counters kept by the state machine.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Stats {
    /// Broadcast messages sent (originated, forwarded and relay repairs).
    pub(crate) bcast_msgs: u64,
    /// Broadcast messages re-sent because a relay died.
    pub(crate) relay_repairs: u64,
    /// View-repair messages sent.
    pub(crate) view_msgs: u64,
    /// Heartbeats sent.
    pub(crate) beats: u64,
}

/// Ring placement: a permutation of ranks agreed by everyone (it depends on `n` only).
#[derive(Debug)]
pub(crate) struct Ring {
    rank_at: Vec<u32>,
    pos_of: Vec<u32>,
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl Ring {
    /// Identity ring (shuffle off) or golden-ratio stride ring (shuffle on; for n <= 4 no
    /// ring without consecutive neighbours exists and the identity is used).
    ///
    /// With stride `s` coprime with `n`, position `p` holds rank `p*s mod n`, so ring
    /// neighbours differ by `s` or `n-s` in rank number. Choosing `s` close to `n/phi`
    /// makes both large: a block of fewer than about `0.38 n` consecutive ranks (one node,
    /// a rack) contains no two ring neighbours, so their failures are detected in parallel.
    pub(crate) fn new(n: usize, shuffle: bool) -> Ring {
        let n64 = n as u64;
        let stride = if shuffle && n >= 4 {
            let target = (n as f64 / 1.618_033_988_75).round() as i64;
            let mut best = 1u64;
            for d in 0..n as i64 {
                let mut found = false;
                for c in [target - d, target + d] {
                    if c > 1 && (c as u64) < n64 - 1 && gcd(c as u64, n64) == 1 {
                        best = c as u64;
                        found = true;
                        break;
                    }
                }
                if found {
                    break;
                }
            }
            best
        } else {
            1
        };
        let rank_at: Vec<u32> = if shuffle && n == 6 {
            // the only size above 4 with no suitable stride (5 = -1 mod 6)
            vec![0, 2, 4, 1, 5, 3]
        } else {
            (0..n64).map(|p| ((p * stride) % n64) as u32).collect()
        };
        let mut pos_of = vec![0u32; n];
        for (p, &r) in rank_at.iter().enumerate() {
            pos_of[r as usize] = p as u32;
        }
        Ring { rank_at, pos_of }
    }

    pub(crate) fn len(&self) -> usize {
        self.rank_at.len()
    }
    pub(crate) fn rank_at(&self, pos: usize) -> u32 {
        self.rank_at[pos % self.rank_at.len()]
    }
    pub(crate) fn pos_of(&self, rank: u32) -> usize {
        self.pos_of[rank as usize] as usize
    }
}

fn mix(x: u64) -> u64 {
    // splitmix64 finaliser
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn entry_hash(rank: u32, ver: u32) -> u64 {
    mix(((rank as u64) << 32) | ver as u64)
}

/// A chord broadcast this rank sent to a relay, kept to repair the relay's range if it dies.
#[derive(Debug, Clone)]
struct RelayEntry {
    child: u32,
    msg: Bcast,
    sent_at: Time,
}

/// The per-rank state machine.
#[derive(Debug)]
pub(crate) struct Core {
    me: u32,
    cfg: CoreConfig,
    ring: Arc<Ring>,
    /// Sparse versions (absent = 0 = alive, never declared).
    ver: HashMap<u32, u32>,
    digest: u64,
    emitter: Option<u32>,
    /// The emitter was adopted after a failure and has not beaten yet.
    emitter_fresh: bool,
    observer: Option<u32>,
    last_heard: Time,
    next_beat: Time,
    last_tick: Option<Time>,
    mismatch_since: Option<Time>,
    /// Broadcasts already delivered: key -> when first seen (pruned after `memory()`).
    seen: HashMap<u64, Time>,
    last_prune: Time,
    seq: u32,
    relay_log: Vec<RelayEntry>,
    /// Status updates applied recently: (when, subject, version), newest last.
    recent: std::collections::VecDeque<(Time, u32, u32)>,
    pub(crate) stats: Stats,
}

/// How many recent updates a beat carries at most.
const RECENT_MAX: usize = 16;

impl Core {
    /// A fresh state machine for rank `me` at time `now`.
    pub(crate) fn new(me: u32, ring: Arc<Ring>, cfg: CoreConfig, now: Time) -> Core {
        let mut c = Core {
            me,
            cfg,
            ring,
            ver: HashMap::new(),
            digest: 0,
            emitter: None,
            emitter_fresh: false,
            observer: None,
            last_heard: now,
            next_beat: now,
            last_tick: None,
            mismatch_since: None,
            seen: HashMap::new(),
            last_prune: now,
            seq: 0,
            relay_log: Vec::new(),
            recent: std::collections::VecDeque::new(),
            stats: Stats::default(),
        };
        c.recompute_neighbours(now);
        c
    }

    /// Number of ranks.
    pub(crate) fn n(&self) -> usize {
        self.ring.len()
    }

    /// Version of `rank` in this rank's view.
    pub(crate) fn version(&self, rank: u32) -> u32 {
        self.ver.get(&rank).copied().unwrap_or(0)
    }

    /// Whether `rank` is dead in this rank's view.
    pub(crate) fn is_dead(&self, rank: u32) -> bool {
        self.version(rank) % 2 == 1
    }

    /// Current emitter (the rank this one watches).
    pub(crate) fn emitter(&self) -> Option<u32> {
        self.emitter
    }

    /// Current observer (the rank this one beats to).
    pub(crate) fn observer(&self) -> Option<u32> {
        self.observer
    }

    /// The latest time at which the driver must call [`Core::on_tick`].
    pub(crate) fn next_wakeup(&self) -> Time {
        match self.emitter {
            Some(_) => self
                .next_beat
                .min(self.last_heard + self.current_timeout() + 1),
            None => self.next_beat,
        }
    }

    fn current_timeout(&self) -> Time {
        if self.emitter_fresh {
            self.cfg.adopt_timeout
        } else {
            self.cfg.timeout
        }
    }

    fn alive_for_ring(&self, rank: u32) -> bool {
        rank == self.me || !self.is_dead(rank)
    }

    /// First rank alive in my view at ring offset >= `from` (relative to `base_pos`),
    /// strictly before offset `to`. Returns (offset, rank).
    fn first_live(&self, base_pos: usize, from: usize, to: usize) -> Option<(usize, u32)> {
        (from..to)
            .map(|o| (o, self.ring.rank_at(base_pos + o)))
            .find(|&(_, r)| self.alive_for_ring(r))
    }

    fn recompute_neighbours(&mut self, now: Time) {
        let n = self.n();
        let my_pos = self.ring.pos_of(self.me);
        // observer: next live position after me; emitter: previous live position.
        let obs = self.first_live(my_pos, 1, n).map(|(_, r)| r);
        let em = (1..n)
            .map(|o| self.ring.rank_at(my_pos + n - o))
            .find(|&r| self.alive_for_ring(r));
        if em != self.emitter {
            self.emitter_fresh = self.emitter.is_some_and(|old| self.is_dead(old));
            self.emitter = em;
            self.last_heard = now;
        }
        if obs != self.observer {
            self.observer = obs;
            // a new observer should hear from us at once
            self.next_beat = now;
        }
    }

    /// Apply a status update; deliver notices for every version step. Returns whether the
    /// view changed.
    fn apply_status(&mut self, subject: u32, version: u32, now: Time, net: &mut dyn Net) -> bool {
        if subject as usize >= self.n() {
            return false;
        }
        let old = self.version(subject);
        if version <= old {
            return false;
        }
        for v in old + 1..=version {
            net.notice(if v % 2 == 1 {
                Notice::Failure(subject as i32)
            } else {
                Notice::FalsePositive(subject as i32)
            });
        }
        if old > 0 {
            self.digest = self.digest.wrapping_sub(entry_hash(subject, old));
        }
        self.digest = self.digest.wrapping_add(entry_hash(subject, version));
        self.ver.insert(subject, version);
        self.recent.push_back((now, subject, version));
        if self.recent.len() > RECENT_MAX {
            self.recent.pop_front();
        }
        if version % 2 == 1 {
            if subject == self.me {
                // I was declared dead but I am running: announce my re-admission.
                let v = version + 1;
                self.apply_status(self.me, v, now, net);
                self.originate(
                    Payload::Status {
                        subject: self.me,
                        version: v,
                    },
                    now,
                    net,
                );
            } else {
                self.repair_relays(subject, now, net);
            }
        }
        self.recompute_neighbours(now);
        true
    }

    /// Start a broadcast of `payload` from this rank. Status payloads must already be
    /// applied locally; other notices are delivered locally here.
    pub(crate) fn originate(&mut self, payload: Payload, now: Time, net: &mut dyn Net) {
        self.seq = self.seq.wrapping_add(1);
        let b = Bcast {
            origin: self.me,
            seq: self.seq,
            route: 0,
            payload,
        };
        self.seen.insert(Self::bcast_key(&b), now);
        match payload {
            Payload::Checkpoint => net.notice(Notice::Checkpoint),
            Payload::CheckpointDone => net.notice(Notice::CheckpointDone),
            Payload::Status { .. } => {}
        }
        self.forward(b, None, now, net);
    }

    /// Broadcast a user notice (Checkpoint, CheckpointDone, or Failure(rank) to declare a
    /// rank dead). Returns false for notices a user may not originate.
    pub(crate) fn user_broadcast(&mut self, notice: Notice, now: Time, net: &mut dyn Net) -> bool {
        match notice {
            Notice::Checkpoint => self.originate(Payload::Checkpoint, now, net),
            Notice::CheckpointDone => self.originate(Payload::CheckpointDone, now, net),
            Notice::Failure(r) => {
                if r < 0 || r as usize >= self.n() || r as u32 == self.me {
                    return false;
                }
                let r = r as u32;
                if !self.is_dead(r) {
                    self.declare_dead(r, now, net);
                }
            }
            Notice::FalsePositive(_) => return false,
        }
        true
    }

    fn bcast_key(b: &Bcast) -> u64 {
        ((b.origin as u64) << 32) | b.seq as u64
    }

    fn send_bcast(&mut self, to: u32, b: Bcast, now: Time, net: &mut dyn Net, log: bool) {
        self.stats.bcast_msgs += 1;
        if log {
            self.relay_log.push(RelayEntry {
                child: to,
                msg: b,
                sent_at: now,
            });
        }
        net.send(to, Msg::Bcast(b));
    }

    /// Forward broadcast `b` (already delivered here) according to the algorithm.
    fn forward(&mut self, b: Bcast, from: Option<u32>, now: Time, net: &mut dyn Net) {
        let n = self.n();
        let my_pos = self.ring.pos_of(self.me);
        match self.cfg.bcast {
            BcastAlgo::Chord => {
                let origin_pos = self.ring.pos_of(b.origin);
                let k = (my_pos + n - origin_pos) % n;
                let limit = if b.origin == self.me {
                    n
                } else {
                    b.route as usize
                };
                // fingers k+2^i, each covering [k+2^i, min(limit, k+2^(i+1))); biggest first
                let mut fingers = Vec::new();
                let mut step = 1usize;
                while k + step < limit {
                    let end = limit.min(k + 2 * step);
                    fingers.push((k + step, end));
                    step *= 2;
                }
                for &(start, end) in fingers.iter().rev() {
                    if let Some((_, r)) = self.first_live(origin_pos, start, end) {
                        let m = Bcast {
                            route: end as u32,
                            ..b
                        };
                        self.send_bcast(r, m, now, net, true);
                    }
                }
            }
            BcastAlgo::Bmg => {
                // flood over the binomial graph: live ranks at +-2^i ring positions
                let mut targets: Vec<u32> = Vec::new();
                let mut step = 1usize;
                while step < n {
                    if let Some((_, r)) = self.first_live(my_pos, step, n) {
                        targets.push(r);
                    }
                    if let Some(r) = (step..n)
                        .map(|o| self.ring.rank_at(my_pos + n - o))
                        .find(|&r| self.alive_for_ring(r))
                    {
                        targets.push(r);
                    }
                    step *= 2;
                }
                targets.sort_unstable();
                targets.dedup();
                for r in targets {
                    if r != self.me && Some(r) != from && r != b.origin {
                        self.send_bcast(r, b, now, net, false);
                    }
                }
            }
            BcastAlgo::Hba => {
                // flood over the hypercube of origin-relative offsets: on first receipt send
                // along every dimension except the arrival one; a dead or missing corner is
                // replaced by the next live offset after it.
                let origin_pos = self.ring.pos_of(b.origin);
                let k = (my_pos + n - origin_pos) % n;
                let dims = usize::BITS - (n - 1).max(1).leading_zeros();
                let arrival = if b.origin == self.me {
                    u32::MAX
                } else {
                    b.route
                };
                for d in 0..dims {
                    if d == arrival {
                        continue;
                    }
                    let t = k ^ (1usize << d);
                    if t >= n {
                        continue;
                    }
                    if let Some((_, r)) = self.first_live(origin_pos, t, n) {
                        if r != self.me && Some(r) != from {
                            self.send_bcast(r, Bcast { route: d, ..b }, now, net, false);
                        }
                    }
                }
            }
        }
    }

    /// A relay died: re-send what we sent it to the next live rank of its range (chord).
    /// How long a relay entry is kept: a relay that dies later than this after receiving a
    /// broadcast has forwarded it long before.
    fn relay_keep(&self) -> Time {
        2 * self.cfg.timeout + 10 * self.cfg.period
    }

    /// Drop old relay entries and old broadcast keys (a duplicate can only come from a
    /// relay repair, within `relay_keep` of the original; keys are kept twice as long).
    fn prune(&mut self, now: Time) {
        let keep = self.relay_keep();
        if now.saturating_sub(self.last_prune) < keep {
            return;
        }
        self.last_prune = now;
        self.relay_log
            .retain(|e| now.saturating_sub(e.sent_at) <= keep);
        self.seen.retain(|_, t| now.saturating_sub(*t) <= 2 * keep);
    }

    fn repair_relays(&mut self, dead: u32, now: Time, net: &mut dyn Net) {
        let keep = self.relay_keep();
        self.relay_log
            .retain(|e| now.saturating_sub(e.sent_at) <= keep);
        let entries: Vec<RelayEntry> = self
            .relay_log
            .iter()
            .filter(|e| e.child == dead)
            .cloned()
            .collect();
        let n = self.n();
        for e in entries {
            let origin_pos = self.ring.pos_of(e.msg.origin);
            let start = (self.ring.pos_of(dead) + n - origin_pos) % n;
            if let Some((_, r)) = self.first_live(origin_pos, start + 1, e.msg.route as usize) {
                if r != self.me {
                    self.stats.relay_repairs += 1;
                    self.send_bcast(r, e.msg, now, net, true);
                }
            }
        }
    }

    fn declare_dead(&mut self, r: u32, now: Time, net: &mut dyn Net) {
        let v = self.version(r);
        let v = if v % 2 == 0 { v + 1 } else { return };
        self.apply_status(r, v, now, net);
        self.originate(
            Payload::Status {
                subject: r,
                version: v,
            },
            now,
            net,
        );
    }

    /// Periodic step: send a beat if due, check the emitter's timeout.
    pub(crate) fn on_tick(&mut self, now: Time, net: &mut dyn Net) {
        if let Some(last) = self.last_tick {
            if now.saturating_sub(last) > self.cfg.stall_guard {
                // This process itself was stalled (SIGSTOP, swapped out): do not blame the
                // emitter for the silence we caused. Give it a fresh timeout.
                self.last_heard = now;
            }
        }
        self.last_tick = Some(now);
        self.prune(now);
        if now >= self.next_beat {
            if let Some(o) = self.observer {
                self.stats.beats += 1;
                let keep = self.cfg.timeout;
                while self
                    .recent
                    .front()
                    .is_some_and(|e| now.saturating_sub(e.0) > keep)
                {
                    self.recent.pop_front();
                }
                let recent = self.recent.iter().map(|&(_, r, v)| (r, v)).collect();
                net.send(
                    o,
                    Msg::Beat {
                        digest: self.digest,
                        recent,
                    },
                );
            }
            self.next_beat = now + self.cfg.period;
        }
        // Detect; several emitters may be dead in a row, but each needs its own timeout
        // since a new emitter gets a fresh one.
        if let Some(e) = self.emitter {
            if now.saturating_sub(self.last_heard) > self.current_timeout() {
                self.declare_dead(e, now, net);
                if let Some(new_em) = self.emitter {
                    if new_em != self.me {
                        let n = self.n();
                        let em_pos = self.ring.pos_of(new_em);
                        let my_pos = self.ring.pos_of(self.me);
                        let gap = (my_pos + n - em_pos) % n;
                        let between: Vec<(u32, u32)> = (1..gap)
                            .map(|o| self.ring.rank_at(em_pos + o))
                            .map(|r| (r, self.version(r)))
                            .collect();
                        net.send(new_em, Msg::NewObserver { between });
                    }
                }
            }
        }
    }

    /// Handle one incoming message.
    pub(crate) fn on_message(&mut self, now: Time, from: u32, msg: Msg, net: &mut dyn Net) {
        if from as usize >= self.n() {
            return;
        }
        match msg {
            Msg::Beat { digest, recent } => {
                for (r, v) in recent {
                    self.apply_status(r, v, now, net);
                }
                if self.is_dead(from) {
                    // A rank we consider dead is beating: it was only stalled. Re-admit it.
                    let v = self.version(from) + 1;
                    self.apply_status(from, v, now, net);
                    self.originate(
                        Payload::Status {
                            subject: from,
                            version: v,
                        },
                        now,
                        net,
                    );
                }
                if Some(from) == self.emitter {
                    self.last_heard = now;
                    self.emitter_fresh = false;
                }
                if digest == self.digest {
                    self.mismatch_since = None;
                } else {
                    let grace = (2 * self.cfg.period).max(self.cfg.timeout / 4);
                    match self.mismatch_since {
                        None => self.mismatch_since = Some(now),
                        Some(t) if now.saturating_sub(t) >= grace => {
                            self.mismatch_since = Some(now);
                            self.send_view(from, true, net);
                        }
                        Some(_) => {}
                    }
                }
            }
            Msg::NewObserver { between } => {
                for (r, v) in between {
                    self.apply_status(r, v, now, net);
                }
                if self.is_dead(from) {
                    let v = self.version(from) + 1;
                    self.apply_status(from, v, now, net);
                    self.originate(
                        Payload::Status {
                            subject: from,
                            version: v,
                        },
                        now,
                        net,
                    );
                }
                if self.observer != Some(from) {
                    self.observer = Some(from);
                    self.next_beat = now;
                }
            }
            Msg::View { versions, reply } => {
                let mut i_know_more = false;
                let theirs: HashMap<u32, u32> = versions.iter().copied().collect();
                for (&r, &v) in self.ver.iter() {
                    if theirs.get(&r).copied().unwrap_or(0) < v {
                        i_know_more = true;
                    }
                }
                for (r, v) in versions {
                    self.apply_status(r, v, now, net);
                }
                if reply && i_know_more {
                    self.send_view(from, false, net);
                }
            }
            Msg::Bcast(b) => {
                if self.seen.insert(Self::bcast_key(&b), now).is_some() {
                    return;
                }
                match b.payload {
                    Payload::Status { subject, version } => {
                        self.apply_status(subject, version, now, net);
                    }
                    Payload::Checkpoint => net.notice(Notice::Checkpoint),
                    Payload::CheckpointDone => net.notice(Notice::CheckpointDone),
                }
                self.forward(b, Some(from), now, net);
            }
        }
    }

    fn send_view(&mut self, to: u32, reply: bool, net: &mut dyn Net) {
        self.stats.view_msgs += 1;
        let mut versions: Vec<(u32, u32)> = self.ver.iter().map(|(&r, &v)| (r, v)).collect();
        versions.sort_unstable();
        net.send(to, Msg::View { versions, reply });
    }
}

/// Binary encoding of messages for the MPI transport (little endian).
pub(crate) mod wire {
    use super::{Bcast, Msg, Payload};

    fn put32(b: &mut Vec<u8>, x: u32) {
        b.extend_from_slice(&x.to_le_bytes());
    }
    fn get32(b: &[u8], at: &mut usize) -> Option<u32> {
        let s = b.get(*at..*at + 4)?;
        *at += 4;
        Some(u32::from_le_bytes(s.try_into().ok()?))
    }

    /// Encode a message.
    pub(crate) fn encode(m: &Msg) -> Vec<u8> {
        let mut b = Vec::with_capacity(24);
        match m {
            Msg::Beat { digest, recent } => {
                b.push(1);
                b.extend_from_slice(&digest.to_le_bytes());
                put32(&mut b, recent.len() as u32);
                for &(r, v) in recent {
                    put32(&mut b, r);
                    put32(&mut b, v);
                }
            }
            Msg::NewObserver { between } => {
                b.push(2);
                put32(&mut b, between.len() as u32);
                for &(r, v) in between {
                    put32(&mut b, r);
                    put32(&mut b, v);
                }
            }
            Msg::View { versions, reply } => {
                b.push(3);
                b.push(*reply as u8);
                put32(&mut b, versions.len() as u32);
                for &(r, v) in versions {
                    put32(&mut b, r);
                    put32(&mut b, v);
                }
            }
            Msg::Bcast(x) => {
                b.push(4);
                put32(&mut b, x.origin);
                put32(&mut b, x.seq);
                put32(&mut b, x.route);
                match x.payload {
                    Payload::Status { subject, version } => {
                        b.push(1);
                        put32(&mut b, subject);
                        put32(&mut b, version);
                    }
                    Payload::Checkpoint => b.push(2),
                    Payload::CheckpointDone => b.push(3),
                }
            }
        }
        b
    }

    /// Decode a message; `None` if malformed.
    pub(crate) fn decode(b: &[u8]) -> Option<Msg> {
        let mut at = 1;
        match *b.first()? {
            1 => {
                let digest = u64::from_le_bytes(b.get(1..9)?.try_into().ok()?);
                at = 9;
                let len = get32(b, &mut at)? as usize;
                let mut recent = Vec::with_capacity(len.min(1 << 20));
                for _ in 0..len {
                    recent.push((get32(b, &mut at)?, get32(b, &mut at)?));
                }
                Some(Msg::Beat { digest, recent })
            }
            2 => {
                let len = get32(b, &mut at)? as usize;
                let mut between = Vec::with_capacity(len.min(1 << 20));
                for _ in 0..len {
                    between.push((get32(b, &mut at)?, get32(b, &mut at)?));
                }
                Some(Msg::NewObserver { between })
            }
            3 => {
                let reply = *b.get(1)? != 0;
                at = 2;
                let len = get32(b, &mut at)? as usize;
                let mut versions = Vec::with_capacity(len.min(1 << 20));
                for _ in 0..len {
                    versions.push((get32(b, &mut at)?, get32(b, &mut at)?));
                }
                Some(Msg::View { versions, reply })
            }
            4 => {
                let origin = get32(b, &mut at)?;
                let seq = get32(b, &mut at)?;
                let route = get32(b, &mut at)?;
                let kind = *b.get(at)?;
                at += 1;
                let payload = match kind {
                    1 => Payload::Status {
                        subject: get32(b, &mut at)?,
                        version: get32(b, &mut at)?,
                    },
                    2 => Payload::Checkpoint,
                    3 => Payload::CheckpointDone,
                    _ => return None,
                };
                Some(Msg::Bcast(Bcast {
                    origin,
                    seq,
                    route,
                    payload,
                }))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shuffle_separates_consecutive_ranks() {
        for n in [5usize, 6, 7, 8, 9, 16, 480, 1000] {
            let ring = Ring::new(n, true);
            let mut seen = vec![false; n];
            for p in 0..n {
                seen[ring.rank_at(p) as usize] = true;
                let a = ring.rank_at(p) as i64;
                let b = ring.rank_at(p + 1) as i64;
                let d = (a - b)
                    .rem_euclid(n as i64)
                    .min((b - a).rem_euclid(n as i64));
                assert!(d >= 2, "n={n}: ranks {a},{b} adjacent in ring");
            }
            assert!(seen.iter().all(|&s| s), "not a permutation");
        }
        let id = Ring::new(8, false);
        assert_eq!(
            (0..8).map(|p| id.rank_at(p)).collect::<Vec<_>>(),
            (0..8).collect::<Vec<u32>>()
        );
    }

    struct Rec(Vec<(u32, Msg)>, Vec<Notice>);
    impl Net for Rec {
        fn send(&mut self, to: u32, msg: Msg) {
            self.0.push((to, msg));
        }
        fn notice(&mut self, n: Notice) {
            self.1.push(n);
        }
    }

    fn core(me: u32, n: usize) -> Core {
        let cfg = CoreConfig::new(100_000, 1_000_000, 10_000, BcastAlgo::Chord);
        Core::new(me, Arc::new(Ring::new(n, false)), cfg, 0)
    }

    fn status(origin: u32, seq: u32, subject: u32, version: u32) -> Msg {
        Msg::Bcast(Bcast {
            origin,
            seq,
            route: 8,
            payload: Payload::Status { subject, version },
        })
    }

    #[test]
    fn notices_once_and_in_order_whatever_the_arrival_order() {
        let mut c = core(0, 8);
        let mut net = Rec(vec![], vec![]);
        // the re-admission overtakes the failure declaration
        c.on_message(10, 5, status(5, 2, 3, 2), &mut net);
        c.on_message(11, 6, status(6, 1, 3, 1), &mut net);
        c.on_message(12, 6, status(6, 1, 3, 1), &mut net); // duplicate
        c.on_message(13, 7, status(7, 4, 3, 1), &mut net); // same declaration by another rank
        assert_eq!(net.1, vec![Notice::Failure(3), Notice::FalsePositive(3)]);
        assert!(!c.is_dead(3));
    }

    #[test]
    fn observer_declares_emitter_dead_and_notifies_the_next_one() {
        // identity ring of 4: rank 2 watches rank 1
        let mut c = core(2, 4);
        let mut net = Rec(vec![], vec![]);
        assert_eq!(c.emitter(), Some(1));
        assert_eq!(c.observer(), Some(3));
        c.on_message(
            50_000,
            1,
            Msg::Beat {
                digest: 0,
                recent: vec![],
            },
            &mut net,
        );
        c.on_tick(900_000, &mut net);
        assert!(net.1.is_empty(), "declared too early");
        c.on_tick(1_060_000, &mut net);
        assert_eq!(net.1, vec![Notice::Failure(1)]);
        assert_eq!(c.emitter(), Some(0));
        assert!(net.0.iter().any(|(to, m)| *to == 0
            && matches!(m, Msg::NewObserver { between } if between == &vec![(1, 1)])));
        // the failure is broadcast to every other live rank (chord from position 2)
        let mut told: Vec<u32> = net
            .0
            .iter()
            .filter(|(_, m)| matches!(m, Msg::Bcast(_)))
            .map(|(to, _)| *to)
            .collect();
        told.sort();
        assert_eq!(told, vec![0, 3]);
        // the dead rank beats again: false positive, re-admitted and broadcast
        net.0.clear();
        c.on_message(
            1_100_000,
            1,
            Msg::Beat {
                digest: 0,
                recent: vec![],
            },
            &mut net,
        );
        assert_eq!(net.1, vec![Notice::Failure(1), Notice::FalsePositive(1)]);
        assert_eq!(c.emitter(), Some(1));
        assert!(net.0.iter().any(|(_, m)| matches!(m, Msg::Bcast(b) if b.payload == Payload::Status { subject: 1, version: 2 })));
    }

    #[test]
    fn chord_reaches_everyone_once_without_failures() {
        for n in [2usize, 3, 8, 13, 64] {
            let ring = Arc::new(Ring::new(n, true));
            let cfg = CoreConfig::new(100_000, 1_000_000, 10_000, BcastAlgo::Chord);
            let mut cores: Vec<Core> = (0..n as u32)
                .map(|r| Core::new(r, ring.clone(), cfg.clone(), 0))
                .collect();
            let mut net = Rec(vec![], vec![]);
            cores[1 % n].originate(Payload::Checkpoint, 0, &mut net);
            let mut got = vec![0usize; n];
            got[1 % n] = 1;
            let mut msgs = 0;
            while let Some((to, m)) = net.0.pop() {
                msgs += 1;
                let mut sub = Rec(vec![], vec![]);
                cores[to as usize].on_message(1, 0, m, &mut sub);
                got[to as usize] += sub.1.len();
                net.0.extend(sub.0);
            }
            assert!(got.iter().all(|&g| g == 1), "n={n}: {got:?}");
            assert_eq!(msgs, n - 1, "n={n}");
        }
    }

    #[test]
    fn memory_stays_bounded_with_many_broadcasts() {
        let mut c = core(0, 8);
        let mut net = Rec(vec![], vec![]);
        let mut t = 0;
        for i in 0..10_000u32 {
            t += 50_000;
            c.originate(Payload::Checkpoint, t, &mut net);
            c.on_message(
                t,
                3,
                Msg::Bcast(Bcast {
                    origin: 3,
                    seq: i + 1,
                    route: 8,
                    payload: Payload::CheckpointDone,
                }),
                &mut net,
            );
            c.on_tick(t, &mut net);
            net.0.clear();
        }
        // keep = 2 s + 1 s = 3 s of relay entries (60 broadcasts x 3 children) and 6 s of keys
        assert!(
            c.relay_log.len() <= 2 * 60 * 3 + 3,
            "relay log {}",
            c.relay_log.len()
        );
        assert!(c.seen.len() <= 2 * 2 * 120 + 2, "seen {}", c.seen.len());
        // (no beats arrive in this test, so the emitters are declared dead too)
        let ckpt = net
            .1
            .iter()
            .filter(|n| matches!(n, Notice::Checkpoint | Notice::CheckpointDone))
            .count();
        assert_eq!(ckpt, 20_000);
    }

    #[test]
    fn wire_roundtrip() {
        let msgs = vec![
            Msg::Beat {
                digest: 0xdead_beef_1234,
                recent: vec![(4, 1)],
            },
            Msg::NewObserver {
                between: vec![(1, 1)],
            },
            Msg::View {
                versions: vec![(3, 1), (7, 2)],
                reply: true,
            },
            Msg::Bcast(Bcast {
                origin: 5,
                seq: 9,
                route: 3,
                payload: Payload::Status {
                    subject: 2,
                    version: 1,
                },
            }),
            Msg::Bcast(Bcast {
                origin: 5,
                seq: 10,
                route: 0,
                payload: Payload::CheckpointDone,
            }),
        ];
        for m in msgs {
            assert_eq!(wire::decode(&wire::encode(&m)), Some(m));
        }
        assert_eq!(wire::decode(&[9]), None);
        assert_eq!(wire::decode(&[4, 1]), None);
    }
}
