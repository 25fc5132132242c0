//! Fault injection for tests and benchmarks: `OMPCLUSTER_FT_INJECT`.
//!
//! Grammar: one or more faults separated by `;`, each `ACTION:rank=R:TRIGGER` with
//! * `ACTION`: `kill` (the rank gets SIGKILL) or `stop` (SIGSTOP: frozen, never resumed);
//! * `R`: a worker rank (1..N-1);
//! * `TRIGGER`: `after_tasks=N` (once the head has seen N target regions complete),
//!   `after_ms=N` (N ms after start-up), `during=checkpoint` (in the pause of the next
//!   checkpoint), `during=recovery` (while the next recovery that does not involve R runs),
//!   `during=restore` (as workers next read versions from a checkpoint: recovery, or a
//!   resumed job's first need of them), `during=exit` (as the job ends: once R has answered
//!   the head's EXIT) or `during=move` (as R is next asked to send its copy of a buffer to a
//!   worker whose copy holds an older version: that copy, received aside, must keep it).
//!
//! Example: `kill:rank=2:after_tasks=40;stop:rank=3:after_ms=1500`. The head sends the
//! victim an INJECT event and the victim raises the signal on itself; the head notes when, so
//! the report can give each injected failure's detection latency.
//!
//! Test only: `panic:during=recovery` (no `rank=`, no other trigger) injects a bug, not a
//! failure: the head's recovery handler panics when its next recovery starts (once), so that
//! tests can check that a panic of ours ends the job with a message rather than hanging it
//! (`Injector::panic_due_in_recovery`). It makes sense together with a fault that causes a
//! recovery, e.g. `kill:rank=2:after_tasks=20;panic:during=recovery`.
//!
//! Test only: `slow:moves=MS` injects no failure but bad luck: the head waits MS ms between
//! choosing the source of a copy from one worker to another and asking the source to send it
//! (`Injector::move_delay`), as a preempted thread would. It widens the moment in which a
//! kernel placed on the source can change the copy before it is sent (see
//! `Buffers::move_done`).
//!
//! Test only: `other_build:rank=R` makes worker R claim another build of the runtime in the
//! job's first exchange (`same_build.rs`): the job must stop at start-up, naming both builds.
//!
//! Test only: `park:thread=NAME:after_ms=N` (the head) or `park:rank=R:thread=NAME:after_ms=N`
//! parks a long-lived thread of ours N ms after start-up, at its next round, as a thread stuck
//! on a lock would be: the watchdog (`OMPCLUSTER_WATCHDOG`, the `watchdog` crate) must end the
//! rank with a message naming it. NAME is one of [`PARKABLE`]. Each rank acts on its own
//! (`Injector::parks_of`); nothing is sent.
//!
//! Test only: `flip:rank=R:TRIGGER` (TRIGGER `after_tasks=N` or `after_ms=N`) injects silent
//! data corruption, not a failure: the next target region run on worker R once the trigger is
//! met gets one bit of what it wrote flipped as its kernel returns, as a faulty core would
//! (`Event::Execute::flip`: bit 4 + R mod 4 of the byte the worker's `flipped_at` names, so
//! that flips on two ranks never write the same bytes). Only replicas with voting
//! (`OMPCLUSTER_FT_VOTE=1`, `cluster/replicas.rs`) can notice it.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// What happens to the victim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// SIGKILL.
    Kill,
    /// SIGSTOP.
    Stop,
    /// Test only: the head's recovery handler panics (`panic:during=recovery`; the fault's
    /// rank is 0, the head). Never sent to a rank: [`Injector::due`] leaves it out.
    Panic,
    /// Test only: every copy between workers waits this many ms before it starts
    /// (`slow:moves=MS`; rank 0, trigger [`Trigger::EveryMove`]). Never sent to a rank.
    SlowMoves(u64),
    /// Test only: the rank claims another build at start-up (`other_build:rank=R`; trigger
    /// [`Trigger::AtStart`]). Never sent to a rank.
    OtherBuild,
    /// Test only: the rank parks its thread of this name (one of [`PARKABLE`]; trigger
    /// [`Trigger::AfterMs`]). Never sent: each rank acts on its own.
    Park(&'static str),
    /// Test only: one bit of what the next region run on the rank writes is flipped
    /// (`Injector::flip_due`, asked as each EXECUTE is sent). No signal.
    Flip,
}

/// The threads `park:` can name: those that hold a watchdog beat.
pub const PARKABLE: [&str; 8] = ["ft-heartbeat", "ompc-region", "ompc-ft-buddy", "ompc-ft-prober", "ompc-ft-handler", "ompc-ft-replicas", "ompc-worker-poll", "ompc-ckpt-store"];

impl Action {
    /// The signal (0, no signal, for [`Action::Panic`], which is no signal to a rank).
    pub fn signal(self) -> i32 {
        match self {
            Action::Kill => libc::SIGKILL,
            Action::Stop => libc::SIGSTOP,
            Action::Panic | Action::SlowMoves(_) | Action::OtherBuild | Action::Park(_) | Action::Flip => 0,
        }
    }
}

/// When it happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// After this many completed target regions.
    AfterTasks(u64),
    /// This many ms after start-up.
    AfterMs(u64),
    /// In the pause of the next checkpoint.
    DuringCheckpoint,
    /// While the next recovery (of other ranks) runs.
    DuringRecovery,
    /// As workers next read versions from a checkpoint (`Event::Restore`).
    DuringRestore,
    /// As the job ends: the victim raises the signal once it has answered the head's EXIT
    /// (nothing waits for it any more; only the launcher can end it).
    DuringExit,
    /// As this rank (the victim) is next asked to send its copy of a buffer to a worker whose
    /// copy holds an older version (received aside: `Movement::copy_between`, `staged`).
    DuringMove(i32),
    /// Every copy between workers (for [`Action::SlowMoves`] only).
    EveryMove,
    /// The job's first exchange (for [`Action::OtherBuild`] only).
    AtStart,
}

/// One fault.
#[derive(Debug)]
pub struct Fault {
    /// What.
    pub action: Action,
    /// Whom.
    pub rank: i32,
    /// When.
    pub trigger: Trigger,
    fired: AtomicBool,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let a = match self.action {
            Action::Kill => "kill",
            Action::Stop => "stop",
            Action::Flip => "flip",
            Action::Panic => return write!(f, "{PANIC_DURING_RECOVERY}"),
            Action::SlowMoves(ms) => return write!(f, "slow:moves={ms}"),
            Action::OtherBuild => return write!(f, "other_build:rank={}", self.rank),
            Action::Park(name) => {
                let Trigger::AfterMs(ms) = self.trigger else { unreachable!("park is parsed with after_ms only") };
                return write!(f, "park:rank={}:thread={name}:after_ms={ms}", self.rank);
            }
        };
        let t = match self.trigger {
            Trigger::AfterTasks(n) => format!("after_tasks={n}"),
            Trigger::AfterMs(n) => format!("after_ms={n}"),
            Trigger::DuringCheckpoint => "during=checkpoint".into(),
            Trigger::DuringRecovery => "during=recovery".into(),
            Trigger::DuringRestore => "during=restore".into(),
            Trigger::DuringExit => "during=exit".into(),
            Trigger::DuringMove(_) => "during=move".into(),
            Trigger::EveryMove => "moves".into(),
            Trigger::AtStart => "at_start".into(),
        };
        write!(f, "{a}:rank={}:{t}", self.rank)
    }
}

/// The test-only fault that makes the recovery handler panic.
const PANIC_DURING_RECOVERY: &str = "panic:during=recovery";

/// Parse the value of `OMPCLUSTER_FT_INJECT`. `ranks`, if known, is the job's size: ranks
/// must then be workers of it.
pub fn parse(spec: &str, ranks: Option<i32>) -> Result<Vec<Fault>, String> {
    let mut out = Vec::new();
    for item in spec.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        let parts: Vec<&str> = item.split(':').map(str::trim).collect();
        if parts[0] == "panic" {
            if parts[1..] != ["during=recovery"] {
                return Err(format!(
                    "{item:?}: the panic action takes no rank and only one trigger: {PANIC_DURING_RECOVERY:?} (test only: the recovery handler panics when its next recovery starts)"
                ));
            }
            out.push(Fault { action: Action::Panic, rank: 0, trigger: Trigger::DuringRecovery, fired: AtomicBool::new(false) });
            continue;
        }
        if parts[0] == "slow" {
            let ms = match parts[1..] {
                [moves] => moves.strip_prefix("moves=").and_then(|n| n.parse::<u64>().ok()).filter(|&n| n <= 10_000),
                _ => None,
            };
            let Some(ms) = ms else {
                return Err(format!("{item:?}: expected slow:moves=MS with MS from 0 to 10000 (test only: copies between workers wait MS ms before they start)"));
            };
            out.push(Fault { action: Action::SlowMoves(ms), rank: 0, trigger: Trigger::EveryMove, fired: AtomicBool::new(false) });
            continue;
        }
        if parts[0] == "other_build" {
            let rank = match parts[1..] {
                [r] => r.strip_prefix("rank=").and_then(|r| r.parse::<i32>().ok()).filter(|&r| r >= 1 && ranks.is_none_or(|n| r < n)),
                _ => None,
            };
            let Some(rank) = rank else {
                return Err(format!("{item:?}: expected other_build:rank=R with R a worker rank (test only: rank R claims another build of the runtime at start-up)"));
            };
            out.push(Fault { action: Action::OtherBuild, rank, trigger: Trigger::AtStart, fired: AtomicBool::new(false) });
            continue;
        }
        if parts[0] == "park" {
            let (rank, thread, after) = match parts[1..] {
                [thread, after] => (Some("rank=0"), thread, after),
                [rank, thread, after] => (Some(rank), thread, after),
                _ => (None, "", ""),
            };
            let rank = rank.and_then(|r| r.strip_prefix("rank=")).and_then(|r| r.parse::<i32>().ok()).filter(|&r| r >= 0 && ranks.is_none_or(|n| r < n));
            let thread = thread.strip_prefix("thread=").and_then(|t| PARKABLE.iter().copied().find(|&p| p == t));
            let ms = after.strip_prefix("after_ms=").and_then(|n| n.parse::<u64>().ok());
            let (Some(rank), Some(thread), Some(ms)) = (rank, thread, ms) else {
                return Err(format!(
                    "{item:?}: expected park:[rank=R:]thread=NAME:after_ms=N with NAME one of {} (test only: the thread stops N ms after start-up)",
                    PARKABLE.join(", ")
                ));
            };
            out.push(Fault { action: Action::Park(thread), rank, trigger: Trigger::AfterMs(ms), fired: AtomicBool::new(false) });
            continue;
        }
        let [action, rank, trigger] = parts[..] else {
            return Err(format!("{item:?} is not ACTION:rank=R:TRIGGER"));
        };
        let action = match action {
            "kill" => Action::Kill,
            "stop" => Action::Stop,
            "flip" => Action::Flip,
            a => return Err(format!("{item:?}: unknown action {a:?} (kill or stop; flip, panic:during=recovery, slow:moves=MS and other_build:rank=R for tests)")),
        };
        let rank: i32 = rank
            .strip_prefix("rank=")
            .and_then(|r| r.parse().ok())
            .ok_or_else(|| format!("{item:?}: expected rank=R with R a worker rank"))?;
        if rank < 1 || ranks.is_some_and(|n| rank >= n) {
            let range = ranks.map_or("1 or more".to_string(), |n| format!("1..{}", n - 1));
            return Err(format!("{item:?}: rank {rank} is not a worker rank ({range})"));
        }
        let num = |s: &str| s.parse::<u64>().map_err(|_| format!("{item:?}: {s:?} is not a number"));
        let trigger = match trigger.split_once('=') {
            Some(("after_tasks", n)) => Trigger::AfterTasks(num(n)?),
            Some(("after_ms", n)) => Trigger::AfterMs(num(n)?),
            Some(("during", "checkpoint")) => Trigger::DuringCheckpoint,
            Some(("during", "recovery")) => Trigger::DuringRecovery,
            Some(("during", "restore")) => Trigger::DuringRestore,
            Some(("during", "exit")) => Trigger::DuringExit,
            Some(("during", "move")) => Trigger::DuringMove(rank),
            _ => {
                return Err(format!(
                    "{item:?}: unknown trigger {trigger:?} (after_tasks=N, after_ms=N, during=checkpoint, during=recovery, during=restore, during=exit or during=move)"
                ))
            }
        };
        if action == Action::Flip && !matches!(trigger, Trigger::AfterTasks(_) | Trigger::AfterMs(_)) {
            return Err(format!("{item:?}: a flip takes after_tasks=N or after_ms=N (test only: a bit of what the next region run on R writes is flipped)"));
        }
        out.push(Fault { action, rank, trigger, fired: AtomicBool::new(false) });
    }
    Ok(out)
}

/// The faults still to inject, and when each was injected.
#[derive(Debug, Default)]
pub struct Injector {
    faults: Vec<Fault>,
    injected: parking_lot::Mutex<Vec<(i32, Instant)>>,
}

impl Injector {
    /// Over `faults`.
    pub fn new(faults: Vec<Fault>) -> Self {
        Injector { faults, injected: Default::default() }
    }

    /// The threads rank `me` must park, with when (ms after start-up).
    pub fn parks_of(&self, me: i32) -> Vec<(&'static str, u64)> {
        self.faults
            .iter()
            .filter(|f| f.rank == me)
            .filter_map(|f| match (f.action, f.trigger) {
                (Action::Park(name), Trigger::AfterMs(ms)) => Some((name, ms)),
                _ => None,
            })
            .collect()
    }

    /// Test only (`flip:`): should the region about to be sent to `rank` have a bit of what it
    /// writes flipped, `tasks` regions being done and `ms` ms since start-up? True once per
    /// flip fault, the first time its trigger is met (the fault is then marked fired).
    pub fn flip_due(&self, rank: i32, tasks: u64, ms: u64) -> bool {
        self.faults.iter().any(|f| {
            f.action == Action::Flip
                && f.rank == rank
                && match f.trigger {
                    Trigger::AfterTasks(n) => tasks >= n,
                    Trigger::AfterMs(n) => ms >= n,
                    _ => false,
                }
                && !f.fired.swap(true, Ordering::AcqRel)
        })
    }

    /// No fault to inject?
    pub fn is_empty(&self) -> bool {
        self.faults.is_empty()
    }

    /// The faults whose trigger `due` accepts and that did not fire yet; each is marked fired.
    /// Signals to ranks only: an [`Action::Panic`] fault is never among them.
    pub fn due(&self, due: impl Fn(&Trigger) -> bool) -> Vec<(Action, i32, Trigger)> {
        self.faults
            .iter()
            .filter(|f| f.action.signal() != 0 && due(&f.trigger) && !f.fired.swap(true, Ordering::AcqRel))
            .map(|f| (f.action, f.rank, f.trigger))
            .collect()
    }

    /// Test only (`panic:during=recovery`): should the recovery that starts now panic? True
    /// once, the first time asked, if that fault was given.
    pub fn panic_due_in_recovery(&self) -> bool {
        self.faults.iter().any(|f| f.action == Action::Panic && !f.fired.swap(true, Ordering::AcqRel))
    }

    /// Test only (`slow:moves=MS`): how long each copy between workers waits before it starts.
    pub fn move_delay(&self) -> Option<std::time::Duration> {
        self.faults.iter().find_map(|f| match f.action {
            Action::SlowMoves(ms) => Some(std::time::Duration::from_millis(ms)),
            _ => None,
        })
    }

    /// Test only (`other_build:rank=R`): does `rank` claim another build at start-up?
    pub fn claims_other_build(&self, rank: i32) -> bool {
        self.faults.iter().any(|f| f.action == Action::OtherBuild && f.rank == rank)
    }

    /// Un-fire a fault that could not be injected now (e.g. recovery of its own rank).
    pub fn rearm(&self, rank: i32, trigger: Trigger) {
        if let Some(f) = self.faults.iter().find(|f| f.rank == rank && f.trigger == trigger) {
            f.fired.store(false, Ordering::Release);
        }
    }

    /// Note that `rank` was sent its fault now.
    pub fn injected(&self, rank: i32) {
        self.injected.lock().push((rank, Instant::now()));
    }

    /// When `rank` was sent its fault, if it was.
    pub fn injected_at(&self, rank: i32) -> Option<Instant> {
        self.injected.lock().iter().find(|(r, _)| *r == rank).map(|&(_, t)| t)
    }

    /// The longest `after_ms` delay, for the timer thread.
    pub fn timed(&self) -> Vec<u64> {
        self.faults
            .iter()
            .filter_map(|f| match f.trigger {
                Trigger::AfterMs(ms) => Some(ms),
                _ => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // `OMPCLUSTER_FT_INJECT` as users write it, and anything else: parsed or refused with a
    // message naming the item, never a panic (issue 36).
    proptest::proptest! {
        #[test]
        fn fuzz_any_spec_is_parsed_or_refused(spec in "([a-z]{0,6}(:[a-z_]{0,6}(=[0-9a-z]{0,5})?){0,3};?){0,3}|[ -~]{0,40}") {
            match parse(&spec, Some(4)) {
                Ok(faults) => proptest::prop_assert!(faults.iter().all(|f| f.rank == 0 || (1..4).contains(&f.rank))),
                Err(e) => proptest::prop_assert!(!e.is_empty()),
            }
        }
    }

    #[test]
    fn grammar() {
        let f = parse("kill:rank=2:after_tasks=40; stop:rank=3:after_ms=1500;kill:rank=1:during=checkpoint;kill:rank=2:during=recovery;stop:rank=1:during=exit", Some(4)).unwrap();
        assert_eq!(f.len(), 5);
        assert_eq!(f[0].to_string(), "kill:rank=2:after_tasks=40");
        assert_eq!((f[1].action, f[1].rank, f[1].trigger), (Action::Stop, 3, Trigger::AfterMs(1500)));
        assert_eq!(f[2].trigger, Trigger::DuringCheckpoint);
        assert_eq!(f[3].trigger, Trigger::DuringRecovery);
        assert_eq!(f[4].to_string(), "stop:rank=1:during=exit");
        assert!(parse("", None).unwrap().is_empty());
        for bad in ["kill:rank=0:after_ms=1", "kill:rank=4:after_ms=1", "explode:rank=1:after_ms=1", "kill:rank=1", "kill:rank=x:after_ms=1", "kill:rank=1:after_ms=soon", "kill:rank=1:during=lunch"] {
            assert!(parse(bad, Some(4)).is_err(), "{bad} accepted");
        }
        // Without the job's size, any positive rank is accepted.
        assert!(parse("kill:rank=9:after_ms=1", None).is_ok());
        // `panic` (test only) is never due as a signal.
        assert!(Injector::new(parse("panic:during=recovery", Some(4)).unwrap()).due(|_| true).is_empty());
        let inj = Injector::new(f);
        assert_eq!(inj.due(|t| matches!(t, Trigger::AfterTasks(n) if *n <= 40)), vec![(Action::Kill, 2, Trigger::AfterTasks(40))]);
        assert!(inj.due(|t| matches!(t, Trigger::AfterTasks(_))).is_empty(), "fires once");
        assert_eq!(inj.timed(), vec![1500]);
    }

    #[test]
    fn panic_during_recovery() {
        let f = parse("kill:rank=2:after_tasks=20; panic:during=recovery", Some(4)).unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!((f[1].action, f[1].rank, f[1].trigger), (Action::Panic, 0, Trigger::DuringRecovery));
        assert_eq!(f[1].to_string(), "panic:during=recovery");
        assert!(parse(" panic : during=recovery ", None).is_ok());
        for bad in [
            "panic",
            "panic:",
            "panic:rank=1:during=recovery",
            "panic:during=recovery:rank=1",
            "panic:during=checkpoint",
            "panic:during=exit",
            "panic:after_tasks=3",
            "panic:during=recovery:during=recovery",
            "panic:rank=0",
        ] {
            let e = parse(bad, Some(4)).expect_err(bad);
            assert!(e.contains("panic:during=recovery") && e.contains("test only"), "{bad}: {e}");
        }
        let inj = Injector::new(f);
        // Never sent to a rank, whatever the trigger asked for.
        assert!(inj.due(|t| *t == Trigger::DuringRecovery).is_empty());
        assert!(inj.panic_due_in_recovery(), "due at the first recovery");
        assert!(!inj.panic_due_in_recovery(), "once only");
        // The kill is unaffected.
        assert_eq!(inj.due(|t| matches!(t, Trigger::AfterTasks(_))), vec![(Action::Kill, 2, Trigger::AfterTasks(20))]);
        assert!(!Injector::new(parse("kill:rank=1:during=recovery", None).unwrap()).panic_due_in_recovery());
        assert!(!Injector::default().panic_due_in_recovery());
    }

    #[test]
    fn other_build() {
        let f = parse("other_build:rank=2; kill:rank=1:after_tasks=3", Some(4)).unwrap();
        assert_eq!((f[0].action, f[0].rank, f[0].trigger), (Action::OtherBuild, 2, Trigger::AtStart));
        assert_eq!(f[0].to_string(), "other_build:rank=2");
        let inj = Injector::new(f);
        assert!(inj.claims_other_build(2) && !inj.claims_other_build(1) && !inj.claims_other_build(0));
        // Never a signal.
        assert_eq!(inj.due(|_| true), vec![(Action::Kill, 1, Trigger::AfterTasks(3))]);
        for bad in ["other_build", "other_build:rank=0", "other_build:rank=4", "other_build:rank=x", "other_build:rank=1:after_ms=3"] {
            let e = parse(bad, Some(4)).expect_err(bad);
            assert!(e.contains("other_build:rank=R") && e.contains("test only"), "{bad}: {e}");
        }
    }

    #[test]
    fn park() {
        let f = parse("park:thread=ompc-ft-buddy:after_ms=300; park:rank=2:thread=ompc-worker-poll:after_ms=5; kill:rank=1:after_tasks=3", Some(4)).unwrap();
        assert_eq!((f[0].action, f[0].rank, f[0].trigger), (Action::Park("ompc-ft-buddy"), 0, Trigger::AfterMs(300)));
        assert_eq!(f[1].to_string(), "park:rank=2:thread=ompc-worker-poll:after_ms=5");
        assert_eq!(parse(&f[1].to_string(), Some(4)).unwrap()[0].to_string(), f[1].to_string());
        let inj = Injector::new(f);
        assert_eq!(inj.parks_of(0), vec![("ompc-ft-buddy", 300)]);
        assert_eq!(inj.parks_of(2), vec![("ompc-worker-poll", 5)]);
        assert!(inj.parks_of(1).is_empty());
        // Never sent.
        assert_eq!(inj.due(|_| true), vec![(Action::Kill, 1, Trigger::AfterTasks(3))]);
        for bad in ["park", "park:thread=main:after_ms=1", "park:thread=ompc-ft-buddy", "park:rank=4:thread=ft-heartbeat:after_ms=1", "park:thread=ft-heartbeat:after_tasks=1"] {
            let e = parse(bad, Some(4)).expect_err(bad);
            assert!(e.contains("park:[rank=R:]thread=NAME:after_ms=N") && e.contains("ompc-ft-prober"), "{bad}: {e}");
        }
    }

    #[test]
    fn flip() {
        let f = parse("flip:rank=2:after_tasks=3; flip:rank=1:after_ms=50; kill:rank=3:after_tasks=9", Some(4)).unwrap();
        assert_eq!(f[0].to_string(), "flip:rank=2:after_tasks=3");
        assert_eq!(parse(&f[1].to_string(), Some(4)).unwrap()[0].to_string(), "flip:rank=1:after_ms=50");
        let inj = Injector::new(f);
        // Not before its trigger, not on another rank, once only.
        assert!(!inj.flip_due(2, 2, 10_000));
        assert!(!inj.flip_due(1, 100, 49));
        assert!(inj.flip_due(2, 3, 0));
        assert!(!inj.flip_due(2, 4, 0));
        assert!(inj.flip_due(1, 0, 50));
        // Never a signal.
        assert_eq!(inj.due(|_| true), vec![(Action::Kill, 3, Trigger::AfterTasks(9))]);
        for bad in ["flip:rank=2:during=recovery", "flip:rank=0:after_tasks=1", "flip:after_tasks=1"] {
            assert!(parse(bad, Some(4)).is_err(), "{bad}");
        }
    }

    #[test]
    fn slow_moves() {
        let f = parse("slow:moves=20; kill:rank=1:after_tasks=3", Some(4)).unwrap();
        assert_eq!(f[0].to_string(), "slow:moves=20");
        let inj = Injector::new(f);
        assert_eq!(inj.move_delay(), Some(std::time::Duration::from_millis(20)));
        // Never a signal, whatever is asked.
        assert_eq!(inj.due(|_| true), vec![(Action::Kill, 1, Trigger::AfterTasks(3))]);
        assert_eq!(inj.move_delay(), Some(std::time::Duration::from_millis(20)), "every move, not once");
        assert_eq!(Injector::default().move_delay(), None);
        for bad in ["slow", "slow:moves", "slow:moves=x", "slow:moves=20000", "slow:rank=1:moves=3", "slow:moves=3:moves=3"] {
            let e = parse(bad, Some(4)).expect_err(bad);
            assert!(e.contains("slow:moves=MS") && e.contains("test only"), "{bad}: {e}");
        }
    }
}
