//! Which pages of a buffer a kernel changed, at a cost that follows what it writes.
//!
//! Hashing every buffer a kernel can reach before and after the call costs two passes over
//! all of them, however little the kernel writes. Instead, every buffer of at least
//! [`TRACK_MIN`] bytes a worker backs is write-protected through a userfaultfd in asynchronous write-protect mode (Linux 6.7+):
//! the first write to a protected page only clears its protection, inside the kernel's page
//! fault, with no signal and no thread of ours involved. The `PAGEMAP_SCAN` ioctl then lists
//! the pages written since the last scan and protects them again, atomically. Each tracked
//! buffer keeps a hash of every page ([`Pages`]) and the device pointers each page holds: a
//! scan rehashes the written pages only, and a page counts as changed only if its hash did
//! (a kernel that writes the same bytes back changes nothing, as with whole hashing).
//!
//! A write fault costs about 1 us per 4 KiB page here (measured: writing 16 MiB took 4.4 ms
//! protected, 0.66 ms unprotected), more than hashing the page twice. So a buffer whose last
//! kernel changed most of its pages is *dense*: it is unprotected while a kernel runs, and
//! the scan after the kernel rehashes all of it, one pass instead of the two of whole
//! hashing. Writes between kernels (transfers, which the head sends to copies no kernel
//! uses) find the buffer protected, so the page hashes stay exact.
//!
//! Where the mechanism is missing (an older kernel, a container that forbids userfaultfd,
//! `OMPCLUSTER_WRITE_DETECTION=hash`), every buffer is hashed whole as before: chosen once per
//! process, see [`mechanism`].
//!
//! Design note (concurrency): a buffer's [`Pages`] sits behind its own mutex, held across a
//! scan and the rehash of what it found, so that no write seen by a scan is lost to another
//! thread's view. A kernel notes the buffer's change count after the scan before its call
//! and compares it with the count after the scan that follows the call: any change in
//! between, its own or a concurrent kernel's on the same copy, counts for it, exactly as a
//! change between two whole hashes would.

use crate::protocol::{scan_pointers, FoundPointers, MAX_POINTERS};
use linux_raw_sys::general as sys;
use linux_raw_sys::ioctl::{UFFDIO_API, UFFDIO_REGISTER, UFFDIO_WRITEPROTECT};
use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::OnceLock;
use xxhash_rust::xxh3::xxh3_64;

/// Tracking granularity: the base page size of x86_64 Linux.
pub(crate) const PAGE: u64 = 4096;

/// Smaller buffers are hashed whole: two passes over them cost less than the scans and
/// faults of tracking (measured with bench/region_costs.py: at 4 KiB and 64 KiB, hashing
/// 8.2 and 11.4 us per region, tracking 11.1 and 16.5 us).
pub(crate) const TRACK_MIN: u64 = 256 << 10;

/// Above this share of its pages changed by a kernel, a buffer is unprotected during the
/// next kernel (see the module documentation).
const DENSE_SHARE: f64 = 0.25;

/// What `OMPCLUSTER_WRITE_DETECTION` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Detection {
    /// Page tracking where the system allows it, else hashing.
    Auto,
    /// Page tracking, or the worker fails to start.
    Pages,
    /// Hash whole buffers.
    Hash,
}

impl std::str::FromStr for Detection {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "auto" => Ok(Detection::Auto),
            "pages" => Ok(Detection::Pages),
            "hash" => Ok(Detection::Hash),
            other => Err(format!("{other:?}: expected auto, pages or hash")),
        }
    }
}

/// The process's userfaultfd and `/proc/self/pagemap`, once page tracking works here.
#[derive(Debug)]
pub(crate) struct Tracker {
    uffd: OwnedFd,
    pagemap: File,
}

/// How this process detects writes: the tracker, or why there is none.
static MECHANISM: OnceLock<Result<Tracker, String>> = OnceLock::new();

/// `UFFDIO_WRITEPROTECT_MODE_WP`, a macro with a cast (absent from the generated constants).
const UFFDIO_WRITEPROTECT_MODE_WP: u64 = 1;

/// `_IOWR('f', 16, struct pm_scan_arg)`, absent from the generated constants.
const PAGEMAP_SCAN: u64 = (3 << 30) | ((std::mem::size_of::<sys::pm_scan_arg>() as u64) << 16) | ((b'f' as u64) << 8) | 16;

fn errno_text(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

impl Tracker {
    /// Sets up page tracking and checks it on a scratch page, or says why it cannot work.
    fn open() -> Result<Tracker, String> {
        // SAFETY: plain system call; the flags are valid for userfaultfd(2). User-mode-only
        // faults need no privilege (vm.unprivileged_userfaultfd does not apply to them).
        let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | libc::O_NONBLOCK | sys::UFFD_USER_MODE_ONLY as libc::c_int) };
        if fd < 0 {
            return Err(errno_text("userfaultfd"));
        }
        // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
        let uffd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        let mut api = sys::uffdio_api {
            api: sys::UFFD_API as u64,
            features: u64::from(sys::UFFD_FEATURE_WP_ASYNC | sys::UFFD_FEATURE_WP_UNPOPULATED),
            ioctls: 0,
        };
        // SAFETY: UFFDIO_API takes a pointer to a uffdio_api, valid for the call.
        if unsafe { libc::ioctl(uffd.as_raw_fd(), UFFDIO_API as _, &mut api) } != 0 {
            return Err(errno_text("userfaultfd asynchronous write-protection (UFFDIO_API)"));
        }
        let pagemap = File::open("/proc/self/pagemap").map_err(|e| format!("/proc/self/pagemap: {e}"))?;
        let t = Tracker { uffd, pagemap };
        t.self_test()?;
        Ok(t)
    }

    /// A write to a tracked scratch page must be seen once, then no more.
    fn self_test(&self) -> Result<(), String> {
        let len = 2 * PAGE as usize;
        // SAFETY: a fresh private anonymous mapping, unmapped below.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
        if p == libc::MAP_FAILED {
            return Err(errno_text("mmap"));
        }
        let addr = p as u64;
        let result = (|| {
            self.track(addr, len as u64)?;
            // SAFETY: inside the mapping made above.
            unsafe { *(p as *mut u8).add(PAGE as usize + 3) = 1 };
            let mut seen = Vec::new();
            self.written(addr, len as u64, &mut seen)?;
            let again = {
                let mut v = Vec::new();
                self.written(addr, len as u64, &mut v)?;
                v
            };
            if seen == [(addr + PAGE, addr + 2 * PAGE)] && again.is_empty() {
                Ok(())
            } else {
                Err(format!("PAGEMAP_SCAN reported {seen:x?}, then {again:x?}, for one write to the second page"))
            }
        })();
        // SAFETY: the mapping made above, no longer used.
        unsafe { libc::munmap(p, len) };
        result
    }

    /// Register `[addr, addr+len)` (page-aligned, mapped, anonymous) and protect all of it.
    pub(crate) fn track(&self, addr: u64, len: u64) -> Result<(), String> {
        let mut reg = sys::uffdio_register {
            range: sys::uffdio_range { start: addr, len },
            mode: u64::from(sys::UFFDIO_REGISTER_MODE_WP),
            ioctls: 0,
        };
        // SAFETY: UFFDIO_REGISTER takes a pointer to a uffdio_register, valid for the call.
        // Registering a range again with the same userfaultfd (a recycled mapping) succeeds.
        if unsafe { libc::ioctl(self.uffd.as_raw_fd(), UFFDIO_REGISTER as _, &mut reg) } != 0 {
            return Err(errno_text("UFFDIO_REGISTER"));
        }
        self.protect(addr, len, true)
    }

    /// Protect (`on`) or unprotect `[addr, addr+len)`, a registered range.
    fn protect(&self, addr: u64, len: u64, on: bool) -> Result<(), String> {
        let mut wp = sys::uffdio_writeprotect {
            range: sys::uffdio_range { start: addr, len },
            mode: if on { UFFDIO_WRITEPROTECT_MODE_WP } else { 0 },
        };
        // SAFETY: UFFDIO_WRITEPROTECT takes a pointer to a uffdio_writeprotect, valid for
        // the call; the range is registered by this process's userfaultfd.
        if unsafe { libc::ioctl(self.uffd.as_raw_fd(), UFFDIO_WRITEPROTECT as _, &mut wp) } != 0 {
            return Err(errno_text("UFFDIO_WRITEPROTECT"));
        }
        Ok(())
    }

    /// Appends to `out` the page ranges of `[addr, addr+len)` written since the last scan,
    /// and protects them again.
    fn written(&self, addr: u64, len: u64, out: &mut Vec<(u64, u64)>) -> Result<(), String> {
        let mut regions = [sys::page_region { start: 0, end: 0, categories: 0 }; 64];
        let (mut at, end) = (addr, addr + len);
        while at < end {
            let mut arg = sys::pm_scan_arg {
                size: std::mem::size_of::<sys::pm_scan_arg>() as u64,
                flags: u64::from(sys::PM_SCAN_WP_MATCHING | sys::PM_SCAN_CHECK_WPASYNC),
                start: at,
                end,
                walk_end: 0,
                vec: regions.as_mut_ptr() as u64,
                vec_len: regions.len() as u64,
                max_pages: 0,
                category_inverted: 0,
                category_mask: u64::from(sys::PAGE_IS_WRITTEN),
                category_anyof_mask: 0,
                return_mask: u64::from(sys::PAGE_IS_WRITTEN),
            };
            // SAFETY: PAGEMAP_SCAN takes a pointer to a pm_scan_arg whose `vec` points to
            // `vec_len` page_regions: both live across the call.
            let n = unsafe { libc::ioctl(self.pagemap.as_raw_fd(), PAGEMAP_SCAN as _, &mut arg) };
            if n < 0 {
                return Err(errno_text("PAGEMAP_SCAN"));
            }
            out.extend(regions[..n as usize].iter().map(|r| (r.start, r.end)));
            if arg.walk_end <= at {
                return Err(format!("PAGEMAP_SCAN made no progress at {at:#x}"));
            }
            at = arg.walk_end;
        }
        Ok(())
    }
}

/// Decides, once per process, how writes are detected (`OMPCLUSTER_WRITE_DETECTION`).
/// `Err` only when page tracking was required and cannot work.
pub fn init(want: Detection) -> Result<(), String> {
    let m = MECHANISM.get_or_init(|| match want {
        Detection::Hash => Err("OMPCLUSTER_WRITE_DETECTION=hash".into()),
        Detection::Auto | Detection::Pages => Tracker::open(),
    });
    match (want, m) {
        (Detection::Pages, Err(why)) => Err(format!("OMPCLUSTER_WRITE_DETECTION=pages, but page tracking does not work here: {why}")),
        _ => Ok(()),
    }
}

/// The tracker, if this process tracks pages.
pub(crate) fn tracker() -> Option<&'static Tracker> {
    MECHANISM.get().and_then(|m| m.as_ref().ok())
}

/// Whether this process tracks written pages.
pub fn tracking() -> bool {
    tracker().is_some()
}

/// How this process detects writes, in words (start-up message and run report).
pub fn mechanism() -> String {
    match MECHANISM.get() {
        Some(Ok(_)) => "pages (userfaultfd write-protection and PAGEMAP_SCAN)".into(),
        Some(Err(why)) => format!("hashing ({why})"),
        None => "hashing (not chosen yet)".into(),
    }
}

/// The pages of one tracked buffer: their hashes, the device pointers they hold, and how
/// many scans found a change.
#[derive(Debug)]
pub(crate) struct Pages {
    addr: u64,
    hashes: Vec<u64>,
    /// Per page holding any: the device pointers in it (`None`: too many to list).
    pointers: BTreeMap<u32, Option<Vec<u64>>>,
    /// Scans that found a changed page so far.
    changes: u64,
    /// Unprotected while a kernel runs (see the module documentation).
    dense: bool,
    /// Kernels running over it now, and how many of them made it unprotected.
    running: u32,
}

/// Hash of a page of zeros: what a freshly backed page holds.
fn zero_hash() -> u64 {
    static H: OnceLock<u64> = OnceLock::new();
    *H.get_or_init(|| xxh3_64(&[0u8; PAGE as usize]))
}

impl Pages {
    /// A freshly backed (zero-filled) buffer of `len` bytes at `addr`, page-aligned, now
    /// tracked and protected by `t`.
    pub(crate) fn new(t: &Tracker, addr: u64, len: u64) -> Result<Pages, String> {
        t.track(addr, len)?;
        Ok(Pages {
            addr,
            hashes: vec![zero_hash(); len.div_ceil(PAGE) as usize],
            pointers: BTreeMap::new(),
            changes: 0,
            dense: false,
            running: 0,
        })
    }

    fn len(&self) -> u64 {
        self.hashes.len() as u64 * PAGE
    }

    /// Scans for written pages and rehashes them; returns how many changed.
    ///
    /// # Safety
    /// The buffer's pages must be mapped and readable.
    unsafe fn absorb(&mut self, t: &Tracker, (lo, hi): (u64, u64)) -> Result<usize, String> {
        let mut written = Vec::new();
        t.written(self.addr, self.len(), &mut written)?;
        let mut changed = 0;
        for (s, e) in written {
            let mut p = s;
            while p < e {
                let i = ((p - self.addr) / PAGE) as usize;
                // SAFETY: `p` is a page of this buffer (the scan covered only its range),
                // readable (caller).
                let bytes = unsafe { std::slice::from_raw_parts(p as *const u8, PAGE as usize) };
                let h = xxh3_64(bytes);
                if h != self.hashes[i] {
                    self.hashes[i] = h;
                    changed += 1;
                    // SAFETY: as above.
                    match unsafe { scan_pointers(bytes.as_ptr(), bytes.len(), lo, hi) } {
                        FoundPointers::Some(v) if v.is_empty() => {
                            self.pointers.remove(&(i as u32));
                        }
                        FoundPointers::Some(v) => {
                            self.pointers.insert(i as u32, Some(v));
                        }
                        FoundPointers::Many => {
                            self.pointers.insert(i as u32, None);
                        }
                    }
                }
                p += PAGE;
            }
        }
        if changed > 0 {
            self.changes += 1;
        }
        Ok(changed)
    }

    /// Before a kernel: take in what was written since the last scan, unprotect a dense
    /// buffer, and return the change count to compare with [`Pages::after`]'s.
    ///
    /// # Safety
    /// As [`Pages::absorb`].
    /// Counts the kernel as running even when it fails: [`Pages::after`] follows in any case.
    pub(crate) unsafe fn before(&mut self, t: &Tracker, bounds: (u64, u64)) -> Result<u64, String> {
        self.running += 1;
        // SAFETY: forwarded.
        unsafe { self.absorb(t, bounds)? };
        if self.dense {
            t.protect(self.addr, self.len(), false)?;
        }
        Ok(self.changes)
    }

    /// After a kernel that started at change count `start`: did the buffer change
    /// meanwhile? Learns whether it is dense for the next kernel.
    ///
    /// # Safety
    /// As [`Pages::absorb`].
    pub(crate) unsafe fn after(&mut self, t: &Tracker, bounds: (u64, u64), start: u64) -> Result<bool, String> {
        self.running -= 1;
        // The scan protects every page again, unprotected ones included.
        // SAFETY: forwarded.
        let changed = unsafe { self.absorb(t, bounds)? };
        if self.running == 0 {
            self.dense = changed as f64 > DENSE_SHARE * self.hashes.len() as f64;
        } else if self.dense {
            // Another kernel runs over it, unprotected as it started: keep it so.
            t.protect(self.addr, self.len(), false)?;
        }
        Ok(self.changes != start)
    }

    /// The device pointers in the buffer's first `size` bytes: those of its whole pages as
    /// scanned, those of a last partial page read now.
    ///
    /// # Safety
    /// As [`Pages::absorb`].
    pub(crate) unsafe fn pointers(&self, size: u64, (lo, hi): (u64, u64)) -> FoundPointers {
        let whole = (size / PAGE) as u32;
        let mut all = Vec::new();
        for (_, p) in self.pointers.range(..whole) {
            match p {
                Some(v) => all.extend_from_slice(v),
                None => return FoundPointers::Many,
            }
        }
        let rest = size % PAGE;
        if rest > 0 {
            let at = self.addr + u64::from(whole) * PAGE;
            // SAFETY: the start of a page of this buffer, readable (caller).
            match unsafe { scan_pointers(at as *const u8, rest as usize, lo, hi) } {
                FoundPointers::Some(v) => all.extend(v),
                FoundPointers::Many => return FoundPointers::Many,
            }
        }
        all.sort_unstable();
        all.dedup();
        if all.len() > MAX_POINTERS {
            FoundPointers::Many
        } else {
            FoundPointers::Some(all)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracker_here() -> &'static Tracker {
        init(Detection::Auto).unwrap();
        tracker().unwrap_or_else(|| panic!("page tracking must work on this machine: {}", mechanism()))
    }

    struct Map(*mut u8, usize);
    impl Map {
        fn new(pages: usize) -> Map {
            let len = pages * PAGE as usize;
            // SAFETY: a fresh private anonymous mapping, unmapped in Drop.
            let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
            assert_ne!(p, libc::MAP_FAILED);
            Map(p.cast(), len)
        }
        fn bytes(&mut self) -> &mut [u8] {
            // SAFETY: the mapping is live and only this test uses it.
            unsafe { std::slice::from_raw_parts_mut(self.0, self.1) }
        }
    }
    impl Drop for Map {
        fn drop(&mut self) {
            // SAFETY: unmapping our own mapping.
            unsafe { libc::munmap(self.0.cast(), self.1) };
        }
    }

    const NO_DEVICE: (u64, u64) = (1, 2);

    #[test]
    fn a_change_is_seen_once_and_the_same_bytes_written_back_are_no_change() {
        let t = tracker_here();
        let mut m = Map::new(64);
        let mut p = Pages::new(t, m.0 as u64, m.1 as u64).unwrap();
        // SAFETY (all calls): the mapping is live and readable.
        let s = unsafe { p.before(t, NO_DEVICE) }.unwrap();
        assert!(!unsafe { p.after(t, NO_DEVICE, s) }.unwrap(), "nothing written");
        let s = unsafe { p.before(t, NO_DEVICE) }.unwrap();
        m.bytes()[5 * PAGE as usize + 7] = 9;
        assert!(unsafe { p.after(t, NO_DEVICE, s) }.unwrap());
        let s = unsafe { p.before(t, NO_DEVICE) }.unwrap();
        m.bytes()[5 * PAGE as usize + 7] = 9;
        assert!(!unsafe { p.after(t, NO_DEVICE, s) }.unwrap(), "the same byte written again");
        // Written between kernels (a transfer): taken in before the next kernel, not its.
        m.bytes()[9 * PAGE as usize] = 1;
        let s = unsafe { p.before(t, NO_DEVICE) }.unwrap();
        assert!(!unsafe { p.after(t, NO_DEVICE, s) }.unwrap());
    }

    #[test]
    fn a_dense_writer_is_unprotected_while_it_runs_and_still_seen() {
        let t = tracker_here();
        let mut m = Map::new(32);
        let mut p = Pages::new(t, m.0 as u64, m.1 as u64).unwrap();
        for round in 1..=4u8 {
            // SAFETY: as above.
            let s = unsafe { p.before(t, NO_DEVICE) }.unwrap();
            m.bytes().fill(round);
            assert!(unsafe { p.after(t, NO_DEVICE, s) }.unwrap(), "round {round}");
            assert!(p.dense);
        }
        // A write between kernels to a dense buffer is still seen, before the next kernel.
        m.bytes()[3] = 77;
        let s = unsafe { p.before(t, NO_DEVICE) }.unwrap();
        assert!(!unsafe { p.after(t, NO_DEVICE, s) }.unwrap());
        assert!(!p.dense, "nothing changed: sparse again");
        let s = unsafe { p.before(t, NO_DEVICE) }.unwrap();
        m.bytes()[3] = 78;
        assert!(unsafe { p.after(t, NO_DEVICE, s) }.unwrap());
    }

    #[test]
    fn pointers_follow_the_pages_that_hold_them() {
        let t = tracker_here();
        let mut m = Map::new(8);
        let mut p = Pages::new(t, m.0 as u64, m.1 as u64).unwrap();
        let bounds = (0x1000_0000, 0x2000_0000);
        // SAFETY: as above.
        let s = unsafe { p.before(t, bounds) }.unwrap();
        m.bytes()[PAGE as usize..PAGE as usize + 8].copy_from_slice(&0x1000_0040u64.to_ne_bytes());
        m.bytes()[6 * PAGE as usize..6 * PAGE as usize + 8].copy_from_slice(&0x1000_0080u64.to_ne_bytes());
        assert!(unsafe { p.after(t, bounds, s) }.unwrap());
        assert_eq!(unsafe { p.pointers(m.1 as u64, bounds) }, FoundPointers::Some(vec![0x1000_0040, 0x1000_0080]));
        // A size ending inside a page: that page is read as it is, up to the size.
        assert_eq!(unsafe { p.pointers(6 * PAGE + 4, bounds) }, FoundPointers::Some(vec![0x1000_0040]));
        let s = unsafe { p.before(t, bounds) }.unwrap();
        m.bytes()[PAGE as usize..PAGE as usize + 8].fill(0);
        assert!(unsafe { p.after(t, bounds, s) }.unwrap());
        assert_eq!(unsafe { p.pointers(m.1 as u64, bounds) }, FoundPointers::Some(vec![0x1000_0080]));
    }

    #[test]
    fn a_range_backed_again_is_tracked_again() {
        // The heap keeps small released ranges mapped (zeroed when backed again): the same
        // range is registered a second time.
        let t = tracker_here();
        let mut m = Map::new(4);
        let mut p = Pages::new(t, m.0 as u64, m.1 as u64).unwrap();
        m.bytes()[10] = 1;
        m.bytes().fill(0);
        p = {
            drop(p);
            Pages::new(t, m.0 as u64, m.1 as u64).unwrap()
        };
        // SAFETY: as above.
        let s = unsafe { p.before(t, NO_DEVICE) }.unwrap();
        assert!(!unsafe { p.after(t, NO_DEVICE, s) }.unwrap());
        let s = unsafe { p.before(t, NO_DEVICE) }.unwrap();
        m.bytes()[2 * PAGE as usize] = 5;
        assert!(unsafe { p.after(t, NO_DEVICE, s) }.unwrap());
    }

    #[test]
    fn detection_names_parse() {
        assert_eq!("auto".parse::<Detection>().unwrap(), Detection::Auto);
        assert_eq!("pages".parse::<Detection>().unwrap(), Detection::Pages);
        assert_eq!("hash".parse::<Detection>().unwrap(), Detection::Hash);
        assert!("soft-dirty".parse::<Detection>().is_err());
    }
}
