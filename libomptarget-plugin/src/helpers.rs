//! Waking libomp's sleeping hidden helper threads, so that ready `nowait` regions run at once.
//!
//! libomp 16 runs `target nowait` tasks on its hidden helper threads (8 by default, of which
//! the first, the helper team's main thread, runs none). A task
//! whose dependences a helper thread releases goes on that helper's own queue, and nothing
//! wakes the other helpers: they sleep on a semaphore that only a push from a thread outside
//! the helpers posts (libomp's `__kmp_push_task`; a helper sleeps as soon as no hidden helper
//! task is waiting anywhere). So once the program has created its tasks, a graph of dependent
//! regions runs on one helper thread, one region at a time, and the placement sees one region
//! in flight and keeps everything on the worker that holds the data (the Cholesky example ran
//! all its 2,024 regions on one worker in one run of three, taking 1.7 times as long).
//!
//! The waker is a thread of ours, outside the helpers. When a region starts on a helper thread
//! while fewer regions are in flight than there are workers to run them, it pushes an empty
//! hidden helper task (through libomp's exported `__kmpc_omp_target_task_alloc` and
//! `__kmpc_omp_task`, as compiled code does), which posts the semaphore: one sleeping helper
//! wakes, runs the empty task and then takes a ready task from the busy helper's queue if
//! there is one, whose region start wakes the next. With nothing ready, it sleeps again.
//!
//! Which threads are helpers: libomp 16 gives them the global thread ids 1 to 8, or 1 to N + 1
//! with `LIBOMP_NUM_HIDDEN_HELPER_THREADS=N` (N at most 16; the extra one is the helper team's
//! main thread). A libomp that builds the helper team from pooled threads with other ids
//! (llvm-project issue 87117, fixed in 19) leaves those helpers unrecognised: the waker then
//! wakes less, never wrongly.
//!
//! Concurrency: [`Waker::nudge`] is called by offloading threads; requests coalesce in a
//! channel of one slot, and the waker thread serves them one at a time, so a burst of region
//! starts costs one wake-up. The thread blocks on the channel between requests; once the
//! plugin shuts down ([`Waker::stop`]) it pushes nothing more (libomp tears its helpers down
//! at exit), and it is left blocked (it holds nothing).

use crossbeam_channel::{Receiver, Sender, TrySendError};
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// libomp's source location (`ident_t`); libomp reads only its flags and, for traces, its
/// string.
#[repr(C)]
struct Ident {
    reserved_1: i32,
    flags: i32,
    reserved_2: i32,
    reserved_3: i32,
    psource: *const c_char,
}

// SAFETY: `Ident` is immutable and its pointer refers to a static string: sharing it between
// threads is sound.
unsafe impl Sync for Ident {}

/// `KMP_IDENT_KMPC`: the location comes from a `__kmpc_*` call.
const IDENT_KMPC: i32 = 2;
static LOCATION: Ident = Ident {
    reserved_1: 0,
    flags: IDENT_KMPC,
    reserved_2: 0,
    reserved_3: 0,
    psource: c";unknown;ompcluster-waker;0;0;;".as_ptr(),
};

/// libomp's `kmp_task_t`: what `__kmpc_omp_target_task_alloc` lays out and the task's routine
/// receives (shareds, routine, part id, two words of compiler data).
const KMP_TASK_SIZE: usize = 40;
/// A tied task (libomp makes target tasks untied and, with hidden helpers on, hidden helper
/// tasks itself).
const TASK_TIED: i32 = 1;

type GlobalThreadNum = unsafe extern "C" fn(*const Ident) -> i32;
type TaskRoutine = unsafe extern "C" fn(i32, *mut c_void) -> i32;
type TargetTaskAlloc = unsafe extern "C" fn(*const Ident, i32, i32, usize, usize, TaskRoutine, i64) -> *mut c_void;
type Task = unsafe extern "C" fn(*const Ident, i32, *mut c_void) -> i32;

/// The libomp entry points the waker uses, looked up in the process.
#[derive(Clone, Copy)]
struct Libomp {
    thread_num: GlobalThreadNum,
    alloc: TargetTaskAlloc,
    task: Task,
}

impl Libomp {
    fn find() -> Option<Libomp> {
        fn sym(name: &CStr) -> Option<*mut c_void> {
            // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only looks a symbol up.
            let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
            (!p.is_null()).then_some(p)
        }
        let (n, a, t) = (sym(c"__kmpc_global_thread_num")?, sym(c"__kmpc_omp_target_task_alloc")?, sym(c"__kmpc_omp_task")?);
        // SAFETY: these are libomp's exported functions, with these C signatures in libomp 16
        // (kmp.h), the ones clang's generated code calls.
        unsafe {
            Some(Libomp {
                thread_num: std::mem::transmute::<*mut c_void, GlobalThreadNum>(n),
                alloc: std::mem::transmute::<*mut c_void, TargetTaskAlloc>(a),
                task: std::mem::transmute::<*mut c_void, Task>(t),
            })
        }
    }

    /// The calling thread's libomp global thread id (registering it with libomp if needed).
    fn gtid(&self) -> i32 {
        // SAFETY: the function takes a location that outlives the call; it returns the
        // caller's id, registering a thread libomp does not know as a new root.
        unsafe { (self.thread_num)(&LOCATION) }
    }
}

/// The empty task: its only effect is the wake-up its push causes.
unsafe extern "C" fn nothing(_gtid: i32, _task: *mut c_void) -> i32 {
    0
}

/// Wakes a sleeping hidden helper thread when asked (see the module docs).
pub(crate) struct Waker {
    omp: Libomp,
    /// libomp's hidden helper threads have the global ids 1..=helpers.
    helpers: i32,
    tx: Sender<()>,
    stopped: Arc<AtomicBool>,
}

/// libomp's reading of a false boolean setting (`__kmp_str_match_false`): `0`, `false`, `no`
/// and their abbreviations (`f`, `n`), `off` (`of`), `.false.`, `.f.`, `disabled`, in any case.
fn libomp_false(value: &str) -> bool {
    // libomp's `__kmp_str_match`: `value` agrees with `word` as far as both go, and that is at
    // least `min` characters (or, with `min` 0, both are whole).
    let matches = |word: &str, min: usize| {
        let v = value.trim().as_bytes();
        let agree = word.bytes().zip(v).take_while(|(w, c)| w.eq_ignore_ascii_case(c)).count();
        let mismatch = agree < word.len().min(v.len());
        !mismatch && if min > 0 { agree >= min } else { agree == word.len() && agree == v.len() }
    };
    [("false", 1), ("off", 2), ("0", 1), (".false.", 2), (".f.", 2), ("no", 1), ("disabled", 0)].iter().any(|&(w, m)| matches(w, m))
}

/// How many of libomp's hidden helper threads run tasks (its helper team less its main
/// thread), from this process's libomp settings; `None` if it has no helpers.
pub(crate) fn task_helpers() -> Option<i32> {
    helper_ids_here().map(|ids| ids - 1)
}

/// [`helper_ids`] from this process's libomp settings.
fn helper_ids_here() -> Option<i32> {
    let var = |name| std::env::var(name).ok();
    helper_ids(var("LIBOMP_USE_HIDDEN_HELPER_TASK").as_deref(), var("LIBOMP_NUM_HIDDEN_HELPER_THREADS").as_deref())
}

/// How many global thread ids libomp's hidden helper team takes (see the module docs), or
/// `None` if it has none.
fn helper_ids(use_helpers: Option<&str>, count: Option<&str>) -> Option<i32> {
    if use_helpers.is_some_and(libomp_false) {
        return None;
    }
    match count.map(|c| c.trim().parse::<i64>()) {
        None | Some(Err(_)) => Some(8),
        Some(Ok(n)) if n <= 0 => None,
        Some(Ok(n)) => Some(n.min(16) as i32 + 1),
    }
}

impl Waker {
    /// A waker and its thread, if libomp runs `nowait` regions on hidden helper threads (its
    /// `LIBOMP_USE_HIDDEN_HELPER_TASK` and `LIBOMP_NUM_HIDDEN_HELPER_THREADS` settings) and
    /// exports what the waker needs.
    pub(crate) fn start() -> Option<Waker> {
        let helpers = helper_ids_here()?;
        let omp = Libomp::find()?;
        let (tx, rx) = crossbeam_channel::bounded(1);
        let stopped = Arc::new(AtomicBool::new(false));
        let stop = stopped.clone();
        std::thread::Builder::new().name("ompc-omp-waker".into()).spawn(move || serve(omp, rx, &stop)).ok()?;
        Some(Waker { omp, helpers, tx, stopped })
    }

    /// The plugin is shutting down: push nothing more.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
    }

    /// A region is starting on the calling thread: if that is a hidden helper thread and
    /// `room`, wake another helper (coalesced with a wake-up not yet made).
    pub(crate) fn nudge(&self, room: bool) {
        if !room {
            return;
        }
        let gtid = self.omp.gtid();
        if (1..=self.helpers).contains(&gtid) {
            // Full: a wake-up is already asked for. Disconnected cannot happen (the thread
            // holds the receiver until the process ends); either way there is nothing to do.
            let _: Result<(), TrySendError<()>> = self.tx.try_send(());
        }
    }
}

/// The waker thread: one empty hidden helper task per request, until stopped.
fn serve(omp: Libomp, rx: Receiver<()>, stopped: &AtomicBool) {
    let gtid = omp.gtid();
    while rx.recv().is_ok() {
        if stopped.load(Ordering::Acquire) {
            return;
        }
        // SAFETY: libomp allocates the task (KMP_TASK_SIZE bytes of `kmp_task_t`, no shareds)
        // for this registered thread; its routine ignores its arguments; `__kmpc_omp_task`
        // takes ownership of a task this thread allocated, and libomp frees it once run.
        unsafe {
            let t = (omp.alloc)(&LOCATION, gtid, TASK_TIED, KMP_TASK_SIZE, 0, nothing, -1);
            if !t.is_null() {
                (omp.task)(&LOCATION, gtid, t);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helper_ids_follow_libomps_settings() {
        assert_eq!(helper_ids(None, None), Some(8));
        assert_eq!(helper_ids(None, Some("2")), Some(3));
        assert_eq!(helper_ids(None, Some("32")), Some(17));
        assert_eq!(helper_ids(None, Some("0")), None);
        assert_eq!(helper_ids(None, Some("many")), Some(8));
        for off in ["0", "false", "F", "no", "n", "off", "OF", ".false.", ".f.", "disabled", " false "] {
            assert_eq!(helper_ids(Some(off), None), None, "{off}");
        }
        for on in ["1", "true", "on", "yes", "o", "enabled", "disable"] {
            assert_eq!(helper_ids(Some(on), None), Some(8), "{on}");
        }
    }
}
