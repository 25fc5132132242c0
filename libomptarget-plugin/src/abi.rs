//! The exported `__tgt_rtl_*` functions of the libomptarget 16 plugin interface (the C
//! structures they exchange are in [`crate::ctypes`]).
//!
//! Every function here is a thin shim: it checks its arguments, calls the safe core, and runs
//! behind [`guard`], the one panic boundary: a panic never unwinds into C. It is a bug of
//! ours, so it is not turned into an error code (libomptarget would abort this process alone,
//! and ranks waiting for it could hang): on the head it ends the job with one line naming the
//! function and the panic (`ompcluster: internal error in __tgt_rtl_data_submit: ...; ending
//! the job`) and exit status 4; on a worker (inside `__tgt_rtl_register_lib`, which serves
//! events) it ends that worker, which the head recovers from as from any failure
//! ([`runtime::internal_error`]).

use crate::ctypes::{AsyncInfo, DeviceImage, KernelArgs, OffloadEntry, TargetTable};
use crate::queues::{Progress, Queue};
use crate::runtime::{self, Runtime};
use std::ffi::c_void;

mod boundary;
use boundary::{guard, guard_traced};

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
    guard_traced("init_plugin", None, || match runtime::init() {
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
    guard("deinit_plugin", || OFFLOAD_SUCCESS)
}

/// On workers this never returns: they serve events until EXIT, then exit.
///
/// # Safety
/// `desc` is libomptarget's `__tgt_bin_desc` (unused).
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_register_lib(_desc: *mut c_void) -> i32 {
    guard_traced("register_lib", None, || {
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
    guard_traced("unregister_lib", None, || {
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
    guard_traced("is_valid_binary", None, || {
        let ok = runtime::get().is_some() && image_bytes(image).is_some_and(runtime::is_x86_64_shared_object);
        i32::from(ok)
    })
}

/// One device: the cluster.
#[no_mangle]
pub extern "C" fn __tgt_rtl_number_of_devices() -> i32 {
    guard("number_of_devices", || i32::from(runtime::get().is_some()))
}

/// Device 0 is ready once the plugin is initialised.
#[no_mangle]
pub extern "C" fn __tgt_rtl_init_device(dev: i32) -> i32 {
    guard("init_device", || {
        if dev == 0 && runtime::get().is_some() {
            runtime::device_in_use();
            OFFLOAD_SUCCESS
        } else {
            OFFLOAD_FAIL
        }
    })
}

/// Nothing to release per device.
#[no_mangle]
pub extern "C" fn __tgt_rtl_deinit_device(_dev: i32) -> i32 {
    guard("deinit_device", || OFFLOAD_SUCCESS)
}

/// `requires` clauses. Unified shared memory cannot span processes: refuse it loudly rather
/// than compute wrong results.
#[no_mangle]
pub extern "C" fn __tgt_rtl_init_requires(flags: i64) -> i64 {
    const UNIFIED_SHARED_MEMORY: i64 = 0x008;
    guard("init_requires", || {
        if flags & UNIFIED_SHARED_MEMORY != 0 {
            eprintln!("ompcluster: `#pragma omp requires unified_shared_memory` cannot work across processes; this program needs a shared-memory device");
            std::process::exit(2);
        }
        flags
    })
}

/// Send an image to the workers and return the table of device entries.
///
/// # Safety
/// `image` is a `__tgt_device_image` from libomptarget.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_load_binary(dev: i32, image: *mut c_void) -> *mut TargetTable {
    guard_traced("load_binary", None, || {
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
            Ok(t) => {
                if !t.is_null() {
                    // SAFETY: `t` is the table just returned for this image, valid for the
                    // life of the program.
                    unsafe { crate::kernels::register_image(&*t, bytes) };
                }
                t
            }
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
    guard_traced("data_alloc", Some(size), || {
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
    guard_traced("data_delete", None, || {
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
    // SAFETY: the caller's contract; no queue.
    guard_traced("data_submit", Some(size), || unsafe { submit(dev, tgt, host, size, std::ptr::null_mut()) })
}

/// Host to device, behind the operations queued on `info` (at once if none are).
///
/// # Safety
/// As for [`__tgt_rtl_data_submit`]; `info` is null or libomptarget's `__tgt_async_info`.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_data_submit_async(dev: i32, tgt: *mut c_void, host: *mut c_void, size: i64, info: *mut AsyncInfo) -> i32 {
    // SAFETY: the caller's contract.
    guard_traced("data_submit_async", Some(size), || unsafe { submit(dev, tgt, host, size, info) })
}

/// Device to host.
///
/// # Safety
/// `host` must point to `size` writable bytes (libomptarget's contract).
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_data_retrieve(dev: i32, host: *mut c_void, tgt: *mut c_void, size: i64) -> i32 {
    // SAFETY: the caller's contract; no queue.
    guard_traced("data_retrieve", Some(size), || unsafe { retrieve(dev, host, tgt, size, std::ptr::null_mut()) })
}

/// Device to host, behind the operations queued on `info` (a `from` map of a `nowait`
/// region: after its kernel), or at once if none are.
///
/// # Safety
/// As for [`__tgt_rtl_data_retrieve`], and `host` stays writable until `info`'s queue is
/// done; `info` is null or libomptarget's `__tgt_async_info`.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_data_retrieve_async(dev: i32, host: *mut c_void, tgt: *mut c_void, size: i64, info: *mut AsyncInfo) -> i32 {
    // SAFETY: the caller's contract.
    guard_traced("data_retrieve_async", Some(size), || unsafe { retrieve(dev, host, tgt, size, info) })
}

/// Device-to-device copies stay inside the cluster device.
#[no_mangle]
pub extern "C" fn __tgt_rtl_is_data_exchangable(src: i32, dst: i32) -> i32 {
    guard("is_data_exchangable", || i32::from(src == 0 && dst == 0))
}

/// Device to device (`omp_target_memcpy` between device pointers).
///
/// # Safety
/// `src` and `dst` are `size` bytes of this device's memory (libomptarget's contract).
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_data_exchange(src_dev: i32, src: *mut c_void, dst_dev: i32, dst: *mut c_void, size: i64) -> i32 {
    // SAFETY: the caller's contract; no queue.
    guard_traced("data_exchange", Some(size), || unsafe { exchange(src_dev, src, dst_dev, dst, size, std::ptr::null_mut()) })
}

/// Device to device, behind the operations queued on `info`, or at once if none are.
///
/// # Safety
/// `info` is null or libomptarget's `__tgt_async_info`.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_data_exchange_async(src_dev: i32, src: *mut c_void, dst_dev: i32, dst: *mut c_void, size: i64, info: *mut AsyncInfo) -> i32 {
    // SAFETY: the caller's contract.
    guard_traced("data_exchange_async", Some(size), || unsafe { exchange(src_dev, src, dst_dev, dst, size, info) })
}

/// A submit: at once without a queue on `info`, else queued with a copy of its bytes (the
/// source may not outlive the call: a first-private buffer on the caller's stack).
///
/// # Safety
/// `host` points to `size` readable bytes; `info` is null or libomptarget's.
unsafe fn submit(dev: i32, tgt: *mut c_void, host: *mut c_void, size: i64, info: *mut AsyncInfo) -> i32 {
    let Some(c) = head(dev, size, host) else { return OFFLOAD_FAIL };
    let tgt = tgt as u64;
    // SAFETY: `info` is null or libomptarget's (the caller's contract).
    let Some(q) = (unsafe { queue_of(info) }) else {
        // SAFETY: `size` readable bytes at `host` (the caller's contract).
        return code("data_submit", unsafe { c.submit(tgt, host as *const u8, size as u64) });
    };
    let bytes = if size == 0 {
        Vec::new()
    } else {
        // SAFETY: `size` readable bytes at `host`, not null when `size` > 0 (`head`).
        unsafe { std::slice::from_raw_parts(host as *const u8, size as usize) }.to_vec()
    };
    q.push(Box::new(move || {
        // SAFETY: `bytes` is a local vector of `len` readable bytes.
        let r = guard("data_submit_async", || unsafe { c.submit(tgt, bytes.as_ptr(), bytes.len() as u64) });
        r.map_err(|e| format!("data_submit failed: {e}"))
    }));
    OFFLOAD_SUCCESS
}

/// A retrieve: at once without a queue on `info`, else queued (after the region's kernel).
///
/// # Safety
/// `host` points to `size` writable bytes, which stay writable until `info`'s queue is done
/// (libomptarget post-processes a region only after); `info` is null or libomptarget's.
unsafe fn retrieve(dev: i32, host: *mut c_void, tgt: *mut c_void, size: i64, info: *mut AsyncInfo) -> i32 {
    let Some(c) = head(dev, size, host) else { return OFFLOAD_FAIL };
    let (host, tgt) = (host as usize, tgt as u64);
    // SAFETY: `info` is null or libomptarget's (the caller's contract).
    let Some(q) = (unsafe { queue_of(info) }) else {
        // SAFETY: `size` writable bytes at `host` (the caller's contract).
        return code("data_retrieve", unsafe { c.retrieve(host as *mut u8, tgt, size as u64) });
    };
    q.push(Box::new(move || {
        // SAFETY: the bytes at `host` are writable until the queue is done (the contract).
        let r = guard("data_retrieve_async", || unsafe { c.retrieve(host as *mut u8, tgt, size as u64) });
        r.map_err(|e| format!("data_retrieve failed: {e}"))
    }));
    OFFLOAD_SUCCESS
}

/// A device-to-device copy: at once without a queue on `info`, else queued.
///
/// # Safety
/// `info` is null or libomptarget's.
unsafe fn exchange(src_dev: i32, src: *mut c_void, dst_dev: i32, dst: *mut c_void, size: i64, info: *mut AsyncInfo) -> i32 {
    let Some(c) = head(0, size, std::ptr::NonNull::dangling().as_ptr()) else { return OFFLOAD_FAIL };
    if src_dev != 0 || dst_dev != 0 {
        return OFFLOAD_FAIL;
    }
    let (src, dst) = (src as u64, dst as u64);
    // SAFETY: `info` is null or libomptarget's (the caller's contract).
    let Some(q) = (unsafe { queue_of(info) }) else { return code("data_exchange", c.copy(src, dst, size as u64)) };
    q.push(Box::new(move || {
        let r = guard("data_exchange_async", || c.copy(src, dst, size as u64));
        r.map_err(|e| format!("data_exchange failed: {e}"))
    }));
    OFFLOAD_SUCCESS
}

/// Run a target region on a worker: at once, or with `nowait`, on a queue of its own (the
/// call returns once it is queued; `query_async` tells when it is done).
///
/// # Safety
/// `args` and `offsets` have `kargs->num_args` elements (libomptarget's contract); `info` is
/// null or libomptarget's `__tgt_async_info`.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_launch_kernel(
    dev: i32,
    entry: *mut c_void,
    args: *mut *mut c_void,
    offsets: *mut isize,
    kargs: *mut KernelArgs,
    info: *mut AsyncInfo,
) -> i32 {
    guard_traced("launch_kernel", None, || {
        crate::stack::note_launch();
        let Some(c) = head(dev, 0, std::ptr::null_mut()) else { return OFFLOAD_FAIL };
        if kargs.is_null() {
            return OFFLOAD_FAIL;
        }
        // Kernels of clang-18 and later (KernelArgs version 3) take a null `dyn_ptr` first;
        // an unknown version is refused, naming the compiler (`kernels.rs`).
        // SAFETY: checked non-null above; libomptarget's KernelArgsTy.
        let version = unsafe { (*kargs).version };
        let abi = match crate::kernels::launch_abi(entry as usize, version) {
            Ok(abi) => abi,
            Err(msg) => {
                // As for `requires unified_shared_memory`: one line and a clean stop, rather
                // than a crash in device code.
                eprintln!("ompcluster: {msg}");
                std::process::exit(2);
            }
        };
        // Everything is copied now: the arrays live in libomptarget's frame.
        // SAFETY: libomptarget passes a valid KernelArgsTy and `num_args` arguments/offsets.
        let ((mut values, mut begins), (mut written, mut hosts), nowait) = unsafe {
            let n = (*kargs).num_args as usize;
            if n > 0 && (args.is_null() || offsets.is_null()) {
                return OFFLOAD_FAIL;
            }
            // `args[i]` is the begin of the mapped section (inside its buffer); the kernel gets
            // the base, `args[i] + offsets[i]`, which lies before the buffer for sections
            // that do not start at element 0.
            let begins: Vec<u64> = (0..n).map(|i| *args.add(i) as u64).collect();
            let values: Vec<u64> = (0..n).map(|i| begins[i].wrapping_add(*offsets.add(i) as u64)).collect();
            ((values, begins), arg_maps(&*kargs, n), (*kargs).nowait())
        };
        crate::kernels::apply(abi, &mut values, &mut begins, &mut hosts, &mut written);
        let entry = entry as usize;
        if !nowait || info.is_null() || c.expect_short(entry) {
            return code("launching the target region", c.launch(entry, &values, &begins, &hosts, &written));
        }
        let op: crate::queues::Op = Box::new(move || {
            let r = guard("launch_kernel", || c.launch(entry, &values, &begins, &hosts, &written));
            r.map_err(|e| format!("launching the target region failed: {e}"))
        });
        // SAFETY: `info` is libomptarget's (the caller's contract).
        match unsafe { queue_of(info) } {
            Some(q) => q.push(op),
            // SAFETY: as above; the pointer stored holds the queue's reference until a query
            // or a synchronize finds it done.
            None => unsafe { (*info).queue = Queue::into_raw(Queue::start(op)) },
        }
        OFFLOAD_SUCCESS
    })
}

/// Whether `info`'s queue is done, without waiting: 0 either way (its pointer cleared once
/// done), -1 if an operation on it failed.
///
/// # Safety
/// `info` is null or libomptarget's `__tgt_async_info`.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_query_async(dev: i32, info: *mut AsyncInfo) -> i32 {
    guard("query_async", || {
        // SAFETY: the caller's contract.
        unsafe { settle(dev, info, |q| q.query()) }
    })
}

/// Wait until `info`'s queue is done: 0, or -1 if an operation on it failed.
///
/// # Safety
/// `info` is null or libomptarget's `__tgt_async_info`.
#[no_mangle]
pub unsafe extern "C" fn __tgt_rtl_synchronize(dev: i32, info: *mut AsyncInfo) -> i32 {
    guard("synchronize", || {
        // SAFETY: the caller's contract.
        unsafe { settle(dev, info, |q| q.wait()) }
    })
}

/// The cluster device, if this is the head and `dev` is it, and if `size` bytes at `host` make
/// a sane transfer (`host` null only for none; pass a dangling non-null pointer for calls
/// without a host side).
fn head(dev: i32, size: i64, host: *mut c_void) -> Option<&'static crate::cluster::Cluster> {
    let Some(Runtime::Head(c)) = runtime::get() else { return None };
    (dev == 0 && size >= 0 && !(host.is_null() && size > 0)).then_some(c)
}

/// The queue `info` holds, if any.
///
/// # Safety
/// `info` is null or libomptarget's `__tgt_async_info`, whose pointer we set.
unsafe fn queue_of(info: *mut AsyncInfo) -> Option<std::sync::Arc<Queue>> {
    if info.is_null() {
        return None;
    }
    // SAFETY: the caller's contract; a non-null pointer in it was made by `Queue::into_raw`
    // and is still held (cleared when released).
    unsafe {
        let q = (*info).queue;
        (!q.is_null()).then(|| Queue::borrow(q))
    }
}

/// Ask `info`'s queue how it is (`how`: at once or waiting), and once it is done (or failed)
/// give back its pointer's reference and clear it.
///
/// # Safety
/// As for [`queue_of`].
unsafe fn settle(dev: i32, info: *mut AsyncInfo, how: impl FnOnce(&Queue) -> Progress) -> i32 {
    if dev != 0 || info.is_null() {
        return OFFLOAD_FAIL;
    }
    // SAFETY: the caller's contract.
    let Some(q) = (unsafe { queue_of(info) }) else { return OFFLOAD_SUCCESS };
    let progress = how(&q);
    if progress != Progress::Pending {
        // SAFETY: the pointer holds one reference (see `queue_of`), given back once: it is
        // cleared at the same time.
        unsafe {
            Queue::release((*info).queue);
            (*info).queue = std::ptr::null_mut();
        }
    }
    if progress == Progress::Failed {
        OFFLOAD_FAIL
    } else {
        OFFLOAD_SUCCESS
    }
}

/// Images must contain code.
#[no_mangle]
pub extern "C" fn __tgt_rtl_supports_empty_images() -> i32 {
    guard("supports_empty_images", || 0)
}

#[cfg(test)]
mod tests;
