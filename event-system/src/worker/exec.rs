//! Calling a kernel: every argument is a pointer-sized value (device address plus offset, or a
//! by-value literal), passed through libffi, as the stock x86_64 plugin does.
//!
//! Around the call the worker hashes every region the kernel can reach, to learn which ones it
//! changed (the kernel's write set), and scans changed regions for device pointers (so the head
//! can track buffers reachable through pointers a kernel stored).

#[cfg(test)]
use crate::protocol::{scan_pointers, FoundPointers};
use libffi::middle::{Arg, Cif, CodePtr, Type};
use std::cell::RefCell;
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

thread_local! {
    /// Call interfaces by argument count, built once per thread: every kernel takes
    /// pointer-sized arguments and returns nothing, so the count is all that differs.
    static CIFS: RefCell<Vec<Option<Cif>>> = const { RefCell::new(Vec::new()) };
}

/// Kernels with at most this many arguments are called without allocating.
const INLINE_ARGS: usize = 16;

/// Call `entry` with `args`.
///
/// # Safety
/// `entry` must be a kernel of a loaded device image taking `args.len()` pointer-sized
/// arguments, and every device address among `args` must be backed on this worker.
pub(crate) unsafe fn call_kernel(entry: usize, args: &[u64]) {
    // libffi reads each argument through a pointer to it, as the pointer-sized value the call
    // interface declares: the u64 itself, on the 64-bit targets the runtime is built for.
    const _: () = assert!(std::mem::size_of::<u64>() == std::mem::size_of::<usize>());
    // With replicas, the team size all workers agreed on (`same_sums.rs`).
    super::same_sums::enter_kernel();
    let n = args.len();
    CIFS.with(|cifs| {
        if cifs.borrow().get(n).is_none_or(|c| c.is_none()) {
            let mut cifs = cifs.borrow_mut();
            if cifs.len() <= n {
                cifs.resize_with(n + 1, || None);
            }
            cifs[n] = Some(Cif::new(std::iter::repeat_n(Type::pointer(), n), Type::void()));
        }
        // A shared borrow during the call: a kernel never calls back into this worker, and
        // if it did, another shared borrow would still be fine.
        let cifs = cifs.borrow();
        let cif = cifs[n].as_ref().expect("built above");
        let code = CodePtr(entry as *mut libc::c_void);
        if n <= INLINE_ARGS {
            let mut buf = [const { std::mem::MaybeUninit::<Arg>::uninit() }; INLINE_ARGS];
            for (slot, a) in buf.iter_mut().zip(args) {
                slot.write(Arg::new(a));
            }
            // SAFETY: the first `n` slots were written just above; `Arg` is a plain pointer
            // wrapper (no drop), so viewing them as initialised `Arg`s is sound.
            let ffi_args: &[Arg] = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<Arg>(), n) };
            // SAFETY: the caller guarantees the signature; `args` outlives the call.
            unsafe { cif.call::<()>(code, ffi_args) };
        } else {
            let ffi_args: Vec<Arg> = args.iter().map(Arg::new).collect();
            // SAFETY: as above.
            unsafe { cif.call::<()>(code, &ffi_args) };
        }
    });
}

/// Hash of the `len` bytes of a region at `ptr`, or of its `pieces` (offset ranges, in order)
/// only.
///
/// # Safety
/// `ptr..ptr+len` must be readable.
pub(crate) unsafe fn hash(ptr: *const u8, len: usize, pieces: Option<&[(usize, usize)]>) -> u64 {
    let Some(pieces) = pieces else {
        // SAFETY: the caller guarantees readability.
        return xxh3_64(unsafe { std::slice::from_raw_parts(ptr, len) });
    };
    pieces.iter().fold(0, |h, &(s, e)| {
        // SAFETY: the caller guarantees readability of the region, which holds the pieces.
        let bytes = unsafe { std::slice::from_raw_parts(ptr.add(s), e - s) };
        if h == 0 && s == 0 {
            xxh3_64(bytes)
        } else {
            xxh3_64_with_seed(bytes, h ^ s as u64)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    extern "C" fn add3(a: *mut u64, b: u64, c: u64) {
        // SAFETY: the test passes a valid pointer.
        unsafe { *a = b + c };
    }

    #[test]
    fn calls_with_pointer_and_literal_arguments() {
        let mut out = 0u64;
        let args = [&mut out as *mut u64 as u64, 40, 2];
        // SAFETY: add3 takes three pointer-sized arguments; `out` is live.
        unsafe { call_kernel(add3 as *const () as usize, &args) };
        assert_eq!(out, 42);
    }

    #[test]
    fn scans_for_heap_pointers() {
        let words: Vec<u64> = vec![5, 0x1000, 0x1fff, 0x2000, 0x1000];
        // SAFETY: reading our own vector.
        let found = unsafe { scan_pointers(words.as_ptr().cast(), words.len() * 8, 0x1000, 0x2000) };
        assert_eq!(found, FoundPointers::Some(vec![0x1000, 0x1fff]));
        let many: Vec<u64> = (0..5000).map(|i| 0x1000 + i).collect();
        // SAFETY: as above.
        let found = unsafe { scan_pointers(many.as_ptr().cast(), many.len() * 8, 0x1000, 0x100000) };
        assert_eq!(found, FoundPointers::Many);
    }
}
