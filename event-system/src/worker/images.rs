//! Device images on a worker: written to a private temporary directory, `dlopen`ed, and
//! their kernels and globals resolved by name, as the stock x86_64 plugin does.

use std::ffi::{CStr, CString};
use std::io::Write;
use std::path::Path;

/// A loaded image.
#[derive(Debug)]
pub(crate) struct Image {
    handle: usize,
    /// Kernel entry addresses, in the head's order.
    pub(crate) kernels: Vec<usize>,
}

fn dlerror() -> String {
    // SAFETY: dlerror returns either null or a valid C string owned by libdl.
    unsafe {
        let e = libc::dlerror();
        if e.is_null() {
            "unknown dlopen error".into()
        } else {
            CStr::from_ptr(e).to_string_lossy().into_owned()
        }
    }
}

impl Image {
    /// Write `bytes` to a new file in `dir` (private to this user), dlopen it and resolve
    /// `kernels` and `globals`. Returns the image and the local address of each global.
    pub(crate) fn load(dir: &Path, bytes: &[u8], kernels: &[String], globals: &[String]) -> Result<(Self, Vec<u64>), String> {
        let mut file = tempfile::Builder::new()
            .prefix("image-")
            .suffix(".so")
            .tempfile_in(dir)
            .map_err(|e| format!("cannot create image file: {e}"))?;
        file.write_all(bytes).and_then(|_| file.flush()).map_err(|e| format!("cannot write image: {e}"))?;
        let path = CString::new(file.path().as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
        // SAFETY: `path` is a NUL-terminated path to a complete ELF shared object we wrote.
        // Loading runs the image's initialisers, exactly as the stock plugin does.
        let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(format!("dlopen of device image failed: {}", dlerror()));
        }
        // The mapping stays valid after the file is removed (when `file` drops).
        let image = Image { handle: handle as usize, kernels: Vec::new() };
        let lookup = |name: &str| -> Result<u64, String> {
            let c = CString::new(name).map_err(|e| e.to_string())?;
            // SAFETY: `handle` is a live dlopen handle and `c` a valid C string.
            let p = unsafe { libc::dlsym(image.handle as *mut libc::c_void, c.as_ptr()) };
            if p.is_null() {
                Err(format!("symbol {name} not found in the device image"))
            } else {
                Ok(p as u64)
            }
        };
        let kernel_addrs = kernels.iter().map(|k| lookup(k).map(|a| a as usize)).collect::<Result<Vec<_>, _>>()?;
        let global_addrs = globals.iter().map(|g| lookup(g)).collect::<Result<Vec<_>, _>>()?;
        Ok((Image { kernels: kernel_addrs, ..image }, global_addrs))
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        // Images stay loaded for the life of the process (kernels may be running); the handle
        // is intentionally never closed. Nothing to do.
        let _ = self.handle;
    }
}
