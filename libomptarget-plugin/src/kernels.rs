//! The argument layout of each launch, by compiler generation (`event_system::compilers`).
//!
//! libomptarget 16 hands `launch_kernel` the program's own `KernelArgsTy`, whose `version` the
//! compiler chose: kernels of version-3 compilers (clang-18 and later, flang-19) take a
//! leading `dyn_ptr` before the mapped arguments, so the launch puts a null one first (the
//! device code of clang ignores it; flang's passes it to `__kmpc_target_init`, which ignores
//! it too). A version this runtime does not know is refused with the compiler that built the
//! kernel's image, which [`register_image`] records per kernel when the image is loaded.

use crate::ctypes::TargetTable;
use event_system::compilers::{self, KernelAbi, Producer};
use parking_lot::RwLock;
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// A kernel's name and the compiler of its image.
#[derive(Debug)]
struct Kernel {
    name: String,
    producer: Arc<Producer>,
}

/// Kernels by device entry address (the `entry` libomptarget passes to `launch_kernel`).
static KERNELS: RwLock<Option<FxHashMap<usize, Kernel>>> = RwLock::new(None);

/// Remember who compiled the image `bytes`, whose device entries `table` lists.
///
/// # Safety
/// `table` is the entry table the plugin returned for the image: its entries are valid.
pub(crate) unsafe fn register_image(table: &TargetTable, bytes: &[u8]) {
    let producer = Arc::new(match event_system::elf::ElfImage::parse(bytes) {
        Ok(img) => Producer::of_image(&img),
        Err(_) => Producer::from_parts([], false),
    });
    let mut kernels = KERNELS.write();
    let map = kernels.get_or_insert_with(FxHashMap::default);
    let mut e = table.entries_begin;
    while e < table.entries_end {
        // SAFETY: `e` lies in the table's entry range (the caller's contract).
        let entry = unsafe { &*e };
        if entry.size == 0 && !entry.addr.is_null() {
            let name = entry.name_str().unwrap_or_else(|| format!("{:p}", entry.addr));
            map.insert(entry.addr as usize, Kernel { name, producer: Arc::clone(&producer) });
        }
        // SAFETY: stepping through the same range, stopping at its end.
        e = unsafe { e.add(1) };
    }
}

/// The layout of a launch of `entry` with `KernelArgsTy` version `version`, or the message
/// refusing it. The version decides (it comes from the code that emitted the launch and the
/// kernel); an image that says otherwise is reported once, on standard error.
pub(crate) fn launch_abi(entry: usize, version: u32) -> Result<KernelAbi, String> {
    let kernels = KERNELS.read();
    let kernel = kernels.as_ref().and_then(|m| m.get(&entry));
    let Some(abi) = KernelAbi::of_version(version) else {
        let unknown = Producer::from_parts([], false);
        let (name, producer) = kernel.map_or(("?", &unknown), |k| (k.name.as_str(), &*k.producer));
        return Err(compilers::unknown_kernel_args(version, name, producer));
    };
    if let Some(k) = kernel {
        let expects = k.producer.takes_dyn_ptr();
        if expects.is_some_and(|d| d != (abi == KernelAbi::DynPtrFirst)) {
            warn_once(&k.name, &k.producer, version);
        }
    }
    Ok(abi)
}

fn warn_once(name: &str, producer: &Producer, version: u32) {
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        eprintln!(
            "ompcluster: warning: target region {name} comes from an image compiled by {}, but its launch has kernel-argument version {version}: following the launch",
            producer.describe()
        );
    });
}

/// Put `dyn_ptr` first where the layout wants it: a null pointer, which is no device address
/// (not mapped, not written, no host counterpart).
pub(crate) fn apply(abi: KernelAbi, values: &mut Vec<u64>, begins: &mut Vec<u64>, hosts: &mut Vec<u64>, written: &mut Vec<bool>) {
    if abi == KernelAbi::DynPtrFirst {
        values.insert(0, 0);
        begins.insert(0, 0);
        hosts.insert(0, 0);
        written.insert(0, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ctypes::OffloadEntry;

    #[test]
    fn a_version_3_launch_gets_a_null_dyn_ptr_first_and_an_unknown_one_is_refused_naming_the_compiler() {
        let name = c"__omp_offloading_fe00_1_main_l5";
        let mut entries = [OffloadEntry { addr: 0x7000_0000 as *mut _, name: name.as_ptr(), size: 0, flags: 0, reserved: 0 }];
        let table = TargetTable { entries_begin: entries.as_mut_ptr(), entries_end: entries.as_mut_ptr().wrapping_add(1) };
        // Not an ELF image: the compiler is unknown, the versions still decide.
        // SAFETY: the table's one entry is valid.
        unsafe { register_image(&table, b"not an image") };
        assert_eq!(launch_abi(0x7000_0000, 2), Ok(KernelAbi::Plain));
        assert_eq!(launch_abi(0x7000_0000, 3), Ok(KernelAbi::DynPtrFirst));
        let e = launch_abi(0x7000_0000, 4).unwrap_err();
        assert!(e.contains("__omp_offloading_fe00_1_main_l5") && e.contains("version 4") && e.contains("an unknown compiler"), "{e}");
        let (mut v, mut b, mut h, mut w) = (vec![10, 11], vec![10, 11], vec![1, 2], vec![true, false]);
        apply(KernelAbi::DynPtrFirst, &mut v, &mut b, &mut h, &mut w);
        assert_eq!((v, b, h, w), (vec![0, 10, 11], vec![0, 10, 11], vec![0, 1, 2], vec![false, true, false]));
        let mut v = vec![5];
        apply(KernelAbi::Plain, &mut v, &mut vec![5], &mut vec![0], &mut vec![false]);
        assert_eq!(v, vec![5]);
    }
}
