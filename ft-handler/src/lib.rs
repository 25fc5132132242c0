//! # ft-handler: the head's notification handler
//!
//! Owns what recovery stands on: the handler's [`State`], the gate that pauses the offloading
//! threads (read side: one offloading request; write side: a checkpoint or a recovery), the
//! queue of failure notices (the failure detector's callback only enqueues), and the loop that
//! recovers from failures, restarting when another rank dies meanwhile. It drives the cluster
//! device through the narrow [`Device`] trait, so its logic is tested against a simulated
//! device. Threads and locks: `src/README.md`.

use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::collections::BTreeSet;
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
            inner: Mutex::new(Inner { state: State::Running, recovered: BTreeSet::new(), fatal: None, epoch: 0 }),
            changed: Condvar::new(),
            tx,
            rx,
        }
    }

    /// Start the handler thread over `device`.
    pub fn start<D: Device>(self: &Arc<Self>, device: Arc<D>) -> std::io::Result<()> {
        let me = Arc::clone(self);
        std::thread::Builder::new().name("ompc-ft-handler".into()).spawn(move || me.run(&*device)).map(|_| ())
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
        self.gate.read()
    }

    /// Hold the gate exclusively, in `state` (a checkpoint); `Running` again when dropped.
    pub fn exclusive(&self, state: State) -> Exclusive<'_> {
        let guard = self.gate.write();
        self.inner.lock().state = state;
        Exclusive { handler: self, _guard: guard }
    }

    /// Block until every rank in `dead` has been recovered from (call with no gate guard
    /// held). Returns the reason if recovery failed for good instead.
    pub fn wait_recovered(&self, dead: &BTreeSet<i32>) -> Result<(), String> {
        let mut i = self.inner.lock();
        loop {
            if let Some(f) = &i.fatal {
                return Err(f.clone());
            }
            if dead.is_subset(&i.recovered) {
                return Ok(());
            }
            self.changed.wait_for(&mut i, RECHECK);
        }
    }

    fn set_state(&self, s: State) {
        self.inner.lock().state = s;
        self.changed.notify_all();
    }

    /// The handler thread: one recovery per batch of notices.
    fn run(&self, device: &dyn Device) {
        while let Ok(first) = self.rx.recv() {
            let mut noticed: BTreeSet<i32> = [first].into();
            noticed.extend(self.rx.try_iter());
            let mut dead = device.dead();
            dead.extend(noticed);
            if dead.is_subset(&self.inner.lock().recovered) {
                continue;
            }
            self.set_state(State::Failed);
            let gate = self.gate.write();
            self.set_state(State::Restarting);
            let outcome = loop {
                // Everything noticed meanwhile joins this recovery.
                dead.extend(self.rx.try_iter());
                dead.extend(device.dead());
                match device.recover(&dead) {
                    Ok(()) => break Ok(()),
                    Err(RecoverError::NewFailure(r)) => {
                        dead.insert(r);
                    }
                    Err(RecoverError::Fatal(why)) => break Err(why),
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
                    // The device ends the job; should it return, waiters get the reason.
                    device.fatal(&why);
                    self.inner.lock().fatal = Some(why);
                    self.changed.notify_all();
                    return;
                }
            }
            drop(gate);
            self.changed.notify_all();
        }
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
    }

    impl Device for SimDevice {
        fn dead(&self) -> BTreeSet<i32> {
            self.dead.lock().clone()
        }
        fn recover(&self, dead: &BTreeSet<i32>) -> Result<(), RecoverError> {
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
        }
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
