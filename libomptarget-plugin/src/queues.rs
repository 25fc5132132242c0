//! Queues of asynchronous operations: what a `__tgt_async_info` stands for, so that a `nowait`
//! region holds no host thread while it runs.
//!
//! libomptarget 16 gives every construct a `__tgt_async_info` (one `void *Queue`) and calls
//! the plugin's `_async` operations on it in program order: submits, `launch_kernel`, then
//! retrieves. For a `nowait` region it keeps that info in the libomp task and asks
//! `query_async` until the queue is done, then finishes the region (reference counts, device
//! frees) and releases its dependants (`docs/nowait-regions.md`). So:
//! - `launch_kernel` of a region with `nowait` creates a [`Queue`], puts the launch on it and
//!   returns: the `Queue` pointer holds one reference ([`Queue::into_raw`]).
//! - Later operations on that info (its `from` retrieves) go on the same queue, behind the
//!   launch, and run in order. Operations on an info with no queue (every synchronous
//!   construct, and a `nowait` region's submits before its launch) run at once, on the
//!   caller's thread, as they always did.
//! - `query_async` answers within [`QUERY_NAP`]; `synchronize` waits. Both clear the
//!   pointer when the queue is done; by then every retrieve has written host memory.
//!
//! A queue's operations run on a **region thread** ([`Pool`]): one thread runs a queue from its
//! first operation until it is empty, as a synchronous region ran on the task's thread before.
//! Everything a launch does (placement, the failure detector's bounded waits, recovery when a
//! worker dies, a run again) is unchanged; only the thread differs. A failed operation (an
//! error that ends the region, never a recovered fault) is printed, skips the rest of its
//! queue, and makes the query return an error, as the synchronous call returned one.
//!
//! Concurrency (design note): a [`Queue`] is one mutex over its operations and its [`Stage`],
//! and one condition variable for `synchronize`; the lock is held only to push, pop and read
//! the stage, never across an operation. `query_async` never waits for its region: it may nap
//! up to [`QUERY_NAP`] on [`ENDED`], a count of queues ended (its own mutex and condition
//! variable, taken after a queue's lock is released), so that libomp's hidden helpers, which
//! re-run pending target tasks in a loop, do not spin (see [`Queue::query`]). Calls on one info
//! come one at a time (libomptarget's contract) but from any thread; different queues are
//! independent. The pool's threads block on a channel between queues (no polling); there are
//! at most [`threads_for`] the workers, started when a queue finds none idle and kept
//! afterwards. More queues than that wait in the channel, which cannot deadlock: a launch only
//! ever waits for regions already placed, and those hold threads.
//!
//! A region whose kernel's last run was short (under 1 ms) runs on the launching thread even
//! with `nowait` (`Cluster::expect_short`): it would hold that thread only briefly, and handing
//! it over cost more than it ran.

use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// One operation of a queue, run on a region thread; `Err` is the line to print.
pub(crate) type Op = Box<dyn FnOnce() -> Result<(), String> + Send>;

/// Where a queue is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Every operation pushed so far has run, all of them well.
    Done,
    /// A region thread has it (or it waits for one in the pool's channel).
    Running,
    /// An operation failed; nothing after it ran.
    Failed,
}

struct Inner {
    ops: VecDeque<Op>,
    stage: Stage,
}

/// The operations of one `__tgt_async_info`, run in order.
pub(crate) struct Queue {
    inner: Mutex<Inner>,
    ended: Condvar,
}

/// What a query found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Progress {
    Pending,
    Done,
    Failed,
}

impl Queue {
    /// A new queue holding `op`, already handed to a region thread.
    pub(crate) fn start(op: Op) -> Arc<Queue> {
        let q = Arc::new(Queue { inner: Mutex::new(Inner { ops: VecDeque::new(), stage: Stage::Done }), ended: Condvar::new() });
        q.push(op);
        q
    }

    /// Put `op` behind the queue's other operations (it runs after them).
    pub(crate) fn push(self: &Arc<Self>, op: Op) {
        let mut inner = self.inner.lock();
        match inner.stage {
            // After a failure nothing more runs: libomptarget ends the program at its query.
            Stage::Failed => {}
            Stage::Running => inner.ops.push_back(op),
            Stage::Done => {
                inner.ops.push_back(op);
                inner.stage = Stage::Running;
                drop(inner);
                pool().run(self.clone());
            }
        }
    }

    /// Whether everything pushed so far has run; never waits.
    pub(crate) fn progress(&self) -> Progress {
        match self.inner.lock().stage {
            Stage::Running => Progress::Pending,
            Stage::Done => Progress::Done,
            Stage::Failed => Progress::Failed,
        }
    }

    /// [`Queue::progress`] for libomp's re-runs of a pending target task. libomp's hidden
    /// helpers call the query again at once, in a loop, while any region is pending
    /// (docs/nowait-regions.md, §3), and took the cores the workers on the same node needed
    /// (a blocked matmul on 3 workers: 1.07-1.13 times the build before with the nap below,
    /// 1.15-1.17 without).
    /// So a query of a pending queue first waits until some queue ends, at most
    /// [`QUERY_NAP`], unless one ended within the last [`QUERY_NAP`], and unless
    /// [`most_nappers`] threads nap already. The threads that do not nap go round libomp's
    /// task queues at full speed and steal from the others: libomp re-queues a task at the
    /// tail of the next thread's queue and each thread takes from its own tail, so a task at a
    /// queue's head waits while its owner naps on the others (16 chains of dependent regions
    /// ran 11.5 at once with every helper napping, 13.2 with two never napping).
    pub(crate) fn query(&self) -> Progress {
        let seen = ENDED.generation();
        let p = self.progress();
        if p != Progress::Pending || ENDED.recent(QUERY_NAP) {
            return p;
        }
        if NAPPING.fetch_add(1, Ordering::Relaxed) >= most_nappers() {
            NAPPING.fetch_sub(1, Ordering::Relaxed);
            return p;
        }
        ENDED.wait_past(seen, QUERY_NAP);
        NAPPING.fetch_sub(1, Ordering::Relaxed);
        self.progress()
    }

    /// Wait until everything pushed so far has run. Bounded as the operations are: each of
    /// their waits is bounded by the failure detector.
    pub(crate) fn wait(&self) -> Progress {
        let mut inner = self.inner.lock();
        while inner.stage == Stage::Running {
            self.ended.wait(&mut inner);
        }
        if inner.stage == Stage::Done {
            Progress::Done
        } else {
            Progress::Failed
        }
    }

    /// Run the queue's operations until it is empty (on a region thread).
    fn drain(&self) {
        loop {
            let op = {
                let mut inner = self.inner.lock();
                match inner.ops.pop_front() {
                    Some(op) => op,
                    None => {
                        if inner.stage == Stage::Running {
                            inner.stage = Stage::Done;
                        }
                        self.ended.notify_all();
                        drop(inner);
                        ENDED.pulse();
                        return;
                    }
                }
            };
            if let Err(line) = op() {
                eprintln!("ompcluster: {line}");
                let mut inner = self.inner.lock();
                inner.stage = Stage::Failed;
                inner.ops.clear();
                self.ended.notify_all();
                drop(inner);
                ENDED.pulse();
                return;
            }
        }
    }

    /// The pointer libomptarget keeps in `__tgt_async_info::Queue`: one reference to `q`.
    pub(crate) fn into_raw(q: Arc<Queue>) -> *mut std::ffi::c_void {
        Arc::into_raw(q) as *mut std::ffi::c_void
    }

    /// The queue behind a pointer made by [`Queue::into_raw`], without taking its reference.
    ///
    /// # Safety
    /// `p` was made by [`Queue::into_raw`] and not yet given to [`Queue::release`].
    pub(crate) unsafe fn borrow(p: *mut std::ffi::c_void) -> Arc<Queue> {
        let p = p as *const Queue;
        // SAFETY: `p` holds a live reference (the caller's contract), so the count is at least
        // one while we add ours.
        unsafe {
            Arc::increment_strong_count(p);
            Arc::from_raw(p)
        }
    }

    /// Give back the reference a pointer made by [`Queue::into_raw`] held.
    ///
    /// # Safety
    /// As for [`Queue::borrow`]; `p` is not used afterwards.
    pub(crate) unsafe fn release(p: *mut std::ffi::c_void) {
        // SAFETY: the caller's contract: `p` holds one reference, given back once.
        drop(unsafe { Arc::from_raw(p as *const Queue) });
    }
}

/// Longest a query of a pending queue waits for some queue to end.
const QUERY_NAP: std::time::Duration = std::time::Duration::from_millis(1);

/// Queries napping now (see [`Queue::query`]).
static NAPPING: AtomicUsize = AtomicUsize::new(0);

/// Most queries napping at once: all of libomp's task-running hidden helpers but two (5 of
/// 7 by default), at least 1.
fn most_nappers() -> usize {
    static MOST: OnceLock<usize> = OnceLock::new();
    *MOST.get_or_init(|| crate::helpers::task_helpers().map_or(1, |n| (n - 2).max(1) as usize))
}

/// Queues ending, as a count that queries wait to see move, and when the last one ended.
struct Pulse {
    generation: Mutex<u64>,
    moved: Condvar,
    /// When a queue last ended, in nanoseconds since [`epoch`].
    last_ns: AtomicU64,
}

static ENDED: Pulse = Pulse { generation: Mutex::new(0), moved: Condvar::new(), last_ns: AtomicU64::new(0) };

/// The clock of [`Pulse::last_ns`].
fn since_epoch() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

impl Pulse {
    fn generation(&self) -> u64 {
        *self.generation.lock()
    }

    fn pulse(&self) {
        self.last_ns.store(since_epoch(), Ordering::Relaxed);
        *self.generation.lock() += 1;
        self.moved.notify_all();
    }

    /// Did a queue end within the last `within`?
    fn recent(&self, within: std::time::Duration) -> bool {
        since_epoch().saturating_sub(self.last_ns.load(Ordering::Relaxed)) < within.as_nanos() as u64
    }

    /// Wait until the count is past `seen`, at most `most`.
    fn wait_past(&self, seen: u64, most: std::time::Duration) {
        let mut g = self.generation.lock();
        if *g == seen {
            let _ = self.moved.wait_for(&mut g, most);
        }
    }
}

/// The region threads.
pub(crate) struct Pool {
    tx: Sender<Arc<Queue>>,
    rx: Receiver<Arc<Queue>>,
    state: Mutex<PoolState>,
    /// Signalled when a queue has been drained ([`Pool::wait_idle`]).
    drained: Condvar,
    cap: usize,
}

#[derive(Default)]
struct PoolState {
    threads: usize,
    /// Queues sent and not yet drained (in the channel or on a thread). While this is at most
    /// `threads`, every queue in the channel has a thread blocked on it.
    pending: usize,
}

/// Region threads' stacks: the launch path, recovery included, needs far less.
const STACK: usize = 1 << 20;

/// What an idle region thread and a busy one do, for the watchdog.
const WAITING_FOR_A_REGION: &str = "waiting for a region to run";
const RUNNING_A_REGION: &str = "a region's offloading operations";

impl Pool {
    fn new(cap: usize) -> Pool {
        let (tx, rx) = crossbeam_channel::unbounded();
        Pool { tx, rx, state: Mutex::new(PoolState::default()), drained: Condvar::new(), cap: cap.max(1) }
    }

    /// Hand `q` to an idle region thread, a new one, or (all `cap` busy) the first to be free.
    fn run(&'static self, q: Arc<Queue>) {
        let mut st = self.state.lock();
        st.pending += 1;
        if st.pending > st.threads && st.threads < self.cap {
            let spawned = std::thread::Builder::new().name("ompc-region".into()).stack_size(STACK).spawn(move || self.serve());
            match spawned {
                Ok(_) => st.threads += 1,
                // The queue waits for a busy thread (there is one: `pending` > 1).
                Err(e) if st.threads > 0 => eprintln!("ompcluster: cannot start another region thread ({e}); regions wait for one"),
                Err(e) => crate::runtime::internal_error(format_args!("cannot start a region thread: {e}")),
            }
        }
        let _ = self.tx.send(q);
    }

    /// A region thread. Its beat is its own (`watchdog::Beat::own`): every wait of a region on
    /// something bounded elsewhere (a worker, other regions, a recovery, the gate, a kernel on
    /// the head) marks it waiting where it waits; the rest of an operation must keep moving.
    fn serve(&self) {
        let beat = watchdog::global().beat("ompc-region", WAITING_FOR_A_REGION);
        beat.set(watchdog::State::Idle, WAITING_FOR_A_REGION);
        beat.own();
        while let Ok(q) = self.rx.recv() {
            beat.set(watchdog::State::Running, RUNNING_A_REGION);
            q.drain();
            drop(q);
            self.state.lock().pending -= 1;
            self.drained.notify_all();
            beat.set(watchdog::State::Idle, WAITING_FOR_A_REGION);
        }
    }

    /// Wait until no queue is running or waiting (before the workers are stopped). Bounded as
    /// the queues' operations are.
    pub(crate) fn wait_idle(&self) {
        let mut st = self.state.lock();
        while st.pending > 0 {
            self.drained.wait(&mut st);
        }
    }
}

/// The process's region threads, at most [`threads_for`] the job's workers.
pub(crate) fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let workers = match crate::runtime::get() {
            Some(crate::runtime::Runtime::Head(c)) => c.worker_count(),
            _ => 1,
        };
        Pool::new(threads_for(workers))
    })
}

/// Region threads for a job with `workers` workers: 16 regions in flight per worker (a worker
/// runs kernels side by side), and at least 64.
pub(crate) fn threads_for(workers: usize) -> usize {
    (16 * workers).max(64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn operations_run_in_order_off_the_caller_and_the_query_never_waits() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (go_tx, go_rx) = crossbeam_channel::bounded::<()>(0);
        let s = seen.clone();
        let q = Queue::start(Box::new(move || {
            go_rx.recv().unwrap();
            s.lock().push(1);
            Ok(())
        }));
        let s = seen.clone();
        q.push(Box::new(move || {
            s.lock().push(2);
            Ok(())
        }));
        assert_eq!(q.progress(), Progress::Pending, "the first operation is blocked");
        go_tx.send(()).unwrap();
        assert_eq!(q.wait(), Progress::Done);
        assert_eq!(*seen.lock(), vec![1, 2]);
        // A queue done can take more.
        let s = seen.clone();
        q.push(Box::new(move || {
            s.lock().push(3);
            Ok(())
        }));
        assert_eq!(q.wait(), Progress::Done);
        assert_eq!(*seen.lock(), vec![1, 2, 3]);
    }

    #[test]
    fn a_failure_skips_the_rest_and_is_reported() {
        let ran = Arc::new(AtomicUsize::new(0));
        let q = Queue::start(Box::new(|| Err("test: the kernel failed".into())));
        let r = ran.clone();
        q.push(Box::new(move || {
            r.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }));
        assert_eq!(q.wait(), Progress::Failed);
        assert_eq!(q.progress(), Progress::Failed);
        assert_eq!(ran.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn queues_run_side_by_side_up_to_the_cap_and_the_rest_wait() {
        // Its own pool (the process's is sized by the job).
        let pool: &'static Pool = Box::leak(Box::new(Pool::new(4)));
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let queues: Vec<Arc<Queue>> = (0..8)
            .map(|_| {
                let q = Arc::new(Queue { inner: Mutex::new(Inner { ops: VecDeque::new(), stage: Stage::Running }), ended: Condvar::new() });
                let (r, m) = (running.clone(), most.clone());
                q.inner.lock().ops.push_back(Box::new(move || {
                    let now = r.fetch_add(1, Ordering::SeqCst) + 1;
                    m.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(50));
                    r.fetch_sub(1, Ordering::SeqCst);
                    Ok(())
                }));
                pool.run(q.clone());
                q
            })
            .collect();
        for q in &queues {
            assert_eq!(q.wait(), Progress::Done);
        }
        pool.wait_idle();
        assert_eq!(most.load(Ordering::SeqCst), 4, "four threads, eight queues of 50 ms");
        assert_eq!(pool.state.lock().threads, 4);
    }
}

