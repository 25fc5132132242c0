//! Waking libomp's sleeping hidden helper threads, so that ready `nowait` regions run at once.
//!
//! libomp 16 runs `target nowait` tasks on its hidden helper threads (8 by default). A task
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
//! Concurrency: [`Waker::nudge`] is called by offloading threads; requests coalesce in a
//! channel of one slot, and the waker thread serves them one at a time, so a burst of region
//! starts costs one wake-up. The thread blocks on the channel between requests and is left
//! blocked at exit (it holds nothing).

use crossbeam_channel::{Receiver, Sender, TrySendError};
use std::ffi::{c_char, c_void, CStr};

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
}

impl Waker {
    /// A waker and its thread, if libomp runs `nowait` regions on hidden helper threads (its
    /// `LIBOMP_USE_HIDDEN_HELPER_TASK` and `LIBOMP_NUM_HIDDEN_HELPER_THREADS` settings) and
    /// exports what the waker needs.
    pub(crate) fn start() -> Option<Waker> {
        let off = |v: &str| matches!(v.trim().to_ascii_lowercase().as_str(), "0" | "false" | "off" | "no" | "disabled");
        if std::env::var("LIBOMP_USE_HIDDEN_HELPER_TASK").is_ok_and(|v| off(&v)) {
            return None;
        }
        let helpers = match std::env::var("LIBOMP_NUM_HIDDEN_HELPER_THREADS") {
            Ok(v) => v.trim().parse::<i32>().ok()?,
            Err(_) => 8,
        };
        if helpers <= 0 {
            return None;
        }
        let omp = Libomp::find()?;
        let (tx, rx) = crossbeam_channel::bounded(1);
        std::thread::Builder::new().name("ompc-omp-waker".into()).spawn(move || serve(omp, rx)).ok()?;
        Some(Waker { omp, helpers, tx })
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

/// The waker thread: one empty hidden helper task per request.
fn serve(omp: Libomp, rx: Receiver<()>) {
    let gtid = omp.gtid();
    while rx.recv().is_ok() {
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
