//! Adaptive back-off for polling loops.
//!
//! Ranks poll MPI (progress only happens inside MPI calls), but four ranks share two cores on
//! the development machines, so a poller must not spin for long. A poller spins briefly (the
//! low-latency case: the answer is already on its way), then yields, then sleeps with a
//! doubling period capped at `max_sleep`.

use std::time::{Duration, Instant};

/// Back-off state of one polling loop. Create one per wait.
#[derive(Debug)]
pub struct Backoff {
    start: Instant,
    spin_for: Duration,
    sleep: Duration,
    max_sleep: Duration,
}

impl Backoff {
    /// A back-off that spins (with yields) for `spin_for`, then sleeps from 10 us up to `max_sleep`.
    pub fn new(spin_for: Duration, max_sleep: Duration) -> Self {
        Backoff { start: Instant::now(), spin_for, sleep: Duration::from_micros(10), max_sleep }
    }

    /// Back-off for waits on replies and data: short spin, sleeps capped at 1 ms.
    pub fn for_wait() -> Self {
        Self::new(Duration::from_micros(200), Duration::from_millis(1))
    }

    /// Wait a little before the next poll.
    pub fn snooze(&mut self) {
        if self.start.elapsed() < self.spin_for {
            std::thread::yield_now();
        } else {
            std::thread::sleep(self.sleep);
            self.sleep = (self.sleep * 2).min(self.max_sleep);
        }
    }

    /// Start again from the spinning phase (after activity).
    pub fn reset(&mut self) {
        self.start = Instant::now();
        self.sleep = Duration::from_micros(10);
    }
}
