//! The worker's event loop: what ranks 1..N-1 run instead of the user's `main`.
//!
//! See `README.md` beside this file for the threading design.

mod device;
mod device_alloc;
mod exec;
mod fault;
mod images;
mod loader;
mod memory;
mod output;
pub mod same_sums;
pub mod written;

pub use device::{LocalDevice, Ran};
pub use output::{flush_stderr, write_all};

use poll_backoff::Backoff;
use crate::comm::{Comm, CommError, Fenced, Liveness, PostedRecv, CONTROL_TAG};
use crate::heap::SymmetricHeap;
use crate::protocol::{self, Envelope, Event, Reply};
use crate::HEAD;
use device::Device;
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where a worker saves checkpoint regions (implemented by the plugin over a checkpoint store,
/// so that this crate does not depend on one).
pub trait CheckpointSink: Send + Sync {
    /// Save `bytes` as region `region` of checkpoint `ckpt` (fast: scratch).
    fn save(&self, ckpt: u64, region: u64, bytes: &[u8]) -> Result<(), String>;
    /// Make checkpoint `ckpt` durable in the background, then call `done` (on any thread) with
    /// the store's records of it, serialised, or the reason it failed.
    fn flush_then(&self, ckpt: u64, done: Box<dyn FnOnce(Result<Vec<u8>, String>) + Send>);
    /// Read the region a record of this store names (as the head sent it: validate it) into
    /// `into`, checking its checksum.
    fn load(&self, record: &[u8], into: &mut [u8]) -> Result<(), String>;
}

/// Set once the head fenced a rank: the job lost a process, so `MPI_Finalize` (which waits
/// for every rank) must not be called.
static FENCED_ANY: AtomicBool = AtomicBool::new(false);

/// Has this worker been told that some rank died?
pub fn saw_failures() -> bool {
    FENCED_ANY.load(Ordering::Acquire)
}

/// Most threads a worker runs (kernels in flight plus the poller).
const MAX_THREADS: usize = 512;

/// Shared state of a worker's threads.
struct Worker {
    comm: Arc<Comm>,
    heap: SymmetricHeap,
    /// The failure detector's view, plus the ranks the head fenced (FENCE events).
    live: Arc<Fenced<Arc<dyn Liveness>>>,
    /// Device memory held and images loaded.
    dev: Device,
    /// Held by the one thread that polls for control messages: the receive of the next one,
    /// posted ahead so that it lands straight in its buffer.
    poll: Mutex<Option<PostedRecv>>,
    exit: AtomicBool,
    /// Threads not busy with an event (polling or waiting to poll).
    idle: AtomicUsize,
    threads: AtomicUsize,
    /// Events being handled off the poll lock.
    busy: AtomicUsize,
    /// Wakes the polling thread when one of them ends.
    ended: Ended,
    /// The polling thread's progress, whichever thread polls (the `watchdog` crate): running
    /// while it polls, waiting while it handles an event itself, idle while no thread polls.
    poll_beat: watchdog::Beat,
    ckpt: Option<Arc<dyn CheckpointSink>>,
    /// A signal to raise once EXIT is answered (`Event::Inject` with `at_exit`; 0: none).
    exit_signal: AtomicI32,
    /// This worker's standard output, captured to travel with EXECUTE replies.
    stdout: Option<Arc<output::Capture>>,
    stderr: Option<Arc<output::Capture>>,
    /// Dead ranks' processes on this host that the head had this worker kill (FENCE): what
    /// they left is removed as this worker ends (`process::clean_after`).
    killed: Mutex<Vec<crate::process::Victim>>,
}

/// Serve events from the head until EXIT (`Ok`) or until the head is unreachable (`Err`).
pub fn run(
    comm: Arc<Comm>,
    heap: SymmetricHeap,
    live: Arc<dyn Liveness>,
    ckpt: Option<Arc<dyn CheckpointSink>>,
) -> Result<(), CommError> {
    let rank = comm.rank();
    let live = Arc::new(Fenced::new(live, comm.size() as usize));
    let w = Arc::new(Worker {
        comm,
        heap,
        live,
        dev: Device::default(),
        poll: Mutex::new(None),
        exit: AtomicBool::new(false),
        exit_signal: AtomicI32::new(0),
        killed: Mutex::new(Vec::new()),
        idle: AtomicUsize::new(1),
        threads: AtomicUsize::new(1),
        busy: AtomicUsize::new(0),
        ended: Ended::default(),
        poll_beat: watchdog::global().beat("ompc-worker-poll", "polling for the head's events"),
        ckpt,
        stdout: match output::Capture::start(1) {
            Ok(c) => Some(c),
            Err(e) => {
                eprintln!("ompcluster worker {rank}: cannot capture stdout ({e}); region output goes straight to mpirun");
                None
            }
        },
        stderr: match output::Capture::start(2) {
            Ok(c) => Some(c),
            Err(e) => {
                eprintln!("ompcluster worker {rank}: cannot capture stderr ({e}); what regions print there goes straight to mpirun");
                None
            }
        },
    });
    // Device code's malloc and new allocate in this rank's arena (see `device_alloc.rs`).
    device_alloc::init(w.heap.range(), w.heap.arena(rank, w.comm.size()), w.dev.memory.clone());
    if let Err(e) = fault::install(w.comm.clone(), w.live.clone()) {
        eprintln!("ompcluster worker {rank}: cannot watch for crashes in device code ({e}); a crashing region ends this worker");
    }
    let result = serve(&w);
    // Cancelled while MPI is still up (its request would otherwise outlive the caller's
    // MPI_Finalize).
    drop(w.poll.lock().take());
    for c in w.stdout.iter().chain(&w.stderr) {
        c.finish();
    }
    // Wait (bounded) for the other threads to notice EXIT.
    let deadline = Instant::now() + Duration::from_secs(5);
    while w.threads.load(Ordering::Acquire) > 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    crate::process::clean_after_all(&w.killed.lock(), Duration::from_secs(1));
    result
}

fn spawn_helper(w: &Arc<Worker>) {
    if w.threads.load(Ordering::Acquire) >= MAX_THREADS {
        return;
    }
    w.threads.fetch_add(1, Ordering::AcqRel);
    w.idle.fetch_add(1, Ordering::AcqRel);
    let w2 = Arc::clone(w);
    let spawned = std::thread::Builder::new().name("ompc-worker".into()).spawn(move || {
        fault::runtime_thread();
        // A panic of ours here must not leave the event it was handling unanswered (the head
        // would wait for it while this worker looks alive): this worker stops, and the head
        // recovers from its loss. (The first worker thread's own panics are caught by the
        // plugin's boundary around the call it serves from.)
        let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| serve(&w2)));
        fault::runtime_thread_ends();
        match served {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                eprintln!("ompcluster worker {}: {e}", w2.comm.rank());
                output::flush_stderr();
                std::process::exit(3);
            }
            Err(p) => {
                let msg = p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned()).unwrap_or_default();
                eprintln!("ompcluster worker {}: internal error in a worker thread: {msg}; this worker stops", w2.comm.rank());
                output::flush_stderr();
                std::process::exit(4);
            }
        }
        w2.threads.fetch_sub(1, Ordering::AcqRel);
    });
    if spawned.is_err() {
        w.threads.fetch_sub(1, Ordering::AcqRel);
        w.idle.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How many events handled off the poll lock have ended, for the polling thread to sleep on
/// while kernels run (README.md, "Polling while a kernel runs").
#[derive(Default)]
struct Ended {
    count: Mutex<u64>,
    cv: Condvar,
}

impl Ended {
    fn count(&self) -> u64 {
        *self.count.lock()
    }

    fn one_more(&self) {
        *self.count.lock() += 1;
        self.cv.notify_one();
    }

    /// Wait at most `nap` for the count to pass `seen`; the count then, if it did.
    fn wait(&self, seen: u64, nap: Duration) -> Option<u64> {
        let mut count = self.count.lock();
        if *count == seen {
            self.cv.wait_for(&mut count, nap);
        }
        (*count != seen).then_some(*count)
    }
}

/// While a kernel of this worker runs, the polling thread sleeps between polls from this...
const NAP_MIN: Duration = Duration::from_micros(10);
/// ...doubling up to this: how late an event that arrives meanwhile can be noticed.
const NAP_MAX: Duration = Duration::from_micros(200);

/// What the leader (the thread holding `poll`) ends its turn with.
enum Turn {
    /// An event to handle after releasing `poll`.
    Handle(Envelope),
    /// EXIT arrived under this tag: answer it once the other threads are done.
    Exit(i32),
    /// Another thread saw EXIT: stop.
    Stop,
}

/// Lead: hold `poll` and take events, handling those that belong on the polling thread
/// right here, until one must be handled off the lock (or EXIT). The lock is kept across
/// the events handled here: releasing it after each one woke a parked follower, and two
/// threads then took turns polling, each turn costing futex calls and a cold cache (on
/// 2 cores, several microseconds per short event).
fn lead(w: &Arc<Worker>) -> Result<Turn, CommError> {
    use watchdog::State;
    let mut inbox = w.poll.lock();
    w.poll_beat.set(State::Running, "polling for the head's events");
    // Whichever way this turn ends, no thread polls until the next one takes the lock.
    struct NoLeader<'a>(&'a watchdog::Beat);
    impl Drop for NoLeader<'_> {
        fn drop(&mut self) {
            self.0.set(State::Idle, "no thread polls (all handle events)");
        }
    }
    let _no_leader = NoLeader(&w.poll_beat);
    // Spin, then yield for 5 ms, then sleep up to 1 ms between polls (see README.md).
    let fresh = || Backoff::new(Duration::from_millis(5), Duration::from_millis(1));
    loop {
        let mut backoff = fresh();
        let mut seen = w.ended.count();
        let mut nap = NAP_MIN;
        let mut napped = false;
        let msg = loop {
            w.poll_beat.tick();
            if w.exit.load(Ordering::Acquire) {
                return Ok(Turn::Stop);
            }
            let posted = match inbox.as_mut() {
                Some(p) => p,
                None => inbox.insert(w.comm.post_recv(HEAD, CONTROL_TAG)?),
            };
            if let Some(msg) = w.comm.test_recv(posted, w.live.as_ref())? {
                // The next event's receive, posted before this one is handled.
                *inbox = Some(w.comm.post_recv(HEAD, CONTROL_TAG)?);
                break msg;
            }
            if !backoff.spinning() && w.live.is_dead(HEAD) {
                return Err(CommError::PeerDead(HEAD));
            }
            if !backoff.spinning() && w.busy.load(Ordering::Acquire) > 0 {
                // A kernel (or transfer) of this worker runs: leave the cores to it instead
                // of yielding, until an event ends or the nap does.
                napped = true;
                if w.ended.wait(seen, nap).is_none() {
                    nap = (nap * 2).min(NAP_MAX);
                    continue;
                }
            }
            if napped {
                // An event ended: the head's next one usually follows its reply, so poll hard
                // again. (Also when no wake-up came: a handler counts itself out of `busy`
                // before it replies and wakes this thread, and a nap may end in between.)
                napped = false;
                nap = NAP_MIN;
                seen = w.ended.count();
                backoff = fresh();
                continue;
            }
            backoff.snooze();
        };
        let env: Envelope = protocol::decode(&msg).map_err(|source| CommError::Protocol { rank: HEAD, source })?;
        drop(msg);
        if let Err(e) = env.event.validate(w.heap.base(), w.heap.end()) {
            eprintln!("ompcluster worker {}: rejected event: {e}", w.comm.rank());
            w.comm.send_msg(HEAD, env.tag, &Reply::Error(e.to_string()), w.live.as_ref())?;
            continue;
        }
        // Memory-map changes are applied in arrival order, under the poll lock, so that a
        // DELETE and a later ALLOC of the same range can never be reordered.
        match &env.event {
            Event::Alloc(r) => {
                if let Err(e) = w.dev.memory.write().back(&w.heap, r.addr, r.size) {
                    eprintln!("ompcluster worker {}: {e}", w.comm.rank());
                }
            }
            Event::Delete(r) => {
                if let Err(e) = w.dev.memory.write().release(&w.heap, r.addr) {
                    eprintln!("ompcluster worker {}: {e}", w.comm.rank());
                }
            }
            Event::Reclaim(r) => device_alloc::reclaim(r.addr),
            Event::Failed { ranks } => fence(w, ranks),
            Event::Exit => {
                w.exit.store(true, Ordering::Release);
                return Ok(Turn::Exit(env.tag));
            }
            Event::Inject { signal, at_exit: true } => w.exit_signal.store(*signal, Ordering::Release),
            Event::Inject { signal, at_exit: false } => raise(*signal),
            // Handled right here, still holding `poll` (reasons in README.md):
            // - CHECKPOINT: saved before this worker looks at any later event, which is
            //   what keeps the saved copies as they were at the checkpoint;
            // - SUBMIT, RETRIEVE: the head waits on the other end right now; a hand-off
            //   would leave the transfer and a new poller competing for the cores;
            // - a short EXECUTE: a hand-off would cost more than the kernel.
            // - FENCE: its reply tells the head that this worker will not wait for the fenced
            //   ranks any more.
            Event::Checkpoint { .. }
            | Event::Submit { .. }
            | Event::Retrieve(_)
            | Event::Fence { .. }
            | Event::Execute { short: true, .. } => {
                // A kernel, a transfer: bounded elsewhere (the user's code; the detector).
                w.poll_beat.waiting("an event handled on the polling thread", || -> Result<(), CommError> {
                    if let Some(r) = handle(w, &env)? {
                        w.comm.send_msg(HEAD, env.tag, &r, w.live.as_ref())?;
                    }
                    Ok(())
                })?;
            }
            _ => {
                w.busy.fetch_add(1, Ordering::AcqRel);
                if w.idle.fetch_sub(1, Ordering::AcqRel) == 1 {
                    // Nobody is left to poll while this thread is busy: add a thread.
                    spawn_helper(w);
                }
                return Ok(Turn::Handle(env));
            }
        }
    }
}

/// One thread's loop: lead until an event must be handled off the lock, hand the lock on,
/// handle it, and queue up to lead again.
fn serve(w: &Arc<Worker>) -> Result<(), CommError> {
    loop {
        let env = match lead(w)? {
            Turn::Handle(env) => env,
            Turn::Stop => return Ok(()),
            Turn::Exit(tag) => {
                wait_idle(w, 0);
                w.comm.send_msg(HEAD, tag, &Reply::Ok, w.live.as_ref())?;
                match w.exit_signal.load(Ordering::Acquire) {
                    0 => {}
                    signal => raise(signal),
                }
                return Ok(());
            }
        };
        let reply = handle(w, &env);
        w.busy.fetch_sub(1, Ordering::AcqRel);
        w.idle.fetch_add(1, Ordering::AcqRel);
        match reply {
            Ok(Some(r)) => w.comm.send_msg(HEAD, env.tag, &r, w.live.as_ref())?,
            Ok(None) => {}
            Err(CommError::PeerDead(peer)) if peer != HEAD => {
                // A peer of an exchange died: tell the head, which recovers.
                w.comm.send_msg(HEAD, env.tag, &Reply::PeerDead(peer), w.live.as_ref())?
            }
            Err(e) => return Err(e),
        }
        w.ended.one_more();
    }
}

/// Raise `signal` (validated: SIGKILL or SIGSTOP) on this process, as a test asked
/// (`Event::Inject`).
fn raise(signal: i32) {
    // SAFETY: flushing C streams, then raising a signal on this process.
    unsafe {
        libc::fflush(std::ptr::null_mut());
        libc::raise(signal);
    }
}

/// Wait until at most `others` events are being handled off the poll lock.
fn wait_idle(w: &Worker, others: usize) {
    let mut backoff = Backoff::for_wait();
    while w.busy.load(Ordering::Acquire) > others {
        backoff.snooze();
    }
}

/// Handle one event off the poll lock. `Ok(None)` means the reply was already sent.
fn handle(w: &Worker, env: &Envelope) -> Result<Option<Reply>, CommError> {
    let live = w.live.as_ref();
    let resolve = |addr: u64, size: u64| w.dev.memory.read().resolve(addr, size);
    Ok(Some(match &env.event {
        Event::LoadBinary { image, size, base, extent, kernels } => {
            let mut bytes = vec![0u8; *size as usize];
            // SAFETY: `bytes` is a private buffer of exactly `size` bytes.
            unsafe { w.comm.recv_bytes(HEAD, env.tag, bytes.as_mut_ptr(), bytes.len(), live)? };
            match w.dev.load(&w.heap, *image, &bytes, *base, *extent, kernels) {
                Ok(()) => Reply::Ok,
                Err(e) => Reply::Error(e),
            }
        }
        // Small regions' bytes came with the event (validated: all of them), larger ones follow.
        Event::Submit { region: r, bytes } => match resolve(r.addr, r.size) {
            // SAFETY (both arms): `p` points to `r.size` bytes this worker holds; the head does
            // not run a kernel on a buffer while it is being submitted.
            Ok(p) if r.size <= protocol::MAX_INLINE_DATA => {
                unsafe { w.dev.write((w.heap.base(), w.heap.end()), r.addr, p, bytes) };
                Reply::Ok
            }
            Ok(p) => {
                unsafe { recv_into(w, HEAD, env.tag, r, p, false)? };
                Reply::Ok
            }
            Err(e) => {
                if r.size > protocol::MAX_INLINE_DATA {
                    // Drain the data so the tag is clean, then report.
                    drain(w, HEAD, env.tag, r.size)?;
                }
                Reply::Error(e)
            }
        },
        Event::Retrieve(r) => match resolve(r.addr, r.size) {
            Ok(p) if r.size <= protocol::MAX_INLINE_DATA => {
                // SAFETY: `p` points to `r.size` held bytes.
                Reply::Data(unsafe { std::slice::from_raw_parts(p, r.size as usize) }.to_vec())
            }
            Ok(p) => {
                w.comm.send_msg(HEAD, env.tag, &Reply::Ok, live)?;
                // SAFETY: `p` points to `r.size` held bytes, valid for the life of the buffer.
                unsafe { w.comm.send_bytes(HEAD, env.tag, p, r.size as usize, live)? };
                return Ok(None);
            }
            Err(e) => Reply::Error(e),
        },
        // An exchange moves its bytes whatever either side answers, so that neither is left
        // waiting on the other: a source that cannot send its copy sends zeros (the head
        // forgets what the destination got), a destination that cannot take them drains them.
        Event::ExchangeSend { region: r, peer } => match resolve(r.addr, r.size) {
            Ok(p) => {
                // SAFETY: as for Retrieve.
                unsafe { w.comm.send_bytes(*peer, env.tag, p, r.size as usize, live)? };
                Reply::Ok
            }
            Err(e) => {
                let zeros = vec![0u8; r.size as usize];
                // SAFETY: a private buffer of the right size, leaked if MPI may still read it.
                if let Err(dead) = unsafe { w.comm.send_bytes(*peer, env.tag, zeros.as_ptr(), zeros.len(), live) } {
                    std::mem::forget(zeros);
                    return Err(dead);
                }
                Reply::Error(e)
            }
        },
        Event::ExchangeRecv { region: r, peer, staged } => match resolve(r.addr, r.size) {
            Ok(p) => {
                // SAFETY: as for Submit.
                unsafe { recv_into(w, *peer, env.tag, r, p, *staged)? };
                Reply::Ok
            }
            Err(e) => {
                drain(w, *peer, env.tag, r.size)?;
                Reply::Error(e)
            }
        },
        Event::Copy { src, dst, size } => match (resolve(*src, *size), resolve(*dst, *size)) {
            (Ok(s), Ok(d)) => {
                // SAFETY: both ranges are held; `copy` allows overlap.
                unsafe { std::ptr::copy(s, d, *size as usize) };
                Reply::Ok
            }
            (Err(e), _) | (_, Err(e)) => Reply::Error(e),
        },
        Event::Execute { image, kernel, args, regions, assume_written, replay, send_back, streams, digest, flip, arena, .. } => {
            // The head's standard streams, passed by value, become this process's.
            let own;
            let args = if streams.is_empty() {
                args
            } else {
                let mut a = args.clone();
                for &(i, s) in streams {
                    a[i as usize] = s.here();
                }
                own = a;
                &own
            };
            let checks = device::Checks { digest: *digest, flip: *flip, arena: *arena };
            let (reply, back) = execute(w, env.tag, *image, *kernel, args, regions, assume_written, replay, send_back, checks);
            if back.is_empty() {
                reply
            } else {
                w.comm.send_msg(HEAD, env.tag, &reply, live)?;
                for bytes in back {
                    // SAFETY: `bytes` is a local vector, readable until the send completes;
                    // leaked if the head died (MPI may still read it).
                    let sent = unsafe { w.comm.send_bytes(HEAD, env.tag, bytes.as_ptr(), bytes.len(), live) };
                    if let Err(e) = sent {
                        std::mem::forget(bytes);
                        return Err(e);
                    }
                }
                return Ok(None);
            }
        }
        Event::Checkpoint { ckpt, regions } => match &w.ckpt {
            None => Reply::Error("checkpoints are not enabled on this worker".into()),
            Some(sink) => {
                for (id, r) in regions {
                    let saved = resolve(r.addr, r.size).and_then(|p| {
                        // SAFETY: `p` points to `r.size` bytes this worker holds. This runs on
                        // the polling thread (see `serve`) and the head started no kernel
                        // before it: only events after this one could change or free them.
                        let bytes = unsafe { std::slice::from_raw_parts(p, r.size as usize) };
                        sink.save(*ckpt, *id, bytes)
                    });
                    if let Err(e) = saved {
                        return Ok(Some(Reply::Error(format!("checkpoint {ckpt}, region {id}: {e}"))));
                    }
                }
                // Saved: answer now, then flush; the second answer follows on the same tag.
                w.comm.send_msg(HEAD, env.tag, &Reply::Ok, live)?;
                let (comm, live, tag, ckpt) = (w.comm.clone(), w.live.clone(), env.tag, *ckpt);
                let answer = move |res: Result<Vec<u8>, String>| {
                    let reply = match res {
                        Ok(records) => Reply::Flushed(records),
                        Err(e) => Reply::Error(format!("flush of checkpoint {ckpt}: {e}")),
                    };
                    if let Err(e) = comm.send_msg(HEAD, tag, &reply, live.as_ref()) {
                        eprintln!("ompcluster worker {}: checkpoint {ckpt}: {e}", comm.rank());
                    }
                };
                sink.flush_then(ckpt, Box::new(answer));
                return Ok(None);
            }
        },
        Event::Restore { region: r, record } => match (&w.ckpt, resolve(r.addr, r.size)) {
            (None, _) => Reply::Error("checkpoints are not enabled on this worker".into()),
            (_, Err(e)) => Reply::Error(e),
            (Some(sink), Ok(p)) if !w.dev.memory.read().needs_care(r.addr, r.size) => {
                // SAFETY: `p` points to `r.size` bytes this worker holds; the head sends no
                // other event touching this buffer before the reply (it installs the version
                // only then), so nothing else reads or writes them meanwhile.
                let into = unsafe { std::slice::from_raw_parts_mut(p, r.size as usize) };
                match sink.load(record, into) {
                    Ok(()) => Reply::Ok,
                    Err(e) => Reply::Error(e),
                }
            }
            (Some(sink), Ok(p)) => {
                // As SUBMIT writes such a range (see `recv_into`): through a private copy.
                let mut bytes = vec![0u8; r.size as usize];
                match sink.load(record, &mut bytes) {
                    Ok(()) => {
                        // SAFETY: as above; `bytes` is a separate allocation of `r.size`.
                        unsafe { w.dev.write((w.heap.base(), w.heap.end()), r.addr, p, &bytes) };
                        Reply::Ok
                    }
                    Err(e) => Reply::Error(e),
                }
            }
        },
        Event::Sync => {
            wait_idle(w, 1);
            Reply::Ok
        }
        Event::Fence { ranks, kill } => {
            fence(w, ranks);
            for &v in kill {
                crate::process::kill(v);
            }
            w.killed.lock().extend(kill);
            Reply::Ok
        }
        Event::Alloc(_) | Event::Delete(_) | Event::Reclaim(_) | Event::Failed { .. } | Event::Exit | Event::Inject { .. } => {
            unreachable!("handled inline")
        }
    }))
}

/// Stop waiting for `ranks` (FENCE, FAILED); if this rank is among them, leave.
fn fence(w: &Worker, ranks: &[i32]) {
    if ranks.contains(&w.comm.rank()) {
        // This rank was declared dead while it was not responding (frozen): the job went on
        // without it. Leave now, before doing anything else.
        eprintln!("ompcluster worker {}: this rank was declared dead; leaving", w.comm.rank());
        output::flush_stderr();
        // SAFETY: flushing C streams, then leaving at once without destructors (they belong
        // to a `main` this rank never ran) or MPI.
        unsafe {
            libc::fflush(std::ptr::null_mut());
            libc::_exit(0)
        }
    }
    FENCED_ANY.store(true, Ordering::Release);
    for &r in ranks {
        w.live.fence(r);
    }
}

/// Receive the bytes of device range `r` (held here at `p`) from rank `from`. Into an image's
/// data they go through a private buffer first, and only the pieces that are the program's
/// data are written ([`Memory::pieces_to_write`]): the words holding this process's library
/// addresses and the OpenMP runtime's lock words stay as they are, never holding another
/// rank's values, not even briefly (the image's code may be running meanwhile). `staged`:
/// through a private buffer too, so that the copy is untouched unless every byte arrived.
///
/// # Safety
/// `p` must point to the `r.size` writable bytes of `r`, held by this worker.
unsafe fn recv_into(w: &Worker, from: i32, tag: i32, r: &protocol::Region, p: *mut u8, staged: bool) -> Result<(), CommError> {
    let live = w.live.as_ref();
    let care = w.dev.memory.read().needs_care(r.addr, r.size);
    if !care && !staged {
        // SAFETY: forwarded contract.
        return unsafe { w.comm.recv_bytes(from, tag, p, r.size as usize, live) };
    }
    let mut bytes = vec![0u8; r.size as usize];
    // SAFETY: private buffer of the right size.
    if let Err(e) = unsafe { w.comm.recv_bytes(from, tag, bytes.as_mut_ptr(), bytes.len(), live) } {
        // A receive given up on a dead peer may still be written to (`Comm::recv_bytes`).
        std::mem::forget(bytes);
        return Err(e);
    }
    if care {
        // SAFETY: forwarded contract.
        unsafe { w.dev.write((w.heap.base(), w.heap.end()), r.addr, p, &bytes) };
    } else {
        // SAFETY: `p` has `r.size` writable bytes (the contract); `bytes` is a private buffer
        // of that size, so the ranges do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len()) };
    }
    Ok(())
}

/// Receive `size` bytes from `from` on `tag` and throw them away (a transfer this worker
/// cannot take, so that its sender is not left waiting).
fn drain(w: &Worker, from: i32, tag: i32, size: u64) -> Result<(), CommError> {
    let mut sink = vec![0u8; size as usize];
    // SAFETY: a private buffer of the right size, leaked if MPI may still write it.
    if let Err(dead) = unsafe { w.comm.recv_bytes(from, tag, sink.as_mut_ptr(), sink.len(), w.live.as_ref()) } {
        std::mem::forget(sink);
        return Err(dead);
    }
    Ok(())
}

/// Run a kernel; returns the reply and the contents of the regions it lists as `returned`
/// (to send behind it).
#[allow(clippy::too_many_arguments)]
fn execute(
    w: &Worker,
    tag: i32,
    image: u32,
    kernel: u32,
    args: &[u64],
    regions: &[protocol::Region],
    assume_written: &[bool],
    replay: &[protocol::Region],
    send_back: &[bool],
    checks: device::Checks,
) -> (Reply, Vec<Vec<u8>>) {
    let ptrs = {
        let mem = w.dev.memory.read();
        match regions.iter().map(|r| mem.resolve(r.addr, r.size)).collect::<Result<Vec<_>, _>>() {
            Ok(p) => p,
            Err(e) => return (Reply::Error(e), Vec::new()),
        }
    };
    // What the kernel prints on stderr waits for its reply (taken below, before this ends).
    let _printing = w.stderr.as_ref().map(|c| c.region());
    let ran = {
        // A crash in the kernel is reported as the region's (see `fault.rs`).
        let _in_kernel = fault::InKernel::enter(tag);
        // SAFETY: every pointer was resolved to a held range of the stated size, and the head
        // keeps these buffers allocated while the kernel runs; libomptarget generated the
        // argument list for exactly this kernel.
        unsafe { w.dev.execute((w.heap.base(), w.heap.end()), image, kernel, args, regions, &ptrs, assume_written, replay, checks) }
    };
    match ran {
        Ok(ran) => {
            // A kernel whose image takes nothing able to print from outside printed nothing:
            // collecting output costs a system call or two per region.
            let output = w.stdout.as_ref().filter(|_| w.dev.may_print(image)).map(|c| c.take()).unwrap_or_default();
            let errors = w.stderr.as_ref().filter(|_| w.dev.may_print(image)).map(|c| c.take()).unwrap_or_default();
            // Copied now, before another kernel sharing this copy may change it.
            let returned: Vec<u32> = (0..regions.len())
                .filter(|&i| send_back[i] && ran.changed[i] && regions[i].size <= protocol::MAX_SEND_BACK)
                .map(|i| i as u32)
                .collect();
            let back = returned
                .iter()
                .map(|&i| {
                    let i = i as usize;
                    // SAFETY: `ptrs[i]` was resolved to a held range of `regions[i].size`
                    // bytes, which the head keeps allocated until this EXECUTE is answered.
                    unsafe { std::slice::from_raw_parts(ptrs[i], regions[i].size as usize) }.to_vec()
                })
                .collect();
            let reply = Reply::Executed {
                changed: ran.changed,
                pointers: ran.pointers,
                seconds: ran.seconds,
                patches: ran.patches,
                output,
                errors,
                allocated: ran.allocated,
                freed: ran.freed,
                returned,
                digests: ran.digests,
            };
            (reply, back)
        }
        Err(e) => (Reply::Error(e), Vec::new()),
    }
}
