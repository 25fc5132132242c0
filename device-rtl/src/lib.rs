//! The x86-64 device runtime: the entry points that LLVM's OpenMPIRBuilder makes device code
//! call (flang-19's, for `-fopenmp-targets=x86_64-pc-linux-gnu`), which LLVM ships only for
//! GPUs (its DeviceRTL), implemented on the host's own OpenMP runtime, libomp:
//!
//! * `__kmpc_target_init(kernel_env, launch_env)` returns -1 (the calling thread runs the
//!   region's code: a kernel is called once, by one thread, on x86) and
//!   `__kmpc_target_deinit()` does nothing.
//! * `__kmpc_parallel_51(ident, gtid, if, num_threads, proc_bind, fn, wrapper, args, nargs)`
//!   runs `fn(&gtid, &bound_tid, args[0], ..., args[nargs-1])` on a team of libomp threads
//!   (`__kmpc_fork_call`), with the `num_threads` and `proc_bind` clauses pushed first, and
//!   serialized (`__kmpc_serialized_parallel`) when the `if` clause is false. Nested
//!   parallelism follows libomp's settings, as for host code.
//! * `__kmpc_for_static_loop_{4,4u,8,8u}(ident, body, arg, n, num_threads, chunk)` runs
//!   `body(i, arg)` for this thread's share of the iterations `0..n` under the static
//!   schedule ([`schedule`]), then waits at a barrier with its team: the worksharing loop's
//!   implicit barrier, which flang-19 does not emit on the device (OpenMPIRBuilder's
//!   `applyWorkshareLoopTarget` leaves it to the GPU runtime's lock-step threads).
//! * `__kmpc_distribute_static_loop_*` (`distribute`) shares the iterations between the
//!   league's teams (`omp_get_team_num`), and `__kmpc_distribute_for_static_loop_*`
//!   (`distribute parallel do`) the team's share again between its threads. flang-19 emits
//!   neither (it refuses `distribute`); LLVM 19's signatures are implemented, and the extra
//!   trailing argument later LLVMs add is ignored by the calling convention.
//! * `__kmpc_alloc_shared(size)` / `__kmpc_free_shared(ptr, size)`: memory shared by the
//!   threads of a region (the GPU runtime's globalization): ordinary heap memory here.
//! * `omp_is_initial_device()` in device code answers false (for the loader only: the
//!   shared library does not export it, the host program must keep libomp's).
//! * `__kmpc_dispatch_deinit(ident, gtid)`, a host entry point clang-19 calls after every
//!   `schedule(dynamic)` loop and libomp 16 lacks: empty, as libomp 19 to 21 define it
//!   (`kmp_dispatch.cpp`). A [`fallback`] only: the process's own libomp answers first.
//!
//! The same functions serve two ways: the worker's image loader resolves a device image's
//! undefined references to them ([`entry_points`]), so an image needs nothing linked in; and
//! this crate's shared library, `libompcluster_devrtl.so` (the names exported), satisfies
//! the device linker, which refuses undefined symbols, and lets LLVM 19's own host plugin
//! run the same images. Images compiled by clang (any version) call none of these.
//!
//! No panic leaves these functions: they are `extern "C"`, so one would abort the process
//! (Rust 1.81 and later) rather than unwind into C; none of their arithmetic can panic.

pub mod schedule;

use std::ffi::{c_char, c_void};

/// libomp's `ident_t` (source location of a construct), as device code passes it.
#[repr(C)]
#[derive(Debug)]
pub struct Ident {
    reserved_1: i32,
    flags: i32,
    reserved_2: i32,
    reserved_3: i32,
    psource: *const c_char,
}

/// An outlined parallel region as libomp calls it: `(global tid *, bound tid *, args...)`.
type Microtask = unsafe extern "C" fn(*mut i32, *mut i32, ...);

extern "C" {
    fn __kmpc_fork_call(loc: *const Ident, argc: i32, microtask: Microtask, ...);
    fn __kmpc_push_num_threads(loc: *const Ident, gtid: i32, num_threads: i32);
    fn __kmpc_push_proc_bind(loc: *const Ident, gtid: i32, proc_bind: i32);
    fn __kmpc_serialized_parallel(loc: *const Ident, gtid: i32);
    fn __kmpc_end_serialized_parallel(loc: *const Ident, gtid: i32);
    fn __kmpc_global_thread_num(loc: *const Ident) -> i32;
    fn __kmpc_barrier(loc: *const Ident, gtid: i32);
    fn omp_get_thread_num() -> i32;
    fn omp_get_num_threads() -> i32;
    fn omp_get_team_num() -> i32;
    fn omp_get_num_teams() -> i32;
}

/// The entry points, by the names device code calls them: what the image loader resolves
/// an undefined symbol of an image to before it looks in the process.
pub fn entry_points() -> &'static [(&'static str, usize)] {
    macro_rules! table {
        ($($f:ident),* $(,)?) => {
            &[$((stringify!($f), $f as *const () as usize)),*]
        };
    }
    static TABLE: std::sync::OnceLock<Vec<(&'static str, usize)>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut v = vec![("omp_is_initial_device", device_is_initial_device as *const () as usize)];
        let t: &[(&str, usize)] = table!(
            __kmpc_target_init,
            __kmpc_target_deinit,
            __kmpc_parallel_51,
            __kmpc_for_static_loop_4,
            __kmpc_for_static_loop_4u,
            __kmpc_for_static_loop_8,
            __kmpc_for_static_loop_8u,
            __kmpc_distribute_static_loop_4,
            __kmpc_distribute_static_loop_4u,
            __kmpc_distribute_static_loop_8,
            __kmpc_distribute_static_loop_8u,
            __kmpc_distribute_for_static_loop_4,
            __kmpc_distribute_for_static_loop_4u,
            __kmpc_distribute_for_static_loop_8,
            __kmpc_distribute_for_static_loop_8u,
            __kmpc_alloc_shared,
            __kmpc_free_shared,
        );
        v.extend_from_slice(t);
        v
    })
}

/// The address of the entry point `name`, if this runtime provides it.
pub fn resolve(name: &str) -> Option<usize> {
    entry_points().iter().find(|(n, _)| *n == name).map(|&(_, a)| a)
}

/// Entry points of newer libomps that libomp 16 lacks, provided here for device code: the
/// loader takes them only when the process has none of its own.
pub fn fallback(name: &str) -> Option<usize> {
    (name == "__kmpc_dispatch_deinit").then_some(__kmpc_dispatch_deinit as *const () as usize)
}

/// The end of a `schedule(dynamic)` (or guided, runtime) loop, as clang-19 emits it: nothing
/// to do with libomp 16, whose `__kmpc_dispatch_next_*` releases the loop's buffer itself;
/// libomp 19 to 21 define it empty too.
#[no_mangle]
pub extern "C" fn __kmpc_dispatch_deinit(_ident: *const Ident, _gtid: i32) {}

/// Is `name` an entry point of LLVM's GPU device runtime that device code may call (and this
/// runtime, if [`resolve`] does not know it, lacks)? For error messages.
pub fn is_device_runtime_name(name: &str) -> bool {
    const GPU_ONLY: &[&str] = &[
        "__kmpc_target_",
        "__kmpc_parallel_5",
        "__kmpc_for_static_loop",
        "__kmpc_distribute_",
        "__kmpc_alloc_shared",
        "__kmpc_free_shared",
        "__kmpc_nvptx_",
        "__kmpc_get_hardware_",
        "__kmpc_get_warp_size",
        "__kmpc_kernel_",
        "__kmpc_is_spmd_exec_mode",
        "__kmpc_reduction_get_fixed_buffer",
        "__kmpc_barrier_simple_",
        "__kmpc_launch_parallel_",
    ];
    GPU_ONLY.iter().any(|p| name.starts_with(p))
}

/// `omp_is_initial_device()` called by device code: false, the region runs on the device.
/// flang-19 calls libomp's function there (clang's `omp.h` makes it a constant 0 in device
/// code), which answers true in any process of the host's OpenMP runtime, a worker included.
/// Not exported under its name (the shared library would then answer for the host program
/// too): the image loader resolves device code's calls to it.
extern "C" fn device_is_initial_device() -> i32 {
    0
}

/// Start of a target region's code: -1, "this thread runs the region". On x86 a kernel is
/// called once, by one thread (the GPU runtime returns -1 to the main thread of a
/// generic-mode kernel and to every thread of an SPMD one: here that is the same one).
#[no_mangle]
pub extern "C" fn __kmpc_target_init(_kernel_environment: *const c_void, _launch_environment: *const c_void) -> i32 {
    -1
}

/// End of a target region's code: nothing to tear down.
#[no_mangle]
pub extern "C" fn __kmpc_target_deinit() {}

/// Threads of the team run `f(gtid, btid, args[0..nargs])`. Called by libomp on each
/// thread, with the values [`__kmpc_parallel_51`] passed to `__kmpc_fork_call`.
///
/// # Safety
/// `f` is an outlined parallel region taking `nargs` pointer arguments after the two thread
/// id pointers, `args` has `nargs` elements.
unsafe extern "C" fn run_outlined(gtid: *mut i32, btid: *mut i32, f: *mut c_void, args: *mut *mut c_void, nargs: isize) {
    // SAFETY: the caller's contract.
    unsafe { invoke(f, gtid, btid, args, nargs.max(0) as usize) }
}

/// Call `f(gtid, btid, args[0], ..., args[nargs-1])`.
///
/// # Safety
/// As [`run_outlined`].
unsafe fn invoke(f: *mut c_void, gtid: *mut i32, btid: *mut i32, args: *mut *mut c_void, nargs: usize) {
    type P = *mut c_void;
    type T = *mut i32;
    // SAFETY (every arm): `f` takes exactly `nargs` pointer arguments after the two ids (the
    // caller's contract), so transmuting it to that signature and calling it is a call of
    // its own type; `args` has `nargs` elements.
    unsafe {
        let a = |i: usize| *args.add(i);
        match nargs {
            0 => std::mem::transmute::<P, unsafe extern "C" fn(T, T)>(f)(gtid, btid),
            1 => std::mem::transmute::<P, unsafe extern "C" fn(T, T, P)>(f)(gtid, btid, a(0)),
            2 => std::mem::transmute::<P, unsafe extern "C" fn(T, T, P, P)>(f)(gtid, btid, a(0), a(1)),
            3 => std::mem::transmute::<P, unsafe extern "C" fn(T, T, P, P, P)>(f)(gtid, btid, a(0), a(1), a(2)),
            4 => std::mem::transmute::<P, unsafe extern "C" fn(T, T, P, P, P, P)>(f)(gtid, btid, a(0), a(1), a(2), a(3)),
            _ => {
                // Any other count: through libffi, every argument pointer-sized.
                use libffi::middle::{Arg, Cif, CodePtr, Type};
                let cif = Cif::new(std::iter::repeat_n(Type::pointer(), nargs + 2), Type::void());
                let mut values: Vec<P> = Vec::with_capacity(nargs + 2);
                values.push(gtid.cast());
                values.push(btid.cast());
                values.extend((0..nargs).map(a));
                let argv: Vec<Arg> = values.iter().map(Arg::new).collect();
                cif.call::<()>(CodePtr(f), &argv);
            }
        }
    }
}

/// A `parallel` region of device code: `f` runs on a team of this process's OpenMP threads.
///
/// # Safety
/// Called by device code: `ident` is its `ident_t`, `f` an outlined region taking `nargs`
/// pointers after the two thread ids, `args` an array of `nargs` pointers.
#[no_mangle]
pub unsafe extern "C" fn __kmpc_parallel_51(
    ident: *const Ident,
    gtid: i32,
    if_expr: i32,
    num_threads: i32,
    proc_bind: i32,
    f: *mut c_void,
    _wrapper: *mut c_void,
    args: *mut *mut c_void,
    nargs: i64,
) {
    let nargs = nargs.max(0) as isize;
    // SAFETY: libomp's entry points, called as host code calls them, from the thread that
    // encounters the region; `run_outlined` gets `f`, `args` and `nargs` as the caller gave
    // them (the caller's contract), and `args` lives until `__kmpc_fork_call` returns.
    unsafe {
        let gtid = if gtid < 0 { __kmpc_global_thread_num(ident) } else { gtid };
        if if_expr == 0 {
            __kmpc_serialized_parallel(ident, gtid);
            let (mut g, mut zero) = (gtid, 0);
            run_outlined(&mut g, &mut zero, f, args, nargs);
            __kmpc_end_serialized_parallel(ident, gtid);
            return;
        }
        if num_threads > 0 {
            __kmpc_push_num_threads(ident, gtid, num_threads);
        }
        // OpenMPIRBuilder passes -1 for no clause, else libomp's kmp_proc_bind_t values
        // (primary 2, close 3, spread 4).
        if (0..=5).contains(&proc_bind) {
            __kmpc_push_proc_bind(ident, gtid, proc_bind);
        }
        let microtask = std::mem::transmute::<unsafe extern "C" fn(*mut i32, *mut i32, *mut c_void, *mut *mut c_void, isize), Microtask>(
            run_outlined,
        );
        __kmpc_fork_call(ident, 3, microtask, f, args, nargs);
    }
}

/// Run `body(i, arg)` for every `i` of this member's share.
///
/// # Safety
/// `body` is a loop body of device code taking the induction variable as `T` and `arg`.
unsafe fn run_share<T: Copy>(body: unsafe extern "C" fn(T, *mut c_void), arg: *mut c_void, ranges: impl Iterator<Item = std::ops::Range<u64>>, to_t: impl Fn(u64) -> T) {
    for r in ranges {
        for i in r {
            // SAFETY: the caller's contract; `i` is below the loop's trip count.
            unsafe { body(to_t(i), arg) };
        }
    }
}

/// The calling thread's number in its team and the team's size (1 outside `parallel`).
fn thread_in_team() -> (u64, u64) {
    // SAFETY: libomp queries without preconditions.
    let (me, count) = unsafe { (omp_get_thread_num(), omp_get_num_threads()) };
    (me.max(0) as u64, count.max(1) as u64)
}

/// The calling team's number in the league and the league's size (1 outside `teams`).
fn team_in_league() -> (u64, u64) {
    // SAFETY: libomp queries without preconditions.
    let (me, count) = unsafe { (omp_get_team_num(), omp_get_num_teams()) };
    (me.max(0) as u64, count.max(1) as u64)
}

/// The implicit barrier at the end of a worksharing loop, when there is a team to wait for.
///
/// # Safety
/// `ident` is device code's `ident_t` (or null); every thread of the team reaches it (a
/// worksharing loop is encountered by all threads of the team or none).
unsafe fn loop_end_barrier(ident: *const Ident, team_size: u64) {
    if team_size > 1 {
        // SAFETY: the caller's contract; libomp's barrier of the current team.
        unsafe { __kmpc_barrier(ident, __kmpc_global_thread_num(ident)) };
    }
}

macro_rules! static_loops {
    ($for_loop:ident, $distribute:ident, $distribute_for:ident, $t:ty) => {
        /// A worksharing loop (`do`/`for`) of device code over `0..num_iters`: this thread
        /// runs its static share (`thread_chunk` 0: no chunk size), then the team's barrier.
        /// `num_threads` is ignored: the team's size comes from libomp.
        ///
        /// # Safety
        /// Called by device code inside (or outside) a parallel region: `body` is its loop
        /// body and `arg` the body's argument.
        #[no_mangle]
        pub unsafe extern "C" fn $for_loop(
            ident: *const Ident,
            body: unsafe extern "C" fn($t, *mut c_void),
            arg: *mut c_void,
            num_iters: $t,
            _num_threads: $t,
            thread_chunk: $t,
        ) {
            let n = if num_iters > 0 as $t { num_iters as u64 } else { 0 };
            let chunk = if thread_chunk > 0 as $t { thread_chunk as u64 } else { 0 };
            let (me, count) = thread_in_team();
            // SAFETY: the caller's contract; every member of the team calls this.
            unsafe {
                run_share(body, arg, schedule::share(n, count, me, chunk), |i| i as $t);
                loop_end_barrier(ident, count);
            }
        }

        /// A `distribute` loop over `0..num_iters`: this team runs its static share
        /// (`block_chunk` 0: no chunk size). No barrier (`distribute` has none).
        ///
        /// # Safety
        /// As the worksharing loop's.
        #[no_mangle]
        pub unsafe extern "C" fn $distribute(
            _ident: *const Ident,
            body: unsafe extern "C" fn($t, *mut c_void),
            arg: *mut c_void,
            num_iters: $t,
            block_chunk: $t,
        ) {
            let n = if num_iters > 0 as $t { num_iters as u64 } else { 0 };
            let chunk = if block_chunk > 0 as $t { block_chunk as u64 } else { 0 };
            let (team, teams) = team_in_league();
            // SAFETY: the caller's contract.
            unsafe { run_share(body, arg, schedule::share(n, teams, team, chunk), |i| i as $t) };
        }

        /// A `distribute parallel do` loop over `0..num_iters`: the team's static share
        /// (`block_chunk`), shared again between the team's threads (`thread_chunk`), then
        /// the team's barrier.
        ///
        /// # Safety
        /// As the worksharing loop's.
        #[no_mangle]
        pub unsafe extern "C" fn $distribute_for(
            ident: *const Ident,
            body: unsafe extern "C" fn($t, *mut c_void),
            arg: *mut c_void,
            num_iters: $t,
            _num_threads: $t,
            block_chunk: $t,
            thread_chunk: $t,
        ) {
            let n = if num_iters > 0 as $t { num_iters as u64 } else { 0 };
            let bchunk = if block_chunk > 0 as $t { block_chunk as u64 } else { 0 };
            let tchunk = if thread_chunk > 0 as $t { thread_chunk as u64 } else { 0 };
            let (team, teams) = team_in_league();
            let (me, count) = thread_in_team();
            for block in schedule::share(n, teams, team, bchunk) {
                let base = block.start;
                let mine = schedule::share(block.end - block.start, count, me, tchunk).map(move |r| r.start + base..r.end + base);
                // SAFETY: the caller's contract.
                unsafe { run_share(body, arg, mine, |i| i as $t) };
            }
            // SAFETY: every thread of the team runs the loop.
            unsafe { loop_end_barrier(ident, count) };
        }
    };
}

static_loops!(__kmpc_for_static_loop_4, __kmpc_distribute_static_loop_4, __kmpc_distribute_for_static_loop_4, i32);
static_loops!(__kmpc_for_static_loop_4u, __kmpc_distribute_static_loop_4u, __kmpc_distribute_for_static_loop_4u, u32);
static_loops!(__kmpc_for_static_loop_8, __kmpc_distribute_static_loop_8, __kmpc_distribute_for_static_loop_8, i64);
static_loops!(__kmpc_for_static_loop_8u, __kmpc_distribute_static_loop_8u, __kmpc_distribute_for_static_loop_8u, u64);

/// Memory the threads of a region share (the GPU runtime's "globalized" variables):
/// ordinary heap memory on x86 (null if there is none).
#[no_mangle]
pub extern "C" fn __kmpc_alloc_shared(bytes: u64) -> *mut c_void {
    // SAFETY: malloc has no preconditions; a zero size still yields a freeable pointer.
    unsafe { libc_malloc(bytes.max(1) as usize) }
}

/// Release what [`__kmpc_alloc_shared`] gave.
///
/// # Safety
/// `ptr` came from `__kmpc_alloc_shared` and is not used again.
#[no_mangle]
pub unsafe extern "C" fn __kmpc_free_shared(ptr: *mut c_void, _bytes: u64) {
    // SAFETY: the caller's contract.
    unsafe { libc_free(ptr) }
}

extern "C" {
    #[link_name = "malloc"]
    fn libc_malloc(size: usize) -> *mut c_void;
    #[link_name = "free"]
    fn libc_free(ptr: *mut c_void);
}

#[cfg(test)]
mod tests;
