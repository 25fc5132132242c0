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
use std::collections::HashMap;
use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

thread_local! {
    /// Call interfaces by argument count, built once per thread: every kernel takes
    /// pointer-sized arguments and returns nothing, so the count is all that differs.
    static CIFS: RefCell<HashMap<usize, Cif>> = RefCell::new(HashMap::new());
}

/// Call `entry` with `args`.
///
/// # Safety
/// `entry` must be a kernel of a loaded device image taking `args.len()` pointer-sized
/// arguments, and every device address among `args` must be backed on this worker.
pub(crate) unsafe fn call_kernel(entry: usize, args: &[u64]) {
    let values: Vec<usize> = args.iter().map(|&a| a as usize).collect();
    let ffi_args: Vec<Arg> = values.iter().map(Arg::new).collect();
    CIFS.with(|cifs| {
        cifs.borrow_mut()
            .entry(args.len())
            .or_insert_with(|| Cif::new(std::iter::repeat_n(Type::pointer(), args.len()), Type::void()));
        // A shared borrow during the call: a kernel never calls back into this worker, and
        // if it did, another shared borrow would still be fine.
        let cifs = cifs.borrow();
        // SAFETY: the caller guarantees the signature; `values` outlives the call.
        unsafe { cifs[&args.len()].call::<()>(CodePtr(entry as *mut libc::c_void), &ffi_args) };
    });
}

/// Hash of the bytes of a region at `ptr` in `pieces` (offset ranges, in order).
///
/// # Safety
/// Every piece `ptr+start..ptr+end` must be readable.
pub(crate) unsafe fn hash(ptr: *const u8, pieces: &[(usize, usize)]) -> u64 {
    pieces.iter().fold(0, |h, &(s, e)| {
        // SAFETY: the caller guarantees readability of each piece.
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
