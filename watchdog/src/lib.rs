//! A runtime that checks itself (issue 35, part 5). Each long-lived thread of ours that must
//! keep moving (the heartbeat, the head's buddy copies and prober, a worker's polling
//! leader...) holds a [`Beat`]: it ticks as it goes round, and says when it is idle (nothing
//! to do) or waiting on something bounded elsewhere (a peer, whose death the failure detector
//! notices; a user kernel, which may run for hours). A watchdog thread looks at every beat
//! once a second: one that is `Running` and has not ticked for the bound has stopped while it
//! has work (a lock held across a wait, a lost wake-up, a bug of ours), and the watchdog
//! reports every thread that is not idle, with what each is doing, to its caller, which ends
//! the job with a message instead of leaving it hung.
//!
//! A thread whose work reaches waits in many places, deep in code that knows nothing of it
//! (the recovery handler), makes its beat its own ([`Beat::own`], a thread-local): those
//! waits call [`waiting`], which marks the calling thread's own beat, if any, and does nothing
//! else.
//!
//! Design note (threads): a beat's state and counter are atomics written only by the thread
//! that holds it (its own beat: only by that thread too); the registry's list (a mutex) is touched when a beat is made or dropped and
//! by the watchdog thread, once a second. The rule itself ([`Registry::check`]) takes the
//! time as an argument, so that it is tested without a clock.

use parking_lot::{Mutex, MutexGuard};
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

/// What a thread holding a beat is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum State {
    /// Nothing to do (it waits for work): never a stall.
    Idle = 0,
    /// Working: it must tick within the bound.
    Running = 1,
    /// Waiting on something bounded elsewhere (a peer, a user kernel): never a stall.
    Waiting = 2,
}

impl State {
    /// `idle`, `running` or `waiting`.
    pub fn name(self) -> &'static str {
        match self {
            State::Idle => "idle",
            State::Running => "running",
            State::Waiting => "waiting",
        }
    }

    fn of(n: u8) -> State {
        match n {
            0 => State::Idle,
            1 => State::Running,
            _ => State::Waiting,
        }
    }
}

struct Slot {
    name: String,
    progress: AtomicU64,
    state: AtomicU8,
    what: Mutex<&'static str>,
    park: AtomicBool,
}

/// A thread's beat (see the crate's doc). Dropped as the thread ends.
pub struct Beat(Arc<Slot>);

impl Beat {
    /// One more round: progress. A beat asked to park (the test-only injection
    /// `park:thread=NAME`) parks its thread at its next tick while running, for ever, as a
    /// stuck thread of ours would be: with work, where it does that work. Not at a tick that
    /// starts an idle time or a wait: parked there, the thread would either never count as
    /// stopped or be named in a state it never stopped in.
    pub fn tick(&self) {
        self.0.progress.fetch_add(1, Ordering::Relaxed);
        if self.0.park.load(Ordering::Relaxed) && State::of(self.0.state.load(Ordering::Acquire)) == State::Running {
            loop {
                std::thread::park();
            }
        }
    }

    /// The thread is now in `state`, doing `what` (for the watchdog's message).
    pub fn set(&self, state: State, what: &'static str) {
        *self.0.what.lock() = what;
        self.0.state.store(state as u8, Ordering::Release);
        self.tick();
    }

    /// Run `f`, a wait bounded elsewhere (`what`: on whom), as [`State::Waiting`], then go back
    /// to the state it was in.
    pub fn waiting<R>(&self, what: &'static str, f: impl FnOnce() -> R) -> R {
        let before = (State::of(self.0.state.load(Ordering::Acquire)), *self.0.what.lock());
        self.set(State::Waiting, what);
        let r = f();
        self.set(before.0, before.1);
        r
    }

    /// Make this beat the calling thread's own: the waits of code that knows nothing of it
    /// (a reply from a peer, a checkpoint read: [`waiting`]) then mark it waiting while they
    /// last. For a thread whose work reaches such waits in many places (the recovery handler).
    pub fn own(&self) {
        let _ = MINE.try_with(|m| *m.borrow_mut() = Some(Beat(self.0.clone())));
    }
}

thread_local! {
    /// The calling thread's own beat, if it made one its own ([`Beat::own`]).
    static MINE: RefCell<Option<Beat>> = const { RefCell::new(None) };
}

/// Run `f`, a wait bounded elsewhere (`what`: on whom or what), as [`State::Waiting`] on the
/// calling thread's own beat ([`Beat::own`]), if it has one; else just run `f`. Callable
/// anywhere, a thread's exit included (other thread-locals' destructors may wait on a peer,
/// after this one is gone: then no beat).
pub fn waiting<R>(what: &'static str, f: impl FnOnce() -> R) -> R {
    match MINE.try_with(|m| m.borrow().as_ref().map(|b| Beat(b.0.clone()))).ok().flatten() {
        Some(beat) => beat.waiting(what, f),
        None => f(),
    }
}

/// Lock `m`; if another thread holds it, wait for it as [`waiting`] on `what` (the holder).
/// For a lock taken in many places whose holder may itself be in a marked wait (the head's
/// buffer table, held while a region waits for a checkpoint to save a staged copy): the
/// threads queued behind it have not stopped; a holder that has (running, not ticking) is
/// still the one named.
pub fn lock<'a, T>(m: &'a Mutex<T>, what: &'static str) -> MutexGuard<'a, T> {
    m.try_lock().unwrap_or_else(|| waiting(what, || m.lock()))
}

/// A thread found stopped, or (in a report) one that was not idle then.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seen {
    /// The beat's name (its thread's).
    pub name: String,
    /// Its state then.
    pub state: State,
    /// What it was doing.
    pub what: &'static str,
    /// How long since it last ticked.
    pub still_for: Duration,
    /// Running and still for the bound or longer: what made the watchdog act.
    pub stopped: bool,
}

impl std::fmt::Display for Seen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state.name();
        write!(f, "thread {} {state} in \"{}\", last moved {:.1} s ago", self.name, self.what, self.still_for.as_secs_f64())
    }
}

/// Every beat of this process.
#[derive(Default)]
pub struct Registry {
    beats: Mutex<Vec<Weak<Slot>>>,
}

/// What the watchdog remembers between looks: each beat's progress and since when, and when
/// it last looked.
#[derive(Default)]
pub struct Memory {
    last: Vec<(Weak<Slot>, u64, Instant)>,
    looked: Option<Instant>,
}

impl Registry {
    /// A new beat named `name`, running, doing `what`.
    pub fn beat(&self, name: &str, what: &'static str) -> Beat {
        let slot = Arc::new(Slot {
            name: name.to_string(),
            progress: AtomicU64::new(0),
            state: AtomicU8::new(State::Running as u8),
            what: Mutex::new(what),
            park: AtomicBool::new(false),
        });
        let mut beats = self.beats.lock();
        beats.retain(|w| w.strong_count() > 0);
        beats.push(Arc::downgrade(&slot));
        Beat(slot)
    }

    /// Ask the beats named `name` to park their threads at their next tick while running
    /// (test only).
    /// Returns how many there were.
    pub fn park(&self, name: &str) -> usize {
        let beats = self.beats.lock();
        let mut n = 0;
        for s in beats.iter().filter_map(Weak::upgrade).filter(|s| s.name == name) {
            s.park.store(true, Ordering::Relaxed);
            n += 1;
        }
        n
    }

    /// Look at every beat at `now`: if one is [`State::Running`] and has not ticked for
    /// `bound`, every beat that is not idle (the stopped ones first), else None. A look that
    /// comes half the bound or more after the one before means that the whole process was
    /// paused (SIGSTOP, a machine that did not run it): time counts afresh from it, since the
    /// threads could not move either.
    pub fn check(&self, now: Instant, bound: Duration, mem: &mut Memory) -> Option<Vec<Seen>> {
        let beats: Vec<Arc<Slot>> = self.beats.lock().iter().filter_map(Weak::upgrade).collect();
        mem.last.retain(|(w, _, _)| w.strong_count() > 0);
        if mem.looked.replace(now).is_some_and(|t| now.saturating_duration_since(t) >= bound / 2) {
            for e in &mut mem.last {
                e.2 = now;
            }
        }
        let mut seen = Vec::new();
        let mut stalled = false;
        for s in &beats {
            let progress = s.progress.load(Ordering::Relaxed);
            let state = State::of(s.state.load(Ordering::Acquire));
            let since = match mem.last.iter_mut().find(|(w, _, _)| std::ptr::eq(w.as_ptr(), Arc::as_ptr(s))) {
                Some(e) if e.1 == progress => e.2,
                Some(e) => {
                    (e.1, e.2) = (progress, now);
                    now
                }
                None => {
                    mem.last.push((Arc::downgrade(s), progress, now));
                    now
                }
            };
            let still_for = now.saturating_duration_since(since);
            let stopped = state == State::Running && still_for >= bound;
            stalled |= stopped;
            if state != State::Idle {
                seen.push(Seen { name: s.name.clone(), state, what: *s.what.lock(), still_for, stopped });
            }
        }
        if !stalled {
            return None;
        }
        seen.sort_by_key(|s| (!s.stopped, std::cmp::Reverse(s.still_for)));
        Some(seen)
    }
}

/// This process's registry.
pub fn global() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(Registry::default)
}

/// Start the watchdog thread over [`global`] with `bound`: on a stall it calls `on_stall`
/// with what [`Registry::check`] saw (which should end the process; if it returns, the
/// watchdog stops).
pub fn start(bound: Duration, on_stall: impl Fn(&[Seen]) + Send + 'static) -> std::io::Result<()> {
    let look = (bound / 4).clamp(Duration::from_millis(100), Duration::from_secs(1));
    std::thread::Builder::new().name("ompc-watchdog".into()).spawn(move || {
        let mut mem = Memory::default();
        loop {
            std::thread::sleep(look);
            if let Some(seen) = global().check(Instant::now(), bound, &mut mem) {
                on_stall(&seen);
                return;
            }
        }
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: Duration = Duration::from_secs(10);

    #[test]
    fn a_running_beat_that_stops_ticking_is_a_stall_and_idle_or_waiting_ones_never_are() {
        let r = Registry::default();
        let mut mem = Memory::default();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let buddy = r.beat("ompc-ft-buddy", "copying");
        let poll = r.beat("ompc-worker", "polling");
        let hb = r.beat("ompc-heartbeat", "beating");
        poll.set(State::Idle, "no events");
        assert_eq!(r.check(at(0), B, &mut mem), None);
        // The heartbeat goes on, the buddy thread waits on a peer, the poller is idle: 60 s on.
        for s in 1..=60 {
            hb.tick();
            if s == 1 {
                buddy.set(State::Waiting, "a copy from rank 2");
            }
            assert_eq!(r.check(at(s), B, &mut mem), None, "at {s} s");
        }
        // Back to work, then stuck: a stall once the bound passes, not before.
        buddy.set(State::Running, "pruning");
        for s in 61..=70 {
            hb.tick();
            assert_eq!(r.check(at(s), B, &mut mem), None, "at {s} s");
        }
        hb.tick();
        let seen = r.check(at(71), B, &mut mem).expect("a stall");
        // The stopped thread first, then the others not idle; the idle poller left out.
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert_eq!((seen[0].name.as_str(), seen[0].state, seen[0].what, seen[0].still_for, seen[0].stopped), ("ompc-ft-buddy", State::Running, "pruning", B, true));
        assert_eq!((seen[1].name.as_str(), seen[1].stopped), ("ompc-heartbeat", false));
        assert_eq!(seen[0].to_string(), "thread ompc-ft-buddy running in \"pruning\", last moved 10.0 s ago");
    }

    #[test]
    fn a_parked_beat_stops_its_thread_and_is_found() {
        let r = Arc::new(Registry::default());
        let beat = r.beat("ompc-ft-prober", "probing");
        let ticks = Arc::new(AtomicU64::new(0));
        let t = ticks.clone();
        std::thread::spawn(move || loop {
            beat.tick();
            t.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(1));
        });
        while ticks.load(Ordering::Relaxed) < 3 {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(r.park("ompc-ft-prober"), 1);
        assert_eq!(r.park("no-such-thread"), 0);
        let mut mem = Memory::default();
        let t0 = Instant::now();
        std::thread::sleep(Duration::from_millis(20));
        let parked_at = ticks.load(Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(ticks.load(Ordering::Relaxed), parked_at, "the thread still runs");
        for s in 0..10 {
            assert_eq!(r.check(t0 + Duration::from_secs(s), B, &mut mem), None);
        }
        let seen = r.check(t0 + B, B, &mut mem).expect("the parked thread is found");
        assert_eq!(seen[0].name, "ompc-ft-prober");
    }

    /// A thread asked to park as it goes idle or starts a wait parks where it next runs, and
    /// is named there (parked at the idle tick, the flusher of `ompc-ckpt-store` was named
    /// running in its idle text).
    #[test]
    fn a_parked_beat_parks_where_it_runs_not_where_it_waits() {
        let r = Arc::new(Registry::default());
        let beat = r.beat("ompc-ckpt-store", "writing");
        assert_eq!(r.park("ompc-ckpt-store"), 1);
        let reached = Arc::new(AtomicU64::new(0));
        let at = reached.clone();
        std::thread::spawn(move || {
            beat.set(State::Idle, "waiting for work");
            at.store(1, Ordering::Release);
            beat.waiting("a peer", || at.store(2, Ordering::Release));
            beat.set(State::Running, "writing");
            at.store(3, Ordering::Release);
        });
        let t0 = Instant::now();
        while reached.load(Ordering::Acquire) < 2 && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(reached.load(Ordering::Acquire), 2, "parked before its wait, or never");
        let mut mem = Memory::default();
        for s in 0..10 {
            assert_eq!(r.check(t0 + Duration::from_secs(s), B, &mut mem), None);
        }
        let seen = r.check(t0 + B, B, &mut mem).expect("the parked thread is found");
        assert_eq!((seen[0].name.as_str(), seen[0].state, seen[0].what), ("ompc-ckpt-store", State::Running, "writing"));
    }

    #[test]
    fn a_pause_of_the_whole_process_is_no_stall() {
        let r = Registry::default();
        let mut mem = Memory::default();
        let t0 = Instant::now();
        let _poll = r.beat("ompc-worker-poll", "polling");
        assert_eq!(r.check(t0, B, &mut mem), None);
        // Frozen for 3 bounds (the watchdog too): its next look counts afresh...
        assert_eq!(r.check(t0 + 3 * B, B, &mut mem), None);
        // ... and a thread that still does not move is found a bound later.
        for s in 1..10 {
            assert_eq!(r.check(t0 + 3 * B + Duration::from_secs(s), B, &mut mem), None);
        }
        assert!(r.check(t0 + 4 * B, B, &mut mem).is_some());
    }

    #[test]
    fn a_dropped_beat_is_forgotten() {
        let r = Registry::default();
        let mut mem = Memory::default();
        let t0 = Instant::now();
        let beat = r.beat("ompc-region", "a region");
        assert_eq!(r.check(t0, B, &mut mem), None);
        drop(beat);
        for s in 1..=20 {
            assert_eq!(r.check(t0 + Duration::from_secs(s), B, &mut mem), None);
        }
        assert!(r.beats.lock().iter().all(|w| w.strong_count() == 0));
    }

    #[test]
    fn waiting_comes_back_to_running() {
        let r = Registry::default();
        let beat = r.beat("t", "working");
        let state = || State::of(beat.0.state.load(Ordering::Acquire));
        let inside = beat.waiting("rank 3", state);
        assert_eq!(inside, State::Waiting);
        assert_eq!((state(), *beat.0.what.lock()), (State::Running, "working"));
    }

    #[test]
    fn a_wait_in_a_thread_local_destructor_after_the_beat_is_gone_just_runs() {
        struct WaitsOnDrop;
        impl Drop for WaitsOnDrop {
            fn drop(&mut self) {
                assert_eq!(waiting("a peer", || 7), 7);
            }
        }
        thread_local! { static LATE: WaitsOnDrop = const { WaitsOnDrop }; }
        let r = Arc::new(Registry::default());
        let r2 = r.clone();
        // LATE first, then the thread's own beat: destroyed in the reverse order, so LATE's
        // destructor waits after the beat's thread-local is gone (as an MPI send from a
        // thread-local's destructor did in a run).
        std::thread::spawn(move || {
            LATE.with(|_| ());
            r2.beat("t", "working").own();
        })
        .join()
        .expect("the thread ended well");
        assert!(r.beats.lock().iter().all(|w| w.strong_count() == 0));
    }

    #[test]
    fn a_wait_deep_in_other_code_marks_the_threads_own_beat_only() {
        let r = Registry::default();
        let beat = r.beat("t", "recovering");
        let look = |b: &Beat| (State::of(b.0.state.load(Ordering::Acquire)), *b.0.what.lock());
        // Not its own yet: the free function marks nothing.
        assert_eq!(waiting("a peer", || look(&beat)), (State::Running, "recovering"));
        beat.own();
        // Nested waits come back to the state they found (a wait inside a wait stays waiting).
        let (outer, inner, after_inner) = beat.waiting("re-runs", || (look(&beat), waiting("a peer", || look(&beat)), look(&beat)));
        assert_eq!((outer, inner, after_inner), ((State::Waiting, "re-runs"), (State::Waiting, "a peer"), (State::Waiting, "re-runs")));
        assert_eq!(look(&beat), (State::Running, "recovering"));
        // Another thread's waits do not touch it.
        let other = std::thread::scope(|s| s.spawn(|| waiting("a peer", || look(&beat))).join().unwrap());
        assert_eq!(other, (State::Running, "recovering"));
    }

    #[test]
    fn a_thread_behind_a_held_lock_waits_and_the_holder_runs() {
        let r = Registry::default();
        let mut mem = Memory::default();
        let m = Mutex::new(0u32);
        let t0 = Instant::now();
        // Free: taken at once, the beat untouched.
        let holder = r.beat("holder", "working");
        holder.own();
        *lock(&m, "the table") += 1;
        assert_eq!(State::of(holder.0.state.load(Ordering::Acquire)), State::Running);
        // Held: the thread behind it waits on it while the holder (running) sits still.
        let held = m.lock();
        std::thread::scope(|s| {
            let queued = s.spawn(|| {
                let beat = r.beat("queued", "working");
                beat.own();
                *lock(&m, "the table") += 1;
                let after = (State::of(beat.0.state.load(Ordering::Acquire)), *beat.0.what.lock());
                after
            });
            let started = Instant::now();
            while !r.beats.lock().iter().filter_map(Weak::upgrade).any(|s| s.name == "queued" && State::of(s.state.load(Ordering::Acquire)) == State::Waiting) {
                assert!(started.elapsed() < Duration::from_secs(10), "the queued thread never waited");
                std::thread::yield_now();
            }
            for q in 0..4 {
                assert_eq!(r.check(t0 + B * q / 4, B, &mut mem), None, "at {q} quarters of the bound");
            }
            let seen = r.check(t0 + B, B, &mut mem).expect("the holder stalls");
            let named: Vec<(&str, State, bool)> = seen.iter().map(|s| (s.name.as_str(), s.state, s.stopped)).collect();
            assert_eq!(named, [("holder", State::Running, true), ("queued", State::Waiting, false)]);
            assert_eq!(seen[1].what, "the table");
            drop(held);
            // Back to running once it has the lock.
            assert_eq!(queued.join().unwrap(), (State::Running, "working"));
        });
        assert_eq!(*m.lock(), 2);
    }
}
