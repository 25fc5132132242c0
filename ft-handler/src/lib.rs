//! # ft-handler: the head's notification handler
//!
//! Owns what recovery stands on: the handler's [`State`], the gate that pauses the offloading
//! threads (read side: one offloading request; write side: a checkpoint or a recovery), the
//! queue of failure notices (the failure detector's callback only enqueues), and the loop that
//! recovers from failures, restarting when another rank dies meanwhile. It drives the cluster
//! device through the narrow [`Device`] trait, so its logic is tested against a simulated
//! device. A panic on the handler thread (in the device's `recover` or in the handler itself)
//! is a fatal outcome, never a silent death: see [`Handler::start`].
//!
//! It also owns the recovery algorithm itself ([`recovery`]: what was lost, where each version
//! comes from, the order of re-runs ([`RerunOrder`]), planning again, the fatal cases, spares),
//! which the device's `recover` runs over a few primitives ([`recovery::Primitives`]), with its decisions about copies in [`decide`]; it too is
//! tested against a simulated cluster. And the schedule of buddy copies ([`buddy`]: which
//! versions the head copies, in what order, within what share of time and memory), which
//! the device's buddy thread follows. Threads and locks: `src/README.md`.

pub mod buddy;
pub mod decide;
pub mod recovery;
mod rerun;
#[cfg(test)]
mod testing;
pub use rerun::{RerunOrder, TaskState};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::any::Any;
use std::cell::Cell;
use std::collections::BTreeSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;

/// What the handler is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Offloading runs.
    Running,
    /// A checkpoint holds the gate.
    Checkpointing,
    /// A failure was noticed; recovery waits for the requests in flight.
    Failed,
    /// Recovery holds the gate and rebuilds what was lost.
    Restarting,
}

/// Why a recovery did not finish.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum RecoverError {
    /// Another rank died meanwhile: start again with it included.
    #[error("rank {0} died during recovery")]
    NewFailure(i32),
    /// Nothing can give back what was lost: the job must end, with this explanation.
    #[error("{0}")]
    Fatal(String),
}

/// The cluster device as recovery sees it.
pub trait Device: Send + Sync + 'static {
    /// Ranks declared dead so far (by the failure detector or fenced by the device).
    fn dead(&self) -> BTreeSet<i32>;
    /// The handler has taken in that the `dead` ranks died, and is about to wait for the
    /// requests in flight: tell whoever may be waiting on them (called on the handler thread,
    /// so that the failure detector's callback never has to).
    fn noticed(&self, _dead: &BTreeSet<i32>) {}
    /// Rebuild everything the program can still need that the `dead` ranks held, with the
    /// gate held exclusively (no offloading request in flight). Called again with a larger
    /// set after [`RecoverError::NewFailure`].
    fn recover(&self, dead: &BTreeSet<i32>) -> Result<(), RecoverError>;
    /// Recovery is impossible: say why and end the job (the real device does not return).
    fn fatal(&self, why: &str);
}

struct Inner {
    state: State,
    /// Ranks whose loss has been recovered from.
    recovered: BTreeSet<i32>,
    /// Set when recovery failed for good (the device is ending the job).
    fatal: Option<String>,
    /// Set when the handler thread has ended, however it ended (see [`ThreadGone`]): nothing
    /// recovers any more.
    gone: Option<String>,
    /// Recoveries completed.
    epoch: u64,
}

/// The handler: gate, state, notices.
pub struct Handler {
    gate: RwLock<()>,
    inner: Mutex<Inner>,
    changed: Condvar,
    tx: Sender<i32>,
    rx: Receiver<i32>,
}

/// What the handler thread does between failures (for the watchdog).
const WAITING_FOR_FAILURES: &str = "waiting for a failure";

/// What a thread waiting for the gate's write side waits for, for the watchdog.
const LEAVING_THE_GATE: &str = "the offloading requests in flight to leave the gate";

/// How long a thread waits for a recovery before checking again whether it is still needed
/// (a notice may come from a rank this handler already recovered from).
const RECHECK: Duration = Duration::from_millis(200);

impl Default for Handler {
    fn default() -> Self {
        Self::new()
    }
}

impl Handler {
    /// A handler in state `Running`, with no thread yet.
    pub fn new() -> Self {
        let (tx, rx) = crossbeam_channel::unbounded();
        Handler {
            gate: RwLock::new(()),
            inner: Mutex::new(Inner { state: State::Running, recovered: BTreeSet::new(), fatal: None, gone: None, epoch: 0 }),
            changed: Condvar::new(),
            tx,
            rx,
        }
    }

    /// Start the handler thread over `device`.
    ///
    /// The thread never dies silently: a panic in [`Device::recover`] or anywhere in its loop
    /// becomes a fatal outcome ([`Device::fatal`] with "the recovery handler panicked: ..."),
    /// and however the thread ends, [`Handler::wait_recovered`] stops waiting for it.
    pub fn start<D: Device>(self: &Arc<Self>, device: Arc<D>) -> std::io::Result<()> {
        let me = Arc::clone(self);
        std::thread::Builder::new()
            .name("ompc-ft-handler".into())
            .spawn(move || {
                ON_HANDLER_THREAD.with(|f| f.set(true));
                // Dropped last, also when unwinding: waiters learn that the thread is gone.
                let _gone = ThreadGone(&me);
                // Watched (`watchdog`): idle between failures; running as it recovers, except
                // in the waits on other ranks, threads and files recovery reaches, which mark
                // themselves through the thread's own beat.
                let beat = watchdog::global().beat("ompc-ft-handler", WAITING_FOR_FAILURES);
                beat.own();
                me.run(&*device, &beat);
            })
            .map(|_| ())
    }

    /// A rank was declared dead (callable from any thread: it only enqueues).
    pub fn notify(&self, rank: i32) {
        let _ = self.tx.send(rank);
    }

    /// The current state.
    pub fn state(&self) -> State {
        self.inner.lock().state
    }

    /// Recoveries completed so far.
    pub fn epoch(&self) -> u64 {
        self.inner.lock().epoch
    }

    /// Ranks recovered from so far.
    pub fn recovered(&self) -> BTreeSet<i32> {
        self.inner.lock().recovered.clone()
    }

    /// Enter one offloading request (the gate's read side).
    pub fn enter(&self) -> RwLockReadGuard<'_, ()> {
        watchdog::waiting("a recovery or a checkpoint holding the gate", || self.gate.read())
    }

    /// Hold the gate's read side for work a request hands over while it holds the gate (the
    /// replicas of a region still running when its result was taken): never waits, even for a
    /// writer waiting, since the caller's request holds the read side. Recoveries and
    /// checkpoints then wait for that work as for the request.
    pub fn enter_beside(&self) -> RwLockReadGuard<'_, ()> {
        self.gate.read_recursive()
    }

    /// Wait until no request, and no work handed over by one, holds the gate (the job's end).
    pub fn wait_quiet(&self) {
        drop(watchdog::waiting(LEAVING_THE_GATE, || self.gate.write()));
    }

    /// Hold the gate exclusively, in `state` (a checkpoint); `Running` again when dropped.
    pub fn exclusive(&self, state: State) -> Exclusive<'_> {
        let guard = watchdog::waiting(LEAVING_THE_GATE, || self.gate.write());
        self.inner.lock().state = state;
        Exclusive { handler: self, _guard: guard }
    }

    /// Block until every rank in `dead` has been recovered from (call with no gate guard
    /// held). Returns the reason if recovery failed for good instead, or if the handler
    /// thread has ended (nothing would recover them any more).
    pub fn wait_recovered(&self, dead: &BTreeSet<i32>) -> Result<(), String> {
        watchdog::waiting("the recovery from a failure", || self.await_recovered(dead))
    }

    fn await_recovered(&self, dead: &BTreeSet<i32>) -> Result<(), String> {
        let mut i = self.inner.lock();
        loop {
            if let Some(f) = &i.fatal {
                return Err(f.clone());
            }
            if dead.is_subset(&i.recovered) {
                return Ok(());
            }
            if let Some(g) = &i.gone {
                return Err(g.clone());
            }
            self.changed.wait_for(&mut i, RECHECK);
        }
    }

    fn set_state(&self, s: State) {
        self.inner.lock().state = s;
        self.changed.notify_all();
    }

    /// The handler thread: one recovery per batch of notices, until recovery fails for good.
    ///
    /// Each batch runs behind a panic boundary: a panic in [`Device::recover`] is caught
    /// around that call, with the gate still held, and ends the job like
    /// [`RecoverError::Fatal`]; a panic anywhere else in the batch (the gate is then released
    /// by unwinding) ends it too.
    fn run(&self, device: &dyn Device, beat: &watchdog::Beat) {
        loop {
            beat.set(watchdog::State::Idle, WAITING_FOR_FAILURES);
            let Ok(first) = self.rx.recv() else { return };
            beat.set(watchdog::State::Running, "recovering from a failure");
            match catch_unwind(AssertUnwindSafe(|| self.recover_batch(first, device))) {
                Ok(Ok(())) => {}
                Ok(Err(())) => return,
                Err(p) => {
                    self.give_up(device, format!("the recovery handler panicked: {}", panic_message(&*p)));
                    return;
                }
            }
        }
    }

    /// One recovery, from the first notice of a batch; `Err` once the job is ending.
    fn recover_batch(&self, first: i32, device: &dyn Device) -> Result<(), ()> {
        let mut noticed: BTreeSet<i32> = [first].into();
        noticed.extend(self.rx.try_iter());
        let mut dead = device.dead();
        dead.extend(noticed);
        if dead.is_subset(&self.inner.lock().recovered) {
            return Ok(());
        }
        self.set_state(State::Failed);
        device.noticed(&dead);
        // The requests in flight leave once their waits on workers end (bounded by the
        // failure detector), or a kernel they wait for does.
        let gate = watchdog::waiting(LEAVING_THE_GATE, || self.gate.write());
        self.set_state(State::Restarting);
        let outcome = loop {
            // Everything noticed meanwhile joins this recovery.
            dead.extend(self.rx.try_iter());
            dead.extend(device.dead());
            match catch_unwind(AssertUnwindSafe(|| device.recover(&dead))) {
                Ok(Ok(())) => break Ok(()),
                Ok(Err(RecoverError::NewFailure(r))) => {
                    dead.insert(r);
                }
                Ok(Err(RecoverError::Fatal(why))) => break Err(why),
                Err(p) => break Err(format!("the recovery handler panicked: {}", panic_message(&*p))),
            }
        };
        match outcome {
            Ok(()) => {
                let mut i = self.inner.lock();
                i.recovered.extend(dead.iter().copied());
                i.epoch += 1;
                i.state = State::Running;
            }
            Err(why) => {
                // With the gate still held: no offloading request runs on a half-rebuilt device.
                self.give_up(device, why);
                drop(gate);
                return Err(());
            }
        }
        drop(gate);
        self.changed.notify_all();
        Ok(())
    }

    /// Recovery failed for good: the device ends the job; should it return, waiters get the
    /// reason. A panic in [`Device::fatal`] itself is caught and added to the reason.
    fn give_up(&self, device: &dyn Device, mut why: String) {
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| device.fatal(&why))) {
            why = format!("{why} (and ending the job panicked: {})", panic_message(&*p));
        }
        self.inner.lock().fatal = Some(why);
        self.changed.notify_all();
    }
}

thread_local! {
    /// Set on the handler thread (see [`on_handler_thread`]).
    static ON_HANDLER_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Is the calling thread a handler thread? A panic there is reported by the handler itself
/// (as [`Device::fatal`]'s reason), so a panic hook may leave it out to keep one message.
pub fn on_handler_thread() -> bool {
    ON_HANDLER_THREAD.with(Cell::get)
}

/// Run `f` on this thread as part of the handler's work (a thread recovery started: one that
/// re-runs tasks): a panic in it is caught and returned as its message, for the caller to turn
/// into a fatal outcome, and a panic hook that asks [`on_handler_thread`] leaves it out.
pub fn catch_as_handler<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    let was = ON_HANDLER_THREAD.with(|c| c.replace(true));
    let r = catch_unwind(AssertUnwindSafe(f)).map_err(|p| panic_message(&*p));
    ON_HANDLER_THREAD.with(|c| c.set(was));
    r
}

/// The text of a panic's payload (`panic!` with a literal or a formatted message).
pub fn panic_message(p: &(dyn Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// Held by the handler thread for its whole life: when it ends, however (a return after a
/// fatal outcome, or a panic that escaped every boundary), [`Handler::wait_recovered`] stops
/// waiting for recoveries that will never come.
struct ThreadGone<'a>(&'a Handler);

impl Drop for ThreadGone<'_> {
    fn drop(&mut self) {
        let why = if std::thread::panicking() {
            "the recovery handler thread died of a panic"
        } else {
            "the recovery handler thread has ended"
        };
        let mut i = self.0.inner.lock();
        i.gone.get_or_insert_with(|| why.to_string());
        drop(i);
        self.0.changed.notify_all();
    }
}

/// The gate held exclusively (see [`Handler::exclusive`]).
pub struct Exclusive<'a> {
    handler: &'a Handler,
    _guard: RwLockWriteGuard<'a, ()>,
}

impl Drop for Exclusive<'_> {
    fn drop(&mut self) {
        self.handler.set_state(State::Running);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    /// A simulated cluster device: ranks die when told; recovery "re-runs" lost tasks and can
    /// be made to meet a new failure on its first attempt.
    #[derive(Default)]
    struct SimDevice {
        dead: Mutex<BTreeSet<i32>>,
        calls: Mutex<Vec<BTreeSet<i32>>>,
        /// Rank that dies during the first recovery attempt.
        die_during: Mutex<Option<i32>>,
        /// Requests that were in flight when recovery ran (must be 0: the gate excludes them).
        in_flight: AtomicUsize,
        seen_in_flight: AtomicUsize,
        fatal_if: Option<i32>,
        fatal: Mutex<Option<String>>,
        /// `recover` panics (a bug in the device's recovery).
        panic_in_recover: bool,
        /// `dead` panics once a rank is dead (a bug outside `recover`).
        panic_in_dead: bool,
        /// `fatal` panics too.
        panic_in_fatal: bool,
        /// Whether the gate was free (an offloading request could enter) when `fatal` ran.
        gate_free_in_fatal: Mutex<Option<bool>>,
        handler: Mutex<Option<Arc<Handler>>>,
    }

    impl Device for SimDevice {
        fn dead(&self) -> BTreeSet<i32> {
            let d = self.dead.lock().clone();
            if self.panic_in_dead && !d.is_empty() {
                panic!("the dead set is {d:?}");
            }
            d
        }
        fn recover(&self, dead: &BTreeSet<i32>) -> Result<(), RecoverError> {
            if self.panic_in_recover {
                panic!("simulated bug in recovery of {dead:?}");
            }
            self.seen_in_flight.fetch_max(self.in_flight.load(Ordering::SeqCst), Ordering::SeqCst);
            self.calls.lock().push(dead.clone());
            if let Some(r) = self.die_during.lock().take() {
                self.dead.lock().insert(r);
                return Err(RecoverError::NewFailure(r));
            }
            if self.fatal_if.is_some_and(|r| dead.contains(&r)) {
                return Err(RecoverError::Fatal("buffer 7 version 3 has no source".into()));
            }
            std::thread::sleep(Duration::from_millis(20));
            Ok(())
        }
        fn fatal(&self, why: &str) {
            *self.fatal.lock() = Some(why.to_string());
            if let Some(h) = &*self.handler.lock() {
                *self.gate_free_in_fatal.lock() = Some(h.gate.try_read().is_some());
            }
            if self.panic_in_fatal {
                panic!("simulated bug in fatal");
            }
        }
    }

    /// Start a handler over `dev`, the device knowing its handler.
    fn started(dev: &Arc<SimDevice>) -> Arc<Handler> {
        let h = Arc::new(Handler::new());
        *dev.handler.lock() = Some(h.clone());
        h.start(dev.clone()).unwrap();
        h
    }

    /// `waiters` threads wait for the recovery of `dead`; their results and how long the
    /// slowest took.
    fn wait_all(h: &Arc<Handler>, dead: BTreeSet<i32>, waiters: usize) -> (Vec<Result<(), String>>, Duration) {
        let t0 = Instant::now();
        let res = std::thread::scope(|s| {
            let hs: Vec<_> = (0..waiters).map(|_| s.spawn(|| h.wait_recovered(&dead))).collect();
            hs.into_iter().map(|t| t.join().unwrap()).collect()
        });
        (res, t0.elapsed())
    }

    fn kill(dev: &SimDevice, h: &Handler, r: i32) {
        dev.dead.lock().insert(r);
        h.notify(r);
    }

    #[test]
    fn a_failure_is_recovered_while_requests_wait() {
        let h = Arc::new(Handler::new());
        let dev = Arc::new(SimDevice::default());
        h.start(dev.clone()).unwrap();
        // Four "offloading threads": each request holds the gate's read side for 5 ms; one
        // that meets the dead rank waits for recovery and runs again.
        std::thread::scope(|s| {
            for t in 0..4 {
                let (h, dev) = (&h, &dev);
                s.spawn(move || {
                    for i in 0..40 {
                        loop {
                            let g = h.enter();
                            dev.in_flight.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(Duration::from_millis(1));
                            let dead = dev.dead();
                            let failed = t == 1 && i == 10 && !dead.is_subset(&h.recovered());
                            dev.in_flight.fetch_sub(1, Ordering::SeqCst);
                            drop(g);
                            if !failed {
                                break;
                            }
                            h.wait_recovered(&dead).unwrap();
                        }
                        if t == 0 && i == 5 {
                            kill(dev, h, 2);
                        }
                    }
                });
            }
        });
        let t0 = Instant::now();
        while h.epoch() < 1 && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(h.epoch(), 1);
        assert_eq!(h.recovered(), [2].into());
        assert_eq!(dev.seen_in_flight.load(Ordering::SeqCst), 0, "recovery ran while a request was in flight");
        assert_eq!(h.state(), State::Running);
    }

    #[test]
    fn a_failure_during_recovery_restarts_it_with_the_larger_set() {
        let h = Arc::new(Handler::new());
        let dev = Arc::new(SimDevice { die_during: Mutex::new(Some(3)), ..Default::default() });
        h.start(dev.clone()).unwrap();
        kill(&dev, &h, 1);
        h.wait_recovered(&[1].into()).unwrap();
        assert_eq!(h.recovered(), [1, 3].into());
        assert_eq!(*dev.calls.lock(), vec![[1].into(), [1, 3].into()]);
        // The notice of rank 3, still queued, starts no second recovery.
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(h.epoch(), 1);
        // A later failure is a new recovery.
        kill(&dev, &h, 2);
        h.wait_recovered(&[2].into()).unwrap();
        assert_eq!(h.epoch(), 2);
        assert_eq!(dev.calls.lock().last().unwrap(), &BTreeSet::from([1, 2, 3]));
    }

    #[test]
    fn an_unrecoverable_loss_is_reported_to_waiters_and_the_device() {
        let h = Arc::new(Handler::new());
        let dev = Arc::new(SimDevice { fatal_if: Some(1), ..Default::default() });
        h.start(dev.clone()).unwrap();
        kill(&dev, &h, 1);
        let e = h.wait_recovered(&[1].into()).unwrap_err();
        assert!(e.contains("no source"), "{e}");
        assert_eq!(dev.fatal.lock().as_deref(), Some("buffer 7 version 3 has no source"));
    }

    #[test]
    fn a_panic_in_recover_is_fatal_and_waiters_get_an_error_promptly() {
        let dev = Arc::new(SimDevice { panic_in_recover: true, ..Default::default() });
        let h = started(&dev);
        kill(&dev, &h, 2);
        let (res, took) = wait_all(&h, [2].into(), 3);
        for r in res {
            let e = r.unwrap_err();
            assert!(e.contains("the recovery handler panicked") && e.contains("simulated bug in recovery of {2}"), "{e}");
        }
        assert!(took < Duration::from_secs(2), "waiters took {took:?}");
        let why = dev.fatal.lock().clone().expect("fatal was called");
        assert_eq!(why, "the recovery handler panicked: simulated bug in recovery of {2}");
        // The device ended the job with the gate still held, as for any fatal outcome.
        assert_eq!(*dev.gate_free_in_fatal.lock(), Some(false));
        // The thread has ended: a later failure gets an error too, at once.
        kill(&dev, &h, 3);
        let (res, took) = wait_all(&h, [3].into(), 1);
        assert!(res[0].as_ref().unwrap_err().contains("simulated bug"), "{res:?}");
        assert!(took < Duration::from_secs(1), "{took:?}");
    }

    #[test]
    fn a_panic_elsewhere_in_the_handler_is_fatal_too() {
        let dev = Arc::new(SimDevice { panic_in_dead: true, ..Default::default() });
        let h = started(&dev);
        kill(&dev, &h, 1);
        let (res, took) = wait_all(&h, [1].into(), 2);
        for r in res {
            let e = r.unwrap_err();
            assert!(e.contains("the recovery handler panicked: the dead set is {1}"), "{e}");
        }
        assert!(took < Duration::from_secs(2), "waiters took {took:?}");
        assert_eq!(dev.fatal.lock().as_deref(), Some("the recovery handler panicked: the dead set is {1}"));
        assert_eq!(h.epoch(), 0);
    }

    #[test]
    fn a_panic_while_ending_the_job_still_reaches_the_waiters() {
        let dev = Arc::new(SimDevice { panic_in_recover: true, panic_in_fatal: true, ..Default::default() });
        let h = started(&dev);
        kill(&dev, &h, 1);
        let (res, _) = wait_all(&h, [1].into(), 1);
        let e = res[0].as_ref().unwrap_err();
        assert!(e.contains("simulated bug in recovery") && e.contains("ending the job panicked: simulated bug in fatal"), "{e}");
    }

    #[test]
    fn waiters_stop_waiting_when_the_handler_thread_is_gone() {
        let h = Arc::new(Handler::new());
        // A handler thread that dies of a panic no boundary caught, while a thread waits.
        let (res, took) = std::thread::scope(|s| {
            let w = s.spawn(|| {
                let t0 = Instant::now();
                (h.wait_recovered(&[4].into()), t0.elapsed())
            });
            let t = s.spawn(|| {
                ON_HANDLER_THREAD.with(|f| f.set(true));
                assert!(on_handler_thread());
                let _gone = ThreadGone(&h);
                std::thread::sleep(Duration::from_millis(50));
                panic!("escaped every boundary");
            });
            assert!(t.join().is_err());
            w.join().unwrap()
        });
        assert_eq!(res.unwrap_err(), "the recovery handler thread died of a panic");
        assert!(took < Duration::from_secs(1), "{took:?}");
        assert!(!on_handler_thread());
        // Ranks already recovered from are still reported as such.
        h.inner.lock().recovered.insert(5);
        assert_eq!(h.wait_recovered(&[5].into()), Ok(()));
        // A thread that returns is gone too.
        let h = Handler::new();
        drop(ThreadGone(&h));
        assert_eq!(h.wait_recovered(&[1].into()).unwrap_err(), "the recovery handler thread has ended");
    }

    #[test]
    fn a_checkpoint_holds_the_gate_exclusively() {
        let h = Handler::new();
        {
            let _x = h.exclusive(State::Checkpointing);
            assert_eq!(h.state(), State::Checkpointing);
            assert!(h.gate.try_read().is_none());
        }
        assert_eq!(h.state(), State::Running);
        assert!(h.gate.try_read().is_some());
    }
}
