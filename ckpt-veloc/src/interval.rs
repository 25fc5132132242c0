//! When to checkpoint: Young's interval and Daly's refinement.
//!
//! The cost of one checkpoint, `C` seconds, is estimated from the bytes to
//! save and the write speed: `C = bytes / (wspeed * 10^6)` (MB = 10^6 bytes).
//! With `M` the mean time between failures in seconds:
//!
//! * Young (1974): `sqrt(2 C M)`;
//! * Daly (2006), higher order: `sqrt(2 C M) * (1 + sqrt(C / (2M)) / 3 + C / (18 M)) - C`
//!   when `C < 2M`, and `M` otherwise.

use std::time::Duration;

/// Bytes in one MB for `OMPCLUSTER_CP_WSPEED` (decimal megabytes).
pub const BYTES_PER_MB: f64 = 1_000_000.0;

/// Smallest interval [`IntervalPolicy::interval`] returns, so that a tiny
/// state does not make the runtime checkpoint continuously.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// Estimated time to write `bytes` at `wspeed_mb_s` MB/s, in seconds.
pub fn checkpoint_cost_seconds(bytes: u64, wspeed_mb_s: f64) -> f64 {
    bytes as f64 / (wspeed_mb_s * BYTES_PER_MB)
}

/// Young's optimal checkpoint interval `sqrt(2 C M)`, in seconds.
pub fn young_seconds(cost_s: f64, mtbf_s: f64) -> f64 {
    (2.0 * cost_s * mtbf_s).sqrt()
}

/// Daly's higher-order estimate, in seconds: for `C < 2M`,
/// `sqrt(2CM) (1 + sqrt(C/(2M))/3 + C/(18M)) - C`, else `M`.
pub fn daly_seconds(cost_s: f64, mtbf_s: f64) -> f64 {
    if cost_s < 2.0 * mtbf_s {
        let c = cost_s;
        let m = mtbf_s;
        (2.0 * c * m).sqrt() * (1.0 + (c / (2.0 * m)).sqrt() / 3.0 + c / (18.0 * m)) - c
    } else {
        mtbf_s
    }
}

/// How the checkpoint interval is chosen.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum IntervalPolicy {
    /// `OMPCLUSTER_CP_INTERVAL`: a fixed interval.
    Fixed(Duration),
    /// Young's formula from the bytes to save (the default).
    Young {
        /// Write speed, MB/s.
        wspeed_mb_s: f64,
        /// Mean time between failures, s.
        mtbf_s: f64,
    },
    /// Daly's refinement (`OMPCLUSTER_CP_DALY=1`).
    Daly {
        /// Write speed, MB/s.
        wspeed_mb_s: f64,
        /// Mean time between failures, s.
        mtbf_s: f64,
    },
}

impl IntervalPolicy {
    /// Interval before the next checkpoint, given the bytes it would save;
    /// never below [`MIN_INTERVAL`] for the computed policies.
    pub fn interval(&self, bytes: u64) -> Duration {
        let secs = match *self {
            IntervalPolicy::Fixed(d) => return d,
            IntervalPolicy::Young {
                wspeed_mb_s,
                mtbf_s,
            } => young_seconds(checkpoint_cost_seconds(bytes, wspeed_mb_s), mtbf_s),
            IntervalPolicy::Daly {
                wspeed_mb_s,
                mtbf_s,
            } => daly_seconds(checkpoint_cost_seconds(bytes, wspeed_mb_s), mtbf_s),
        };
        if secs.is_finite() {
            Duration::from_secs_f64(secs.max(0.0)).max(MIN_INTERVAL)
        } else {
            MIN_INTERVAL
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    #[test]
    fn young_matches_hand_computation() {
        // 1 GB at 10 MB/s = 100 s; MTBF one day: sqrt(2*100*86400) = 4156.92...
        let c = checkpoint_cost_seconds(1_000_000_000, 10.0);
        assert!(close(c, 100.0));
        assert!(close(young_seconds(c, 86_400.0), 4156.921938165305));
    }

    #[test]
    fn daly_matches_hand_computation() {
        let (c, m) = (100.0_f64, 86_400.0_f64);
        let expect =
            (2.0 * c * m).sqrt() * (1.0 + (c / (2.0 * m)).sqrt() / 3.0 + c / (18.0 * m)) - c;
        assert!(close(daly_seconds(c, m), expect));
        // Numerically: 4156.92 * (1 + 0.0080187 + 0.0000643) - 100 = 4090.5...
        assert!(
            (daly_seconds(c, m) - 4090.5).abs() < 0.5,
            "{}",
            daly_seconds(c, m)
        );
        // C >= 2M: the interval is M.
        assert_eq!(daly_seconds(200.0, 100.0), 100.0);
        assert_eq!(daly_seconds(500.0, 100.0), 100.0);
        // Daly is below Young for small C (the -C term dominates the correction).
        assert!(daly_seconds(c, m) < young_seconds(c, m));
    }

    #[test]
    fn policy_interval() {
        let y = IntervalPolicy::Young {
            wspeed_mb_s: 10.0,
            mtbf_s: 86_400.0,
        };
        let d = y.interval(1_000_000_000);
        assert!((d.as_secs_f64() - 4156.921938165305).abs() < 1e-6);
        assert_eq!(y.interval(0), MIN_INTERVAL);
        let f = IntervalPolicy::Fixed(Duration::from_secs(7));
        assert_eq!(f.interval(123), Duration::from_secs(7));
        let dl = IntervalPolicy::Daly {
            wspeed_mb_s: 10.0,
            mtbf_s: 86_400.0,
        };
        assert!(dl.interval(1_000_000_000) < d);
    }
}
