//! The C structures of the libomptarget 16 plugin interface
//! (`openmp/libomptarget/include/omptarget.h`, `src/rtl.cpp`), shared by the exported shims
//! ([`crate::abi`]) and the cluster device, which builds entry tables from them.

use std::ffi::{c_void, CStr};

/// `__tgt_offload_entry`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct OffloadEntry {
    /// Host address (function id or global), replaced by the device address in our table.
    pub addr: *mut c_void,
    /// Symbol name.
    pub name: *const libc::c_char,
    /// 0 for functions, bytes for globals.
    pub size: usize,
    /// Flags (link, ctor, dtor).
    pub flags: i32,
    /// Reserved.
    pub reserved: i32,
}

impl OffloadEntry {
    /// The entry's name.
    pub fn name_str(&self) -> Option<String> {
        if self.name.is_null() {
            return None;
        }
        // SAFETY: libomptarget entry names are NUL-terminated strings in the program's
        // read-only data, valid for the life of the program.
        Some(unsafe { CStr::from_ptr(self.name) }.to_string_lossy().into_owned())
    }
}

/// `__tgt_device_image`.
#[repr(C)]
#[derive(Debug)]
pub struct DeviceImage {
    /// First byte of the image.
    pub image_start: *mut c_void,
    /// One past the last byte.
    pub image_end: *mut c_void,
    /// Entries (the host table).
    pub entries_begin: *mut OffloadEntry,
    /// End of entries.
    pub entries_end: *mut OffloadEntry,
}

/// `__tgt_target_table`.
#[repr(C)]
#[derive(Debug)]
pub struct TargetTable {
    /// First entry.
    pub entries_begin: *mut OffloadEntry,
    /// One past the last.
    pub entries_end: *mut OffloadEntry,
}

/// The leading fields of `KernelArgsTy` (LLVM 16; versions 1 to 3 share them, see
/// `event_system::compilers`). libomptarget overwrites `num_args` with the
/// number of kernel arguments before `launch_kernel`; `arg_types` still lists every map entry
/// of the construct, and the i-th kernel argument is the i-th entry flagged `TARGET_PARAM`
/// (`processDataBefore` in `src/omptarget.cpp`).
#[repr(C)]
#[derive(Debug)]
pub struct KernelArgs {
    /// Struct version.
    pub version: u32,
    /// Number of kernel arguments.
    pub num_args: u32,
    /// Base host pointers of the map entries.
    pub arg_base_ptrs: *mut *mut c_void,
    /// Host pointers of the map entries.
    pub arg_ptrs: *mut *mut c_void,
    /// Sizes of the map entries.
    pub arg_sizes: *mut i64,
    /// Map types of the map entries.
    pub arg_types: *mut i64,
    /// Names of the map entries (debugging), possibly null.
    pub arg_names: *mut *mut c_void,
    /// User-defined mappers, possibly null.
    pub arg_mappers: *mut *mut c_void,
    /// Trip count of a teams/distribute loop, 0 otherwise.
    pub tripcount: u64,
    /// Bit 0: the construct has `nowait` (version 2 and later).
    pub flags: u64,
}

impl KernelArgs {
    /// Was the region launched with `nowait`? (Version 1 has no flags: never.)
    pub fn nowait(&self) -> bool {
        self.version >= 2 && self.flags & 1 != 0
    }
}

/// `__tgt_async_info`: the queue of a construct's operations, ours to set
/// ([`crate::queues`]); null when nothing of it is pending.
#[repr(C)]
#[derive(Debug)]
pub struct AsyncInfo {
    /// A pointer made by `Queue::into_raw`, or null.
    pub queue: *mut c_void,
}
