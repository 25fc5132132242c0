//! Which regions get replicas under `OMPCLUSTER_FT_REPLICATE=auto`: [`Chooser`], pure (the
//! launch asks it once per region, `launch.rs`).
//!
//! A region's *loss cost* is the kernel time a failure of its worker would make the job run
//! again: its own run (its kernel's last run time) and the largest kernel time behind a
//! version it reads that no second copy saves yet (`Buffer::exposed_ns`). Its *weight* is
//! that cost times one plus its kernel's fan-out (regions that read a version one of the
//! kernel's runs made, per such run: how many regions a re-run would hold up). Replicas cost
//! their kernel's time again, k - 1 times.
//!
//! Every region with a known run time earns `budget` (`OMPCLUSTER_FT_REPLICA_BUDGET` / 100)
//! of that time as credit. A region is chosen when its weight is among the heaviest
//! `budget / (k - 1)` of the last [`WINDOW`] regions' weights and the credit pays for its
//! replicas; a chosen region that no second worker could take gets its credit back. So the
//! replicas' kernel time stays within the budget of the regions' own, and goes to the
//! heaviest regions of the recent past. A kernel's first run (its time unknown) is never
//! chosen.
//!
//! Design note (threads): one per cluster, behind a mutex taken under the `buffers` lock,
//! innermost (nothing else is locked while it is held).

use rustc_hash::FxHashMap as HashMap;
use std::collections::VecDeque;

/// How many recent regions' weights the choice compares with.
pub(super) const WINDOW: usize = 64;

/// The auto choice's state: credit, recent weights, kernels' fan-out.
#[derive(Debug)]
pub(crate) struct Chooser {
    /// Fraction of the regions' kernel time replicas may take.
    budget: f64,
    /// Runs besides the first per replicated region (k - 1).
    extra: f64,
    credit_ns: f64,
    /// The last regions' (weight, run time in ns).
    recent: VecDeque<(f64, f64)>,
    /// Per kernel entry: (runs that made a version, regions that read a version it made).
    fanout: HashMap<usize, (u64, u64)>,
}

/// The choice for one region: whether it gets replicas, and the credit that took.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Choice {
    pub(crate) chosen: bool,
    cost_ns: f64,
}

impl Chooser {
    /// For `budget_percent` of extra kernel time and `k` runs per replicated region.
    pub(crate) fn new(budget_percent: u32, k: u32) -> Self {
        Chooser {
            budget: f64::from(budget_percent) / 100.0,
            extra: f64::from(k.max(2) - 1),
            credit_ns: 0.0,
            recent: VecDeque::with_capacity(WINDOW + 1),
            fanout: HashMap::default(),
        }
    }

    /// Regions that read a version one run of `entry` made, per such run (0 before any).
    pub(crate) fn fanout(&self, entry: usize) -> f64 {
        match self.fanout.get(&entry) {
            Some(&(runs, readers)) if runs > 0 => readers as f64 / runs as f64,
            _ => 0.0,
        }
    }

    /// A run of `entry` made at least one version.
    pub(crate) fn made(&mut self, entry: usize) {
        self.fanout.entry(entry).or_default().0 += 1;
    }

    /// A region was placed that reads versions made by runs of `makers` (each counted once).
    pub(crate) fn read(&mut self, makers: impl IntoIterator<Item = usize>) {
        let mut seen: Vec<usize> = makers.into_iter().collect();
        seen.sort_unstable();
        seen.dedup();
        for e in seen {
            self.fanout.entry(e).or_default().1 += 1;
        }
    }

    /// Decides for one region of kernel `entry`: `run_ns` is the kernel's last run time
    /// (None before its first run), `behind_ns` the unsaved kernel time behind what it reads.
    pub(crate) fn choose(&mut self, entry: usize, run_ns: Option<u64>, behind_ns: u64) -> Choice {
        let Some(run) = run_ns.map(|n| n as f64) else { return Choice { chosen: false, cost_ns: 0.0 } };
        let weight = (run + behind_ns as f64) * (1.0 + self.fanout(entry));
        self.recent.push_back((weight, run));
        if self.recent.len() > WINDOW {
            self.recent.pop_front();
        }
        // Earned, at most what the window earned (or one region's replicas, if more): credit
        // unspent for long (no worker free for replicas) does not pay for a burst later.
        let earned: f64 = self.recent.iter().map(|(_, r)| r).sum::<f64>() * self.budget;
        let largest = self.recent.iter().map(|(_, r)| *r).fold(0.0, f64::max) * self.extra;
        self.credit_ns = (self.credit_ns + run * self.budget).min(earned.max(largest));
        // The heaviest `share` of the recent weights.
        let share = (self.budget / self.extra).min(1.0);
        let mut weights: Vec<f64> = self.recent.iter().map(|(w, _)| *w).collect();
        weights.sort_by(|a, b| b.total_cmp(a));
        let top = ((share * weights.len() as f64).ceil() as usize).clamp(1, weights.len());
        let cost_ns = run * self.extra;
        let chosen = weight >= weights[top - 1] && self.credit_ns >= cost_ns;
        if chosen {
            self.credit_ns -= cost_ns;
        }
        Choice { chosen, cost_ns: if chosen { cost_ns } else { 0.0 } }
    }

    /// A chosen region ran without replicas (no worker could take one): its credit back.
    pub(crate) fn refund(&mut self, c: Choice) {
        self.credit_ns += c.cost_ns;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regions alike: about the budget's share gets replicas, the replicas' time within it.
    #[test]
    fn alike_regions_share_the_budget() {
        for (budget, k, expect) in [(25, 2, 25), (50, 3, 25), (100, 2, 100), (10, 2, 10)] {
            let mut c = Chooser::new(budget, k);
            let chosen = (0..400).filter(|_| c.choose(1, Some(1_000_000), 0).chosen).count();
            assert!(chosen.abs_diff(expect * 4) <= 4, "budget {budget}% k={k}: {chosen} of 400 chosen, expected about {}", expect * 4);
        }
    }

    /// Heavier regions (longer unsaved lineage, more readers) are the ones chosen.
    #[test]
    fn the_heaviest_are_chosen() {
        let mut c = Chooser::new(25, 2);
        let (mut light, mut heavy) = (0, 0);
        for i in 0..400 {
            // One region in four carries 20 ms of unsaved work behind it.
            let behind = if i % 4 == 0 { 20_000_000 } else { 0 };
            if c.choose(1, Some(1_000_000), behind).chosen {
                if behind > 0 {
                    heavy += 1
                } else {
                    light += 1
                }
            }
        }
        assert!(heavy >= 90 && light <= 10, "heavy {heavy}, light {light}");
        // Fan-out: kernel 2's versions are read by 8 regions each, kernel 3's by none.
        let mut c = Chooser::new(25, 2);
        let (mut two, mut three) = (0, 0);
        for i in 0..400 {
            let e = if i % 2 == 0 { 2 } else { 3 };
            c.made(e);
            if e == 2 {
                for _ in 0..8 {
                    c.read([2, 2]);
                }
            }
            if c.choose(e, Some(1_000_000), 0).chosen {
                if e == 2 {
                    two += 1
                } else {
                    three += 1
                }
            }
        }
        assert_eq!(c.fanout(2), 8.0);
        assert!(two >= 90 && three == 0, "fan-out 8: {two}, fan-out 0: {three}");
    }

    /// No run time yet: not chosen, nothing earned; a refund pays for the next one.
    #[test]
    fn unknown_time_and_refunds() {
        let mut c = Chooser::new(100, 2);
        assert!(!c.choose(1, None, 5).chosen);
        let first = c.choose(1, Some(1000), 0);
        assert!(first.chosen);
        // Its replica found no worker: the credit comes back, so the budget is not lost.
        c.refund(first);
        assert!(c.choose(1, Some(1000), 0).chosen);
        // A region much longer than any before it: the credit (capped) cannot pay for it at 10%.
        let mut c = Chooser::new(10, 2);
        for _ in 0..10 {
            c.choose(1, Some(1000), 0);
        }
        assert!(!c.choose(1, Some(1_000_000), 0).chosen);
    }
}
