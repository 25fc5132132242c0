//! The exported `__tgt_rtl_*` functions of the libomptarget 16 plugin interface (the C
//! structures they exchange are in [`crate::ctypes`]).
//!
//! Every function here is a thin shim: it checks its arguments, calls the safe core, and runs
//! behind [`guard`], so a panic becomes an error code and a message, never an unwind into C.

use crate::ctypes::{DeviceImage, KernelArgs, OffloadEntry, TargetTable};
use crate::runtime::{self, Runtime};
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};

const OFFLOAD_SUCCESS: i32 = 0;
const OFFLOAD_FAIL: i32 = -1;

const MAPTYPE_FROM: i64 = 0x002;
const MAPTYPE_TARGET_PARAM: i64 = 0x020;
const MAPTYPE_LITERAL: i64 = 0x100;

/// For each of the `n` kernel arguments: was it mapped `from` (so the region surely writes
/// it), and its host pointer (0 for by-value literals or when unknown).
///
/// # Safety
/// `kargs` is libomptarget's `KernelArgsTy` of the launched construct: its map arrays have at
/// least `n` entries flagged `TARGET_PARAM`.
unsafe fn arg_maps(kargs: &KernelArgs, n: usize) -> (Vec<bool>, Vec<u64>) {
    let (mut from, mut host) = (Vec::with_capacity(n), Vec::with_capacity(n));
    if kargs.arg_types.is_null() {
        return (vec![false; n], vec![0; n]);
    }
    let mut i = 0;
    while from.len() < n {
        // SAFETY: the arrays have at least `n` TARGET_PARAM entries, so index `i` is in bounds
        // until the n-th of them is found.
        let t = unsafe { *kargs.arg_types.add(i) };
        if t & MAPTYPE_TARGET_PARAM != 0 {
            from.push(t & MAPTYPE_FROM != 0);
            let h = if t & MAPTYPE_LITERAL != 0 || kargs.arg_ptrs.is_null() {
                0
            } else {
                // SAFETY: same index bound as above.
                unsafe { *kargs.arg_ptrs.add(i) as u64 }
            };
            host.push(h);
        }
        i += 1;
    }
    (from, host)
}

/// Run `f`, turning a panic into `fail` and a message.
fn guard<R>(name: &'static str, fail: R, f: impl FnOnce() -> R) -> R {
    guard_sized(name, None, fail, f)
}

/// [`guard`], and with a trace recorded (`OMPCLUSTER_TRACE`), a span for the call on the
/// calling thread's track of the head, with the bytes it moves or allocates.
fn guard_sized<R>(name: &'static str, bytes: Option<i64>, fail: R, f: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(|| {
        let traced = match runtime::get() {
            Some(Runtime::Head(c)) => c.trace_now().map(|t| (c, t)),
            _ => None,
        };
        let r = f();
        if let Some((c, t)) = traced {
            c.trace(Some(t), timeline::Cat::Call, 0, name, || bytes.map(|b| vec![("bytes", serde_json::json!(b))]).unwrap_or_default());
        }
        r
    })) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            eprintln!("ompcluster: internal error in {name}: {msg}");
            fail
        }
    }
}

fn code<E: std::fmt::Display>(what: &str, r: Result<(), E>) -> i32 {
    match r {
        Ok(()) => OFFLOAD_SUCCESS,
        Err(e) => {
            eprintln!("ompcluster: {what} failed: {e}");
            OFFLOAD_FAIL
        }
    }
}

fn image_bytes(image: *mut c_void) -> Option<&'static [u8]> {
    if image.is_null() {
        return None;
    }
    // SAFETY: libomptarget passes a valid `__tgt_device_image` whose start/end delimit the
    // image in the program's memory for the life of the program.
    unsafe {
        let img = &*(image as *const DeviceImage);
        let len = (img.image_end as usize).checked_sub(img.image_start as usize)?;
        if img.image_start.is_null() {
            return None;
        }
        Some(std::slice::from_raw_parts(img.image_start as *const u8, len))
    }
}

/// Called once when libomptarget loads the plugin: start MPI and agree on the device heap.
#[no_mangle]
pub extern "C" fn __tgt_rtl_init_plugin() -> i32 {
    guard("init_plugin", OFFLOAD_FAIL, || match runtime::init() {
        Ok(()) => OFFLOAD_SUCCESS,
        Err(e) => {
            eprintln!("ompcluster: {e}");
            OFFLOAD_FAIL
        }
    })
}

/// Nothing to do: the shutdown happens when the last library is unregistered.
#[no_mangle]
pub extern "C" fn __tgt_rtl_deinit_plugin() -> i32 {
    OFFLOAD_SUCCESS
}

/// On workers this never returns: they serve events until EXIT, then exit.
///
/// # Safety
/// `desc` is libomptarget's `__tgt_bin_desc` (unused).
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_register_lib(_desc: *mut c_void) -> i32 {
    guard("register_lib", OFFLOAD_FAIL, || {
        runtime::register_lib();
        OFFLOAD_SUCCESS
    })
}

/// The last unregistration stops the workers and writes the report.
///
/// # Safety
/// `desc` is libomptarget's `__tgt_bin_desc` (unused).
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_unregister_lib(_desc: *mut c_void) -> i32 {
    guard("unregister_lib", OFFLOAD_FAIL, || {
        runtime::unregister_lib();
        OFFLOAD_SUCCESS
    })
}

/// Claim x86-64 ELF shared objects (what clang-16 builds for x86_64-pc-linux-gnu).
///
/// # Safety
/// `image` is a `__tgt_device_image` from libomptarget.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_is_valid_binary(image: *mut c_void) -> i32 {
    guard("is_valid_binary", 0, || {
        let ok = runtime::get().is_some() && image_bytes(image).is_some_and(runtime::is_x86_64_shared_object);
        i32::from(ok)
    })
}

/// One device: the cluster.
#[no_mangle]
pub extern "C" fn __tgt_rtl_number_of_devices() -> i32 {
    i32::from(runtime::get().is_some())
}

/// Device 0 is ready once the plugin is initialised.
#[no_mangle]
pub extern "C" fn __tgt_rtl_init_device(dev: i32) -> i32 {
    if dev == 0 && runtime::get().is_some() {
        runtime::device_in_use();
        OFFLOAD_SUCCESS
    } else {
        OFFLOAD_FAIL
    }
}

/// Nothing to release per device.
#[no_mangle]
pub extern "C" fn __tgt_rtl_deinit_device(_dev: i32) -> i32 {
    OFFLOAD_SUCCESS
}

/// `requires` clauses. Unified shared memory cannot span processes: refuse it loudly rather
/// than compute wrong results.
#[no_mangle]
pub extern "C" fn __tgt_rtl_init_requires(flags: i64) -> i64 {
    const UNIFIED_SHARED_MEMORY: i64 = 0x008;
    if flags & UNIFIED_SHARED_MEMORY != 0 {
        eprintln!("ompcluster: `#pragma omp requires unified_shared_memory` cannot work across processes; this program needs a shared-memory device");
        std::process::exit(2);
    }
    flags
}

/// Send an image to the workers and return the table of device entries.
///
/// # Safety
/// `image` is a `__tgt_device_image` from libomptarget.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_load_binary(dev: i32, image: *mut c_void) -> *mut TargetTable {
    guard("load_binary", std::ptr::null_mut(), || {
        let (Some(Runtime::Head(c)), Some(bytes)) = (runtime::get(), image_bytes(image)) else {
            return std::ptr::null_mut();
        };
        if dev != 0 {
            return std::ptr::null_mut();
        }
        // SAFETY: `image` was checked non-null by `image_bytes`; its entry range is the host
        // entry table, valid for the life of the program.
        let entries = unsafe {
            let img = &*(image as *const DeviceImage);
            let n = (img.entries_end as usize - img.entries_begin as usize) / std::mem::size_of::<OffloadEntry>();
            if n == 0 { &[][..] } else { std::slice::from_raw_parts(img.entries_begin, n) }
        };
        match c.load_binary(bytes, entries) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("ompcluster: loading the device image failed: {e}");
                std::ptr::null_mut()
            }
        }
    })
}

/// Allocate device memory, or host memory for the host kind (`llvm_omp_target_alloc_host`).
/// The shared kind would have to be reachable from the host and every worker at once: refused.
#[no_mangle]
pub extern "C" fn __tgt_rtl_data_alloc(dev: i32, size: i64, host: *mut c_void, kind: i32) -> *mut c_void {
    const TARGET_ALLOC_HOST: i32 = 1;
    const TARGET_ALLOC_SHARED: i32 = 2;
    guard_sized("data_alloc", Some(size), std::ptr::null_mut(), || {
        let Some(Runtime::Head(c)) = runtime::get() else { return std::ptr::null_mut() };
        if dev != 0 || size < 0 {
            return std::ptr::null_mut();
        }
        if kind == TARGET_ALLOC_SHARED {
            eprintln!("ompcluster: shared (managed) allocations are not supported by the cluster device: memory cannot be shared with other processes");
            return std::ptr::null_mut();
        }
        if kind == TARGET_ALLOC_HOST {
            return match c.alloc_host(size as u64) {
                Ok(a) => a as *mut c_void,
                Err(e) => {
                    eprintln!("ompcluster: host allocation of {size} bytes failed: {e}");
                    std::ptr::null_mut()
                }
            };
        }
        match c.alloc(size as u64, host as u64) {
            Ok(a) => a as *mut c_void,
            Err(e) => {
                eprintln!("ompcluster: data_alloc of {size} bytes failed: {e}");
                std::ptr::null_mut()
            }
        }
    })
}

/// Free device memory.
#[no_mangle]
pub extern "C" fn __tgt_rtl_data_delete(dev: i32, tgt: *mut c_void, _kind: i32) -> i32 {
    guard("data_delete", OFFLOAD_FAIL, || {
        let Some(Runtime::Head(c)) = runtime::get() else { return OFFLOAD_FAIL };
        if dev != 0 {
            return OFFLOAD_FAIL;
        }
        code("data_delete", c.delete(tgt as u64))
    })
}

/// Host to device.
///
/// # Safety
/// `host` must point to `size` readable bytes (libomptarget's contract).
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_data_submit(dev: i32, tgt: *mut c_void, host: *mut c_void, size: i64) -> i32 {
    guard_sized("data_submit", Some(size), OFFLOAD_FAIL, || {
        let Some(Runtime::Head(c)) = runtime::get() else { return OFFLOAD_FAIL };
        if dev != 0 || size < 0 || (host.is_null() && size > 0) {
            return OFFLOAD_FAIL;
        }
        // SAFETY: libomptarget passes `size` readable host bytes at `host`.
        code("data_submit", unsafe { c.submit(tgt as u64, host as *const u8, size as u64) })
    })
}

/// Device to host.
///
/// # Safety
/// `host` must point to `size` writable bytes (libomptarget's contract).
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_data_retrieve(dev: i32, host: *mut c_void, tgt: *mut c_void, size: i64) -> i32 {
    guard_sized("data_retrieve", Some(size), OFFLOAD_FAIL, || {
        let Some(Runtime::Head(c)) = runtime::get() else { return OFFLOAD_FAIL };
        if dev != 0 || size < 0 || (host.is_null() && size > 0) {
            return OFFLOAD_FAIL;
        }
        // SAFETY: libomptarget passes `size` writable host bytes at `host`.
        code("data_retrieve", unsafe { c.retrieve(host as *mut u8, tgt as u64, size as u64) })
    })
}

/// Device-to-device copies stay inside the cluster device.
#[no_mangle]
pub extern "C" fn __tgt_rtl_is_data_exchangable(src: i32, dst: i32) -> i32 {
    i32::from(src == 0 && dst == 0)
}

/// Device to device (`omp_target_memcpy` between device pointers).
#[no_mangle]
pub extern "C" fn __tgt_rtl_data_exchange(src_dev: i32, src: *mut c_void, dst_dev: i32, dst: *mut c_void, size: i64) -> i32 {
    guard_sized("data_exchange", Some(size), OFFLOAD_FAIL, || {
        let Some(Runtime::Head(c)) = runtime::get() else { return OFFLOAD_FAIL };
        if src_dev != 0 || dst_dev != 0 || size < 0 {
            return OFFLOAD_FAIL;
        }
        code("data_exchange", c.copy(src as u64, dst as u64, size as u64))
    })
}

/// Run a target region on a worker.
///
/// # Safety
/// `args` and `offsets` have `kargs->num_args` elements (libomptarget's contract).
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_launch_kernel(
    dev: i32,
    entry: *mut c_void,
    args: *mut *mut c_void,
    offsets: *mut isize,
    kargs: *mut KernelArgs,
    _async_info: *mut c_void,
) -> i32 {
    guard("launch_kernel", OFFLOAD_FAIL, || {
        let Some(Runtime::Head(c)) = runtime::get() else { return OFFLOAD_FAIL };
        if dev != 0 || kargs.is_null() {
            return OFFLOAD_FAIL;
        }
        // SAFETY: libomptarget passes a valid KernelArgsTy and `num_args` arguments/offsets.
        let ((values, begins), (written, hosts)) = unsafe {
            let n = (*kargs).num_args as usize;
            if n > 0 && (args.is_null() || offsets.is_null()) {
                return OFFLOAD_FAIL;
            }
            // `args[i]` is the begin of the mapped section (inside its buffer); the kernel gets
            // the base, `args[i] + offsets[i]`, which lies before the buffer for sections
            // that do not start at element 0.
            let begins: Vec<u64> = (0..n).map(|i| *args.add(i) as u64).collect();
            let values: Vec<u64> = (0..n).map(|i| begins[i].wrapping_add(*offsets.add(i) as u64)).collect();
            ((values, begins), arg_maps(&*kargs, n))
        };
        code("launching the target region", c.launch(entry as usize, &values, &begins, &hosts, &written))
    })
}

/// Images must contain code.
#[no_mangle]
pub extern "C" fn __tgt_rtl_supports_empty_images() -> i32 {
    0
}
