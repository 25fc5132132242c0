//! The handle of a background flush.
//!
//! Design note (concurrency): a flush has one [`FlushSlot`] shared by the
//! caller's [`FlushHandle`], the store (which keeps the slot to wait for
//! flushes still running at exit) and the [`FlushCompleter`] owned by the
//! thread doing the work. The slot is a mutex-protected [`SlotState`] plus a
//! condition variable; the first of the completer and a store's watchdog
//! (the VeloC store fails a flush its engine stopped advancing) moves the
//! state from `InProgress` to `Done`, once, and notifies all waiters; a later
//! result is dropped. If the completer is dropped
//! without completing (the flusher thread panicked or was torn down), its
//! `Drop` stores [`FlushError::FlusherGone`], so a waiter can never hang on
//! a flush that nobody will finish.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::error::FlushError;
use crate::record::{CkptId, Rank, RegionRecord};

/// What one rank's completed flush of one checkpoint produced.
#[derive(Clone, Debug, PartialEq)]
pub struct FlushOutcome {
    /// The checkpoint.
    pub ckpt: CkptId,
    /// The rank that flushed.
    pub rank: Rank,
    /// One record per region saved in this checkpoint by this rank; give
    /// them to the head's [`CheckpointMap`](crate::CheckpointMap).
    pub records: Vec<RegionRecord>,
    /// Bytes written to the persistent directory.
    pub bytes: u64,
    /// Time from the start of the flush to its durable completion.
    pub duration: Duration,
}

/// Non-blocking view of a flush.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushStatus {
    /// Still running.
    InProgress,
    /// Durably complete: the checkpoint counts for this rank.
    Complete,
    /// Failed: the checkpoint does not count.
    Failed,
}

enum SlotState {
    InProgress,
    Done(Result<FlushOutcome, FlushError>),
    /// The result was handed to the caller.
    Taken(FlushStatus),
}

/// State shared by a handle, its store and its completer.
pub(crate) struct FlushSlot {
    state: Mutex<SlotState>,
    cv: Condvar,
}

impl FlushSlot {
    fn status(&self) -> FlushStatus {
        match &*self.state.lock() {
            SlotState::InProgress => FlushStatus::InProgress,
            SlotState::Done(Ok(_)) => FlushStatus::Complete,
            SlotState::Done(Err(_)) => FlushStatus::Failed,
            SlotState::Taken(s) => *s,
        }
    }

    /// Blocks until the flush is no longer in progress (or `deadline`).
    /// Returns whether it is done.
    pub(crate) fn wait_done(&self, deadline: Option<Instant>) -> bool {
        let mut st = self.state.lock();
        while matches!(*st, SlotState::InProgress) {
            match deadline {
                None => self.cv.wait(&mut st),
                Some(d) => {
                    if self.cv.wait_until(&mut st, d).timed_out() {
                        return !matches!(*st, SlotState::InProgress);
                    }
                }
            }
        }
        true
    }

    pub(crate) fn is_done(&self) -> bool {
        self.status() != FlushStatus::InProgress
    }

    fn take(&self) -> Option<Result<FlushOutcome, FlushError>> {
        let mut st = self.state.lock();
        match std::mem::replace(&mut *st, SlotState::InProgress) {
            SlotState::InProgress => None,
            SlotState::Done(r) => {
                let s = if r.is_ok() {
                    FlushStatus::Complete
                } else {
                    FlushStatus::Failed
                };
                *st = SlotState::Taken(s);
                Some(r)
            }
            // A handle is not Clone and take() consumes it, so a result is
            // taken at most once; keep the state if it ever happens.
            SlotState::Taken(s) => {
                *st = SlotState::Taken(s);
                None
            }
        }
    }
}

/// Creates a new in-progress flush: the handle for the caller, the
/// completer for the worker, and the slot for the store's bookkeeping.
pub(crate) fn new_flush(ckpt: CkptId) -> (FlushHandle, FlushCompleter, Arc<FlushSlot>) {
    let slot = Arc::new(FlushSlot {
        state: Mutex::new(SlotState::InProgress),
        cv: Condvar::new(),
    });
    (
        FlushHandle {
            ckpt,
            slot: slot.clone(),
        },
        FlushCompleter {
            ckpt,
            slot: Some(slot.clone()),
        },
        slot,
    )
}

/// The worker's side of a flush: completes it exactly once.
pub(crate) struct FlushCompleter {
    ckpt: CkptId,
    slot: Option<Arc<FlushSlot>>,
}

impl FlushCompleter {
    /// Stores the result and wakes every waiter (unless the slot was already failed by a
    /// watchdog: the first result stands).
    pub(crate) fn complete(mut self, r: Result<FlushOutcome, FlushError>) {
        if let Some(slot) = self.slot.take() {
            slot.finish(r);
        }
    }
}

impl FlushSlot {
    /// Ends the flush with `r` if it is still in progress; wakes every waiter. Returns
    /// whether `r` was stored.
    pub(crate) fn finish(&self, r: Result<FlushOutcome, FlushError>) -> bool {
        let mut st = self.state.lock();
        if !matches!(*st, SlotState::InProgress) {
            return false;
        }
        *st = SlotState::Done(r);
        self.cv.notify_all();
        true
    }
}

impl Drop for FlushCompleter {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            slot.finish(Err(FlushError::FlusherGone { ckpt: self.ckpt }));
        }
    }
}

/// Handle of one rank's background flush of one checkpoint.
///
/// The checkpoint counts for this rank only once the flush is
/// [`Complete`](FlushStatus::Complete). Dropping the handle does not cancel
/// the flush; the store still waits for it at exit.
#[must_use = "a checkpoint counts only once its flush is complete: wait for it or poll it"]
pub struct FlushHandle {
    ckpt: CkptId,
    slot: Arc<FlushSlot>,
}

impl std::fmt::Debug for FlushHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlushHandle")
            .field("ckpt", &self.ckpt)
            .field("status", &self.status())
            .finish()
    }
}

impl FlushHandle {
    /// The checkpoint being flushed.
    pub fn ckpt(&self) -> CkptId {
        self.ckpt
    }

    /// Non-blocking poll.
    pub fn status(&self) -> FlushStatus {
        self.slot.status()
    }

    /// Blocks until the flush is durably complete or has failed.
    pub fn wait(self) -> Result<FlushOutcome, FlushError> {
        self.slot.wait_done(None);
        self.slot
            .take()
            .unwrap_or(Err(FlushError::FlusherGone { ckpt: self.ckpt }))
    }

    /// Non-blocking: the result if the flush is finished, else the handle back.
    pub fn try_wait(self) -> Result<Result<FlushOutcome, FlushError>, FlushHandle> {
        self.wait_timeout(Duration::ZERO)
    }

    /// Waits at most `timeout`: the result if the flush finished, else the handle back.
    pub fn wait_timeout(
        self,
        timeout: Duration,
    ) -> Result<Result<FlushOutcome, FlushError>, FlushHandle> {
        if self.slot.wait_done(Some(Instant::now() + timeout)) {
            if let Some(r) = self.slot.take() {
                return Ok(r);
            }
        }
        Err(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(ckpt: CkptId) -> FlushOutcome {
        FlushOutcome {
            ckpt,
            rank: 1,
            records: vec![],
            bytes: 0,
            duration: Duration::ZERO,
        }
    }

    #[test]
    fn poll_then_wait() {
        let (h, c, slot) = new_flush(4);
        assert_eq!(h.status(), FlushStatus::InProgress);
        let h = h.try_wait().unwrap_err();
        let h = h.wait_timeout(Duration::from_millis(10)).unwrap_err();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            c.complete(Ok(outcome(4)));
        });
        let r = h.wait().unwrap();
        assert_eq!(r.ckpt, 4);
        t.join().unwrap();
        assert!(slot.is_done());
        assert_eq!(slot.status(), FlushStatus::Complete);
    }

    #[test]
    fn dropped_completer_fails_the_flush() {
        let (h, c, _) = new_flush(9);
        drop(c);
        assert_eq!(h.status(), FlushStatus::Failed);
        assert!(matches!(h.wait(), Err(FlushError::FlusherGone { ckpt: 9 })));
    }
}
