//! The buddy schedule: which versions the head copies to itself, in what order, how many at
//! a time, and how long it waits between copies (the policy; the plugin's buddy thread does
//! the copies, `libomptarget-plugin/src/cluster/buddy.rs`).
//!
//! Versions are immutable, so a copy of version v taken at any time is as good as the
//! worker's for lineage; the head is every worker's buddy. The schedule copies the versions
//! furthest ahead of the head's copy first (they bound what a failure would re-run), in
//! batches of at most [`BuddyPolicy::batch`] versions and [`BuddyPolicy::batch_bytes`] bytes
//! (one round trip each), waits so that copying takes at most `share_percent` of the time,
//! and backs the head's pages for a buffer it has no copy of only within `memory` bytes.
//!
//! Concurrency: none here; the buddy thread owns its schedule.

use std::time::Duration;

/// A version the head could copy: the buffer (`key`: where the device finds it, `id`: its
/// identity) and how many versions the head's copy is behind (the current version, if the
/// head has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// Where the device finds the buffer (its address).
    pub key: u64,
    /// The buffer's identity.
    pub id: u64,
    /// Versions the head's copy is behind.
    pub lag: u64,
}

/// The settings of buddy copies (`OMPCLUSTER_FT_BUDDY_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BuddyPolicy {
    /// How long the buddy thread waits between passes (zero: buddy copies off).
    pub interval: Duration,
    /// Most share of its time spent copying, in percent (1..=100).
    pub share_percent: u64,
    /// Most bytes of buffers the head backs with pages (a copy of a buffer it has no pages
    /// for is skipped beyond this).
    pub memory: u64,
    /// Most versions one batch copies.
    pub batch: usize,
    /// A batch takes no more versions once it has this many bytes.
    pub batch_bytes: u64,
}

impl BuddyPolicy {
    /// The settings with the default batch sizes (64 versions, 16 MiB).
    pub fn new(interval: Duration, share_percent: u64, memory: u64) -> Self {
        BuddyPolicy { interval, share_percent: share_percent.clamp(1, 100), memory, batch: 64, batch_bytes: 16 << 20 }
    }

    /// Are buddy copies on?
    pub fn enabled(&self) -> bool {
        !self.interval.is_zero()
    }

    /// Put `candidates` in the order to copy them: furthest behind first (then by buffer,
    /// for a stable order).
    pub fn order(&self, candidates: &mut [Candidate]) {
        candidates.sort_by_key(|c| (std::cmp::Reverse(c.lag), c.id));
    }

    /// How long to wait after a batch that took `took`, so that copying takes at most
    /// `share_percent` of the time.
    pub fn pause_after(&self, took: Duration) -> Duration {
        let share = self.share_percent as f64;
        took.mul_f64((100.0 - share) / share)
    }

    /// May the head back `span` more bytes for a copy, when it backs `backed` bytes already?
    pub fn admits(&self, backed: u64, span: u64) -> bool {
        backed.saturating_add(span) <= self.memory
    }

    /// Is a batch of `count` versions and `bytes` bytes full?
    pub fn batch_full(&self, count: usize, bytes: u64) -> bool {
        count >= self.batch || bytes >= self.batch_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_copies_the_longest_chains_first_within_its_share_and_budget() {
        let p = BuddyPolicy::new(Duration::from_millis(100), 10, 1 << 20);
        assert!(p.enabled() && !BuddyPolicy::new(Duration::ZERO, 10, 0).enabled());
        let c = |id, lag| Candidate { key: id * 0x1000, id, lag };
        let mut v = vec![c(1, 3), c(2, 900), c(3, 3), c(4, 40)];
        p.order(&mut v);
        assert_eq!(v.iter().map(|c| c.id).collect::<Vec<_>>(), vec![2, 4, 1, 3]);
        // 10%: a batch of 2 ms is followed by 18 ms of rest; 100%: no rest.
        assert_eq!(p.pause_after(Duration::from_millis(2)), Duration::from_millis(18));
        assert_eq!(BuddyPolicy::new(Duration::from_millis(1), 100, 0).pause_after(Duration::from_millis(5)), Duration::ZERO);
        // A share out of range is taken as its nearest bound.
        assert_eq!(BuddyPolicy::new(Duration::from_millis(1), 0, 0).share_percent, 1);
        assert!(p.admits(0, 1 << 20) && !p.admits(1, 1 << 20) && !p.admits(u64::MAX, 1));
        assert!(!p.batch_full(63, 100) && p.batch_full(64, 100) && p.batch_full(1, 16 << 20));
    }
}
