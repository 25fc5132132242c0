//! Which iterations of a loop a thread (or a team) runs under a static schedule, as the OpenMP
//! specification (5.2, 11.5.3 and 11.6) defines it, on the normalized iteration space
//! `0..n` that the compilers hand the runtime:
//!
//! * no chunk size (`schedule(static)`, `dist_schedule(static)`): the iterations are divided
//!   into chunks of about equal size, at most one per thread, in thread order. As libomp's
//!   default static schedule (`kmp_sch_static_balanced`) does it, the first `n % p` threads
//!   get `n / p + 1` iterations and the others `n / p`, so a loop splits the same way on a
//!   worker as in one process on the host.
//! * chunk size `c > 0` (`schedule(static, c)`): chunks of `c` iterations (the last one
//!   shorter) assigned round-robin in thread order: thread `t` runs chunks `t`, `t + p`,
//!   `t + 2p`, ...
//!
//! Pure arithmetic, no threads: [`crate`] applies it with libomp's thread numbers.

use std::ops::Range;

/// The iterations of `0..n` that member `me` of `count` members runs with chunk size
/// `chunk` (0: none given), as ranges in increasing order. Empty if `me >= count` or
/// `count == 0`.
pub fn share(n: u64, count: u64, me: u64, chunk: u64) -> Share {
    if count == 0 || me >= count || n == 0 {
        return Share { n: 0, chunk: 1, stride: 1, next: 0 };
    }
    if chunk == 0 {
        let (small, extras) = (n / count, n % count);
        let start = me * small + me.min(extras);
        let len = small + u64::from(me < extras);
        // One chunk of `len` from `start`: a stride past `n` ends it after the first.
        return Share { n: start + len, chunk: len.max(1), stride: u64::MAX, next: if len == 0 { start + len } else { start } };
    }
    // First chunk at me * chunk (may be past n: then nothing).
    let next = me.saturating_mul(chunk);
    Share { n, chunk, stride: count.saturating_mul(chunk), next }
}

/// The ranges of one member's share (see [`share`]).
#[derive(Debug, Clone)]
pub struct Share {
    n: u64,
    chunk: u64,
    stride: u64,
    next: u64,
}

impl Iterator for Share {
    type Item = Range<u64>;

    fn next(&mut self) -> Option<Range<u64>> {
        if self.next >= self.n {
            return None;
        }
        let start = self.next;
        let end = start.saturating_add(self.chunk).min(self.n);
        self.next = start.saturating_add(self.stride);
        Some(start..end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(n: u64, count: u64, chunk: u64) -> Vec<Vec<Range<u64>>> {
        (0..count).map(|me| share(n, count, me, chunk).collect()).collect()
    }

    /// Every iteration exactly once, whatever the shape.
    fn covers_once(n: u64, count: u64, chunk: u64) {
        let mut seen = vec![0u8; n as usize];
        for r in all(n, count, chunk).into_iter().flatten() {
            for i in r {
                seen[i as usize] += 1;
            }
        }
        assert!(seen.iter().all(|&s| s == 1), "n={n} count={count} chunk={chunk}");
    }

    #[test]
    fn unchunked_is_one_contiguous_block_each_balanced_like_libomp() {
        // 10 over 4: 3 3 2 2, in thread order.
        assert_eq!(all(10, 4, 0), vec![vec![0..3], vec![3..6], vec![6..8], vec![8..10]]);
        // Fewer iterations than threads: one each, the rest nothing.
        assert_eq!(all(2, 4, 0), vec![vec![0..1], vec![1..2], vec![], vec![]]);
        assert_eq!(all(12, 3, 0), vec![vec![0..4], vec![4..8], vec![8..12]]);
        assert_eq!(all(7, 1, 0), vec![vec![0..7]]);
    }

    #[test]
    fn chunked_is_round_robin_in_thread_order() {
        // 10 in chunks of 3 over 2 threads: t0 gets 0..3, 6..9; t1 gets 3..6, 9..10.
        assert_eq!(all(10, 2, 3), vec![vec![0..3, 6..9], vec![3..6, 9..10]]);
        assert_eq!(all(5, 4, 2), vec![vec![0..2], vec![2..4], vec![4..5], vec![]]);
    }

    #[test]
    fn every_shape_covers_every_iteration_once() {
        for n in [0, 1, 2, 7, 64, 1000, 1001] {
            for count in 1..=9 {
                for chunk in [0, 1, 2, 3, 7, 100, 5000] {
                    covers_once(n, count, chunk);
                }
            }
        }
    }

    #[test]
    fn outsiders_and_extremes_do_not_overflow() {
        assert_eq!(share(10, 4, 4, 0).count(), 0);
        assert_eq!(share(10, 0, 0, 0).count(), 0);
        let big: Vec<_> = share(u64::MAX, 2, 1, u64::MAX / 2 + 7).collect();
        assert_eq!(big, vec![(u64::MAX / 2 + 7)..u64::MAX]);
        let last: Vec<_> = share(u64::MAX, 3, 2, 0).collect();
        assert_eq!(last.last().unwrap().end, u64::MAX);
    }
}
