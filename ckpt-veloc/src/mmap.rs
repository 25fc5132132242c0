//! A read-only memory map of a scratch file, so that the flusher can hash
//! and write each region straight from the page cache without first
//! copying it into a buffer.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Read-only shared mapping of the first `len` bytes of a file.
pub(crate) struct ReadMap {
    ptr: *mut libc::c_void,
    len: usize,
}

// SAFETY: the mapping is read-only and owned by this value; the raw
// pointer is only turned into `&[u8]` tied to `&self`.
unsafe impl Send for ReadMap {}

impl ReadMap {
    /// Maps `len` bytes of `file` (which must be at least that long and
    /// must not shrink while mapped: the store's private scratch files
    /// are only appended to, and never while they are being flushed).
    pub(crate) fn new(file: &File, len: u64) -> io::Result<Self> {
        let len = usize::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file too large to map"))?;
        let file_len = file.metadata()?.len();
        if (file_len as u128) < len as u128 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("scratch file has {file_len} bytes, expected at least {len}"),
            ));
        }
        if len == 0 {
            return Ok(ReadMap {
                ptr: std::ptr::null_mut(),
                len: 0,
            });
        }
        // SAFETY: a fresh mapping chosen by the kernel (addr = NULL), of a
        // valid open descriptor, read-only, pre-faulted (MAP_POPULATE: the
        // pages are normally still in the page cache); checked below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: advice on the mapping just created, of exactly its length.
        // Only a hint: its result does not matter.
        unsafe {
            libc::madvise(ptr, len, libc::MADV_SEQUENTIAL);
        }
        Ok(ReadMap { ptr, len })
    }

    /// The mapped bytes.
    pub(crate) fn as_slice(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `ptr` is a live PROT_READ mapping of `len` bytes owned by
        // `self` and unmapped only in `Drop`; the file is at least `len`
        // bytes long (checked in `new`) and is not truncated while mapped
        // (the store owns it in a private directory), so every page is
        // readable. Nothing writes through the mapping.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }
}

impl Drop for ReadMap {
    fn drop(&mut self) {
        if self.len != 0 {
            // SAFETY: unmaps exactly the mapping created in `new`; no slice
            // borrowed from it can outlive `self`.
            unsafe {
                libc::munmap(self.ptr, self.len);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn maps_file_contents() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"abcdef").unwrap();
        let m = ReadMap::new(&f, 4).unwrap();
        assert_eq!(m.as_slice(), b"abcd");
        assert!(ReadMap::new(&f, 7).is_err());
        assert_eq!(ReadMap::new(&f, 0).unwrap().as_slice(), b"");
    }
}
