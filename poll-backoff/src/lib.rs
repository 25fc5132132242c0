//! Adaptive back-off for polling loops: the one back-off type of the workspace (event-system's
//! transport and worker loop, the failure detector's fault-aware waits, the head's background
//! work).
//!
//! Ranks poll MPI (progress only happens inside MPI calls), but four ranks share two cores on
//! the development machines, so a poller must not spin for long. A poller spins briefly (the
//! low-latency case: the answer is already on its way; the first 30 us without any system
//! call), then yields, then sleeps with a doubling period capped at `max_sleep`. Each sleep is
//! also capped at a share of the time waited so far, so that a wait ends soon after what it
//! waits for: 1/256 for a bulk transfer, 1/16 for a reply (a kernel's answer). Without that
//! cap a reply wait's doubling naps noticed a 1.5 ms answer up to 1 ms late. Synchronous
//! regions on a 16 MiB resident buffer: 2.87 ms each before, 2.35 ms with the cap and the
//! worker's naps while a kernel runs (worker/README.md), 0.81 in 5 alternating pairs; the
//! naps alone gave 0.94.

use std::time::{Duration, Instant};

/// How long a wait polls without any system call before it starts yielding.
const PURE_SPIN: Duration = Duration::from_micros(30);

/// Back-off state of one polling loop. Create one per wait.
#[derive(Debug)]
pub struct Backoff {
    /// When the wait began: read at its first snooze, not at creation, since most waits for
    /// a short request end at their first poll (a clock read costs as much as a poll here).
    start: Option<Instant>,
    spin_for: Duration,
    sleep: Duration,
    max_sleep: Duration,
    /// Cap each sleep at 1/this of the time waited, so that the wait ends at most that share
    /// late ([`TIGHT_DIVISOR`] for transfers, [`REPLY_DIVISOR`] for replies; 0: no cap).
    divisor: u32,
    /// Still in the first, pure-spin phase.
    spinning: bool,
    /// Polls so far in that phase (the clock is read every `CLOCK_EVERY` of them).
    spins: u32,
}

/// A bulk-transfer wait sleeps at most 1/this of the time waited so far, so it notices the
/// end at most 0.4% late. Both ends of a transfer wait like this, and a worker notices the next
/// event only once its own wait has ended. With 1/32, 16 and 64 MiB submits alternating with
/// retrieves reached 0.92-0.94 x raw MPI; with 1/256, 1.02-1.06 (medians of 8 alternating
/// rounds). The kernel's timer slack (50 us) bounds how short the naps get.
const TIGHT_DIVISOR: u32 = 256;

/// A wait for a reply sleeps at most 1/this of the time waited so far: past its first
/// millisecond it ends at most about 6% late (before that, the kernel's 50 us timer slack
/// dominates), at the cost of about 11 more wake-ups per doubling of its length, up to
/// `max_sleep`.
const REPLY_DIVISOR: u32 = 16;

/// In the pure-spin phase the clock is read once every this many polls: a read costs about
/// as much as a probe on this VM, and the phase's length need not be exact.
const CLOCK_EVERY: u32 = 16;

impl Backoff {
    /// A back-off that spins (with yields) for `spin_for`, then sleeps from 10 us up to `max_sleep`.
    pub fn new(spin_for: Duration, max_sleep: Duration) -> Self {
        Backoff {
            start: None,
            spin_for,
            sleep: Duration::from_micros(10),
            max_sleep,
            divisor: 0,
            spinning: true,
            spins: 0,
        }
    }

    /// Back-off for waiting on a bulk transfer: spins (with yields) for 2 ms, then sleeps at
    /// most 1/`TIGHT_DIVISOR` of the time waited (a 5 ms transfer is not stretched by a 1 ms
    /// nap: that cost 16 MiB submits 20-40% of their bandwidth).
    pub fn for_transfer() -> Self {
        Backoff { divisor: TIGHT_DIVISOR, ..Self::new(Duration::from_millis(2), Duration::from_millis(1)) }
    }

    /// Back-off for waits on replies and data: short spin, sleeps capped at 1 ms and at 1/16 of
    /// the time waited.
    pub fn for_wait() -> Self {
        Backoff { divisor: REPLY_DIVISOR, ..Self::new(Duration::from_micros(200), Duration::from_millis(1)) }
    }

    /// A back-off that never spins: sleeps `first`, doubling up to `max`. For waits on peers
    /// that may share the cores (the failure detector's fault-aware waits: four ranks may
    /// run on two cores).
    pub fn sleeping(first: Duration, max: Duration) -> Self {
        let first = first.max(Duration::from_micros(1));
        Backoff { spinning: false, sleep: first, ..Self::new(Duration::ZERO, max.max(first)) }
    }

    /// Back-off for waits nobody is held up by (background work: the head's buddy copies):
    /// no spin, sleeps from 10 us doubling up to 2 ms, so that the wait leaves the cores to
    /// the program.
    pub fn patient() -> Self {
        Self::new(Duration::ZERO, Duration::from_millis(2))
    }

    /// Wait a little before the next poll.
    pub fn snooze(&mut self) {
        let start = *self.start.get_or_insert_with(Instant::now);
        if self.spinning {
            self.spins += 1;
            if self.spins % CLOCK_EVERY != 0 || start.elapsed() < PURE_SPIN.min(self.spin_for) {
                // The answer to a short request is usually microseconds away: poll again
                // without a system call (a yield costs more than the probe itself). A few
                // PAUSEs only: one costs up to ~140 cycles on recent Xeons, and 64 of them
                // added microseconds to every empty target region (measured: 6.6-8.2 us with
                // 64, 5.2-7.0 us with 4).
                for _ in 0..4 {
                    std::hint::spin_loop();
                }
                return;
            }
            self.spinning = false;
        }
        let waited = start.elapsed();
        if waited < self.spin_for {
            std::thread::yield_now();
        } else {
            std::thread::sleep(if self.divisor > 0 { self.sleep.min(waited / self.divisor) } else { self.sleep });
            self.sleep = (self.sleep * 2).min(self.max_sleep);
        }
    }

    /// Whether this wait is still in its first microseconds of pure spinning. Waits check a
    /// peer's liveness only after that phase: the check takes a lock, and a death is noticed
    /// by the detector seconds later anyway.
    pub fn spinning(&self) -> bool {
        self.spinning
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sleeping back-off never polls without sleeping, and its naps double up to the cap.
    #[test]
    fn sleeping_naps_double_from_the_first_to_the_cap() {
        let mut b = Backoff::sleeping(Duration::from_micros(100), Duration::from_micros(400));
        assert!(!b.spinning());
        let naps: Vec<Duration> = (0..4)
            .map(|_| {
                let t = Instant::now();
                b.snooze();
                t.elapsed()
            })
            .collect();
        for (nap, least) in naps.iter().zip([100, 200, 400, 400]) {
            assert!(*nap >= Duration::from_micros(least), "{naps:?}");
        }
    }

    /// A reply wait spins first: its first polls return at once.
    #[test]
    fn a_reply_wait_spins_first() {
        let mut b = Backoff::for_wait();
        let t = Instant::now();
        for _ in 0..8 {
            b.snooze();
        }
        assert!(b.spinning() && t.elapsed() < Duration::from_millis(20));
    }
}
