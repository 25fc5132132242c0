//! The entry points on real libomp threads, called the way flang-19's device code calls
//! them: `__kmpc_parallel_51` with one argument (a pointer to the captured variables), a
//! `__kmpc_for_static_loop_*` inside it.

use super::*;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

static LOC: Ident = Ident { reserved_1: 0, flags: 2, reserved_2: 0, reserved_3: 22, psource: c";unknown;unknown;0;0;;".as_ptr() };

// SAFETY: `Ident` holds a pointer to a static string; sharing it between threads is fine.
unsafe impl Sync for Ident {}

extern "C" {
    fn omp_set_num_threads(n: i32);
    fn omp_in_parallel() -> i32;
}

/// What a test region records: per iteration, which thread ran it; the threads that ran.
struct Record {
    who: Vec<AtomicU32>,
    threads: Mutex<Vec<u64>>,
    in_parallel: AtomicU32,
    chunk: u32,
}

unsafe extern "C" fn body4u(i: u32, arg: *mut c_void) {
    // SAFETY: the test passes a live Record.
    let r = unsafe { &*(arg as *const Record) };
    // SAFETY: libomp query.
    let me = unsafe { omp_get_thread_num() } as u32;
    r.who[i as usize].fetch_add(((me + 1) << 16) | 1, Ordering::Relaxed);
}

unsafe extern "C" fn body8(i: i64, arg: *mut c_void) {
    // SAFETY: as above.
    unsafe { body4u(i as u32, arg) }
}

/// The outlined region: (gtid *, btid *, record *) as OpenMPIRBuilder outlines it.
unsafe extern "C" fn region(_gtid: *mut i32, _btid: *mut i32, arg: *mut c_void) {
    // SAFETY: the test passes a live Record.
    let r = unsafe { &*(arg as *const Record) };
    // SAFETY: libomp queries.
    unsafe {
        if omp_in_parallel() != 0 {
            r.in_parallel.fetch_add(1, Ordering::Relaxed);
        }
        r.threads.lock().unwrap().push(omp_get_thread_num() as u64);
        let n = r.who.len() as u32;
        __kmpc_for_static_loop_4u(&LOC, body4u, arg, n, omp_get_num_threads() as u32, r.chunk);
    }
}

fn record(n: usize, chunk: u32) -> Record {
    Record { who: (0..n).map(|_| AtomicU32::new(0)).collect(), threads: Mutex::new(Vec::new()), in_parallel: AtomicU32::new(0), chunk }
}

/// Thread that ran iteration i, checking that exactly one did, once.
fn owner(r: &Record, i: usize) -> u32 {
    let v = r.who[i].load(Ordering::Relaxed);
    assert_eq!(v & 0xffff, 1, "iteration {i} ran {} times", v & 0xffff);
    (v >> 16) - 1
}

fn parallel(r: &Record, if_expr: i32, num_threads: i32) {
    let mut args = [r as *const Record as *mut c_void];
    // SAFETY: `region` takes one pointer after the ids; `args` lives through the call.
    unsafe {
        let gtid = __kmpc_global_thread_num(&LOC);
        __kmpc_parallel_51(&LOC, gtid, if_expr, num_threads, -1, region as *mut c_void, std::ptr::null_mut(), args.as_mut_ptr(), 1);
    }
}

#[test]
fn a_parallel_region_runs_on_a_team_and_its_loop_is_split_as_static_says() {
    let r = record(1000, 0);
    parallel(&r, 1, 4);
    let threads = r.threads.lock().unwrap().clone();
    assert_eq!(threads.len(), 4, "num_threads(4) gives four threads: {threads:?}");
    assert_eq!(r.in_parallel.load(Ordering::Relaxed), 4);
    // schedule(static): thread t runs the t-th contiguous quarter.
    for i in 0..1000 {
        assert_eq!(owner(&r, i), (i / 250) as u32, "iteration {i}");
    }
}

#[test]
fn a_chunked_loop_goes_round_robin() {
    let r = record(100, 7);
    parallel(&r, 1, 3);
    for i in 0..100 {
        assert_eq!(owner(&r, i), ((i / 7) % 3) as u32, "iteration {i}");
    }
}

#[test]
fn a_false_if_clause_runs_the_region_on_the_encountering_thread_alone() {
    let r = record(50, 0);
    parallel(&r, 0, 4);
    assert_eq!(*r.threads.lock().unwrap(), vec![0]);
    for i in 0..50 {
        assert_eq!(owner(&r, i), 0);
    }
}

#[test]
fn the_default_team_is_libomps() {
    // SAFETY: libomp setter.
    unsafe { omp_set_num_threads(3) };
    let r = record(9, 0);
    parallel(&r, 1, -1);
    assert_eq!(r.threads.lock().unwrap().len(), 3);
}

#[test]
fn a_loop_outside_parallel_runs_every_iteration_on_the_caller() {
    let r = record(17, 0);
    // SAFETY: body takes (i64, Record *).
    unsafe { __kmpc_for_static_loop_8(&LOC, body8, &r as *const Record as *mut c_void, 17, 1, 0) };
    for i in 0..17 {
        assert_eq!(owner(&r, i), 0);
    }
    // Zero and negative trip counts run nothing.
    // SAFETY: as above.
    unsafe { __kmpc_for_static_loop_8(&LOC, body8, &r as *const Record as *mut c_void, -5, 1, 0) };
    // SAFETY: as above.
    unsafe { __kmpc_distribute_static_loop_8(&LOC, body8, &r as *const Record as *mut c_void, 0, 0) };
    assert!((0..17).all(|i| owner(&r, i) == 0));
}

static MANY: AtomicU64 = AtomicU64::new(0);

unsafe extern "C" fn six(_g: *mut i32, _b: *mut i32, a: *mut c_void, b: *mut c_void, c: *mut c_void, d: *mut c_void, e: *mut c_void, f: *mut c_void) {
    let sum = [a, b, c, d, e, f].iter().map(|p| *p as u64).sum::<u64>();
    MANY.fetch_add(sum, Ordering::Relaxed);
}

#[test]
fn regions_with_many_arguments_get_them_all() {
    let mut args: Vec<*mut c_void> = (1..=6).map(|i| i as *mut c_void).collect();
    // SAFETY: `six` takes six pointers after the ids.
    unsafe { __kmpc_parallel_51(&LOC, -1, 1, 2, -1, six as *mut c_void, std::ptr::null_mut(), args.as_mut_ptr(), 6) };
    assert_eq!(MANY.load(Ordering::Relaxed), 2 * 21);
}

#[test]
fn entry_points_resolve_by_name() {
    assert_eq!(resolve("__kmpc_parallel_51"), Some(__kmpc_parallel_51 as *const () as usize));
    assert_eq!(resolve("__kmpc_target_init"), Some(__kmpc_target_init as *const () as usize));
    assert!(resolve("__kmpc_fork_call").is_none(), "libomp's own entry points are libomp's");
    assert!(resolve("__kmpc_dispatch_deinit").is_none(), "a fallback, after the process's own");
    assert!(fallback("__kmpc_dispatch_deinit").is_some());
    assert!(is_device_runtime_name("__kmpc_nvptx_parallel_reduce_nowait_v2"));
    assert!(!is_device_runtime_name("__kmpc_reduce"));
    assert_eq!(__kmpc_target_init(std::ptr::null(), std::ptr::null()), -1);
    let initial = resolve("omp_is_initial_device").unwrap();
    // SAFETY: the table's entry for it is a function of this signature.
    assert_eq!(unsafe { std::mem::transmute::<usize, extern "C" fn() -> i32>(initial)() }, 0, "device code runs on the device");
}
