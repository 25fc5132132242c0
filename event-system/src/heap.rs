//! The symmetric device heap.
//!
//! Every rank reserves the same range of virtual addresses (`PROT_NONE`, `MAP_NORESERVE`, so
//! it costs no memory) at a base all ranks agreed on. The head hands out device buffers inside
//! it with an [`ExtentAllocator`]; a rank backs with real pages only the buffers it holds. So a
//! device address means the same buffer on every rank, and device pointers that libomptarget
//! (or a kernel) stores inside device memory stay valid wherever the data moves.
//!
//! Buffers are page-aligned and page-sized, so two buffers never share a page and backing or
//! releasing one never touches another. A released range of up to 1 MiB stays mapped for the
//! next buffer at its address, and one of up to 64 KiB keeps its pages too (32 MiB per
//! process at most), zeroed when backed again: see `Recycled`.

use std::collections::BTreeMap;
use thiserror::Error;

/// Page size used for buffer alignment.
pub const PAGE: u64 = 4096;

/// First candidate base address and the step between candidates (1 TiB).
const FIRST_BASE: u64 = 0x1000_0000_0000;
const BASE_STEP: u64 = 0x100_0000_0000;
const CANDIDATES: u64 = 64;

/// Heap failures.
#[derive(Debug, Error)]
pub enum HeapError {
    /// No address range was free on every rank.
    #[error("could not reserve a {size}-byte device heap at an address free on every rank")]
    NoCommonBase {
        /// Requested size.
        size: u64,
    },
    /// A range is not inside the heap.
    #[error("range {addr:#x}+{size} is outside the device heap")]
    OutOfRange {
        /// Start.
        addr: u64,
        /// Length.
        size: u64,
    },
    /// mmap failed.
    #[error("mmap of {size} bytes at {addr:#x} failed: {err}")]
    Map {
        /// Start.
        addr: u64,
        /// Length.
        size: u64,
        /// OS error.
        err: std::io::Error,
    },
    /// The heap is full.
    #[error("device heap exhausted: no free range of {0} bytes")]
    Exhausted(u64),
    /// The process has as many memory mappings as the kernel allows: every device buffer a
    /// rank holds is a mapping of its own (with its guard gap), so about `max / 2` of them.
    #[error(
        "too many device buffers held at once on this rank: the process has {count} memory mappings, \
         near the {max} the kernel allows (vm.max_map_count, about two per buffer). Use fewer, larger \
         buffers, or raise the limit: sysctl -w vm.max_map_count={suggest}"
    )]
    TooManyMappings {
        /// Mappings of this process.
        count: usize,
        /// `vm.max_map_count`.
        max: usize,
        /// A limit four times larger.
        suggest: usize,
    },
}

/// Unallocated addresses before every block device code allocates (as before the head's
/// buffers): a pointer just before a block or one past its end is never inside another block.
/// A block at `b` is the extent `b - BLOCK_GAP ..` of its arena's [`ExtentAllocator`].
pub const BLOCK_GAP: u64 = 64 << 10;

/// Round `n` up to a whole number of pages.
pub fn page_round(n: u64) -> u64 {
    n.div_ceil(PAGE).max(1) * PAGE
}

/// The reserved range on this rank. It derefs to its [`HeapRange`], which backs and releases
/// pages inside it.
#[derive(Debug)]
pub struct SymmetricHeap {
    range: HeapRange,
}

/// The addresses of a [`SymmetricHeap`], without ownership of the reservation: what code that
/// cannot hold the heap (the allocator device code calls) uses to back pages in it.
#[derive(Debug, Clone, Copy)]
pub struct HeapRange {
    base: u64,
    size: u64,
}

/// One rank's arena for memory that device code allocates (see [`HeapRange::arena`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arena {
    /// First address (page-aligned).
    pub start: u64,
    /// Bytes (whole pages).
    pub size: u64,
}

impl Arena {
    /// Does the arena contain `addr`?
    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.start && addr - self.start < self.size
    }
}

/// The top 1/ARENA_SHARE of the heap holds the ranks' arenas.
const ARENA_SHARE: u64 = 4;

impl std::ops::Deref for SymmetricHeap {
    type Target = HeapRange;
    fn deref(&self) -> &HeapRange {
        &self.range
    }
}

impl SymmetricHeap {
    /// Try to reserve `[base, base+size)` exactly. Returns `None` if the range is not free.
    pub fn try_reserve_at(base: u64, size: u64) -> Option<Self> {
        // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping; the new mapping is
        // PROT_NONE and unused until `back` maps pages over parts of it.
        let p = unsafe {
            libc::mmap(
                base as *mut libc::c_void,
                size as usize,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        if p as u64 != base {
            // An old kernel that ignores MAP_FIXED_NOREPLACE put it elsewhere: give it back.
            // SAFETY: `p` is the mapping we just made, of `size` bytes.
            unsafe { libc::munmap(p, size as usize) };
            return None;
        }
        Some(SymmetricHeap { range: HeapRange { base, size } })
    }

    /// Reserve a heap of `size` bytes at a base that every rank accepted. `agree(ok)` must
    /// return whether every rank's `ok` was true (an all-reduce); it is called once per
    /// candidate by every rank, in the same order.
    pub fn reserve_agreed(size: u64, mut agree: impl FnMut(bool) -> bool) -> Result<Self, HeapError> {
        let size = page_round(size);
        for i in 0..CANDIDATES {
            let base = FIRST_BASE + i * BASE_STEP;
            let mine = Self::try_reserve_at(base, size);
            if agree(mine.is_some()) {
                if let Some(heap) = mine {
                    return Ok(heap);
                }
            }
            // `mine` (if any) is dropped here and unmapped.
        }
        Err(HeapError::NoCommonBase { size })
    }

    /// Its addresses, to back and release pages without holding the heap.
    pub fn range(&self) -> HeapRange {
        self.range
    }
}

impl HeapRange {
    /// Where the head puts device buffers and images: the heap below the arenas.
    pub fn buffer_space(&self) -> (u64, u64) {
        (self.base, self.arenas_start() - self.base)
    }

    fn arenas_start(&self) -> u64 {
        self.end() - self.size / ARENA_SHARE / PAGE * PAGE
    }

    /// The arena of `rank` (of `ranks`): where memory that device code allocates on that rank
    /// goes (`malloc`, `new` in a target region). The top quarter of the heap, split evenly,
    /// so every rank knows every arena without a message.
    pub fn arena(&self, rank: i32, ranks: i32) -> Arena {
        let start = self.arenas_start();
        let each = (self.end() - start) / ranks.max(1) as u64 / PAGE * PAGE;
        Arena { start: start + each * rank.max(0) as u64, size: each }
    }

    /// First address.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// One past the last address.
    pub fn end(&self) -> u64 {
        self.base + self.size
    }

    /// Is `[addr, addr+size)` inside the heap?
    pub fn contains(&self, addr: u64, size: u64) -> bool {
        addr >= self.base && addr.checked_add(size).is_some_and(|e| e <= self.end())
    }

    fn check(&self, addr: u64, size: u64) -> Result<(), HeapError> {
        if addr % PAGE == 0 && size % PAGE == 0 && self.contains(addr, size) {
            Ok(())
        } else {
            Err(HeapError::OutOfRange { addr, size })
        }
    }

    /// Back `[addr, addr+size)` (page-aligned) with fresh zero-filled read-write pages.
    /// Refused with [`HeapError::TooManyMappings`] once the process comes within a 32nd of the
    /// kernel's limit on memory mappings (see `MappingBudget`). A range released by
    /// [`HeapRange::release`] and still recycled (see [`Recycled`]) is taken as it is.
    pub fn back(&self, addr: u64, size: u64) -> Result<(), HeapError> {
        self.check(addr, size)?;
        let mut recycled = RECYCLED.lock();
        if recycled.ranges.get(&addr).is_some_and(|r| r.size == size) {
            if recycled.take(addr) {
                // SAFETY: a recycled range is mapped read-write inside our reservation, and
                // nothing uses it (it was released); zeroing it makes it as a new mapping.
                unsafe { std::ptr::write_bytes(addr as *mut u8, 0, size as usize) };
            }
            return Ok(());
        }
        recycled.forget(addr, size, self)?;
        if let Err(e) = MAPPINGS.before_back() {
            // Recycled ranges are mappings too: give them up before refusing.
            if recycled.ranges.is_empty() {
                return Err(e);
            }
            recycled.forget(self.base, self.size, self)?;
            MAPPINGS.before_back()?;
        }
        self.remap(addr, size, libc::PROT_READ | libc::PROT_WRITE, 0)
    }

    /// Give the pages of `[addr, addr+size)`, plain read-write memory backed by
    /// [`HeapRange::back`], back to the OS; the range stays reserved. A range of up to 1 MiB
    /// keeps its read-write mapping for the next `back` of the same range (see [`Recycled`]).
    pub fn release(&self, addr: u64, size: u64) -> Result<(), HeapError> {
        self.check(addr, size)?;
        let mut recycled = RECYCLED.lock();
        recycled.forget(addr, size, self)?;
        if size <= Recycled::MAX_SIZE && recycled.make_room(addr, self)? {
            if size <= Recycled::KEEP_SIZE && recycled.kept_bytes + size <= Recycled::KEEP_BYTES {
                // Small: its pages stay (zeroed when backed again), which saves the
                // madvise now and a page fault per page then.
                recycled.kept_bytes += size;
                recycled.ranges.insert(addr, Range { size, kept: true });
                return Ok(());
            }
            // SAFETY: the range is inside our reservation and read-write (the caller's
            // contract); MADV_DONTNEED on private anonymous memory frees its pages, which
            // read as zero afterwards.
            if unsafe { libc::madvise(addr as *mut libc::c_void, size as usize, libc::MADV_DONTNEED) } == 0 {
                recycled.ranges.insert(addr, Range { size, kept: false });
                return Ok(());
            }
        }
        self.unmap(addr, size)
    }

    /// Like [`HeapRange::release`], for a range whose protection may have changed since it
    /// was backed (a device image's): never recycled.
    pub fn release_mapping(&self, addr: u64, size: u64) -> Result<(), HeapError> {
        self.check(addr, size)?;
        RECYCLED.lock().forget(addr, size, self)?;
        self.unmap(addr, size)
    }

    /// Back to the reservation's `PROT_NONE`, without pages.
    fn unmap(&self, addr: u64, size: u64) -> Result<(), HeapError> {
        self.remap(addr, size, libc::PROT_NONE, libc::MAP_NORESERVE)
    }

    /// Drop the contents of backed pages (they read as zero afterwards) without unmapping them,
    /// so a concurrent reader can never fault.
    pub fn discard(&self, addr: u64, size: u64) -> Result<(), HeapError> {
        self.check(addr, size)?;
        // SAFETY: the range is inside our reservation; MADV_DONTNEED on private anonymous
        // memory only zeroes it, which callers accept by calling this.
        unsafe { libc::madvise(addr as *mut libc::c_void, size as usize, libc::MADV_DONTNEED) };
        Ok(())
    }

    fn remap(&self, addr: u64, size: u64, prot: i32, extra: i32) -> Result<(), HeapError> {
        self.check(addr, size)?;
        // SAFETY: the range is page-aligned and inside our own reservation, so MAP_FIXED only
        // replaces pages of the reservation, never a mapping owned by anyone else.
        let p = unsafe {
            libc::mmap(
                addr as *mut libc::c_void,
                size as usize,
                prot,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED | extra,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::ENOMEM) {
                if let Some(e) = too_many_mappings() {
                    return Err(e);
                }
            }
            return Err(HeapError::Map { addr, size, err });
        }
        Ok(())
    }
}

/// If this process is at (or within a few of) the kernel's limit on memory mappings, the
/// error that says so: mmap reports that case as ENOMEM, like a real lack of memory.
fn too_many_mappings() -> Option<HeapError> {
    let max = max_map_count()?;
    let count = count_lines("/proc/self/maps")?;
    (count + 16 >= max).then_some(HeapError::TooManyMappings { count, max, suggest: max.saturating_mul(4) })
}

/// `vm.max_map_count`, if readable.
fn max_map_count() -> Option<usize> {
    std::fs::read_to_string("/proc/sys/vm/max_map_count").ok()?.trim().parse().ok()
}

/// Mappings left free for the rest of the process when buffers are backed: at the limit, not
/// only `back` fails but any `malloc` that needs a new mapping (a large block, a thread's arena
/// growing), and Rust aborts on that ("memory allocation of N bytes failed") before the
/// runtime can say what is wrong. A 32nd of the limit, at least 256.
fn mapping_headroom(max: usize) -> usize {
    (max / 32).max(256)
}

/// Keeps [`HeapRange::back`] short of the mapping limit. Counting `/proc/self/maps` is too slow
/// for every call, and each `back` adds at most two mappings (it splits the reserved range
/// around the new pages): so after a count, the next count is due only once the backs since
/// could have used half the room left above the headroom.
struct MappingBudget {
    /// Backs left before the next count (a count is due at 0 or below).
    until_count: std::sync::atomic::AtomicI64,
}

static MAPPINGS: MappingBudget = MappingBudget { until_count: std::sync::atomic::AtomicI64::new(0) };

impl MappingBudget {
    fn before_back(&self) -> Result<(), HeapError> {
        use std::sync::atomic::Ordering;
        if self.until_count.fetch_sub(1, Ordering::Relaxed) > 1 {
            return Ok(());
        }
        let (Some(max), Some(count)) = (max_map_count(), count_lines("/proc/self/maps")) else {
            // No limit to read (not Linux's procfs): count again much later.
            self.until_count.store(1 << 20, Ordering::Relaxed);
            return Ok(());
        };
        let room = max.saturating_sub(mapping_headroom(max)).saturating_sub(count);
        if room < 2 {
            // Counted again at the next back (buffers may have been freed meanwhile).
            return Err(HeapError::TooManyMappings { count, max, suggest: max.saturating_mul(4) });
        }
        self.until_count.store((room / 2) as i64, Ordering::Relaxed);
        Ok(())
    }
}

/// Ranges that [`HeapRange::release`] left mapped read-write, so that backing the same range
/// again takes no `mmap`: emptied (`MADV_DONTNEED`: their memory went back to the OS), or, up
/// to 64 KiB each and 32 MiB in all, with their pages kept, to be zeroed when backed again. A
/// buffer's release and the next back of its range each cost two `mmap` calls that split or
/// merge the process's mappings otherwise: about a third of the head's time in a loop of
/// regions that map fresh 2 KiB arrays (`perf record`). The head's first-fit allocator hands
/// out a freed range again for the next buffer of its size, and a worker backs the ranges the
/// head gives it. Bounded in count (each range stays a mapping, counted against the kernel's
/// limit like a live buffer: at most an eighth of the limit's worth, two mappings each, and all
/// are given up before `back` would refuse for the limit) and in size (larger ranges gain
/// little: their page faults and copies cost more than the `mmap`). The count matters: freed
/// buffers keep their range until the task record no longer needs them (a prune), so
/// thousands are released at once and only then handed out again. One set per process: a
/// process has one heap.
struct Recycled {
    /// By start.
    ranges: BTreeMap<u64, Range>,
    /// Bytes of the ranges that kept their pages.
    kept_bytes: u64,
}

/// A recycled range.
#[derive(Debug, Clone, Copy)]
struct Range {
    size: u64,
    /// Its pages were kept (not given back to the OS): it must be zeroed when backed again.
    kept: bool,
}

static RECYCLED: parking_lot::Mutex<Recycled> = parking_lot::Mutex::new(Recycled { ranges: BTreeMap::new(), kept_bytes: 0 });

impl Recycled {
    const MAX_SIZE: u64 = 1 << 20;
    /// Ranges up to this size keep their pages, up to `KEEP_BYTES` in all: zeroing a few pages
    /// costs less than giving them back and faulting them in again.
    const KEEP_SIZE: u64 = 64 << 10;
    const KEEP_BYTES: u64 = 32 << 20;

    /// Remove the range at `addr`; returns whether it kept its pages.
    fn take(&mut self, addr: u64) -> bool {
        match self.ranges.remove(&addr) {
            Some(Range { size, kept: true }) => {
                self.kept_bytes -= size;
                true
            }
            _ => false,
        }
    }

    /// How many ranges may be kept: each is two mappings, so an eighth of the limit keeps a
    /// quarter of it (8191 ranges under Linux's default of 65,530).
    fn max_ranges() -> usize {
        static MAX: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        *MAX.get_or_init(|| max_map_count().unwrap_or(65_530) / 8)
    }

    /// Can a range at `addr` be kept? When the set is full, the range at the highest address
    /// leaves it for a lower one: the head's first-fit allocator hands out low addresses first.
    fn make_room(&mut self, addr: u64, heap: &HeapRange) -> Result<bool, HeapError> {
        if self.ranges.len() < Self::max_ranges() {
            return Ok(true);
        }
        match self.ranges.last_key_value().map(|(&a, r)| (a, r.size)) {
            Some((a, n)) if a > addr => {
                self.take(a);
                heap.unmap(a, n)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Return every recycled range overlapping `[addr, addr+size)` to the reservation.
    fn forget(&mut self, addr: u64, size: u64, heap: &HeapRange) -> Result<(), HeapError> {
        // The ranges are disjoint: going down from the end, the first one that ends at or
        // before `addr` is followed only by lower ones.
        let overlapping: Vec<(u64, u64)> =
            self.ranges.range(..addr + size).rev().take_while(|&(&a, r)| a + r.size > addr).map(|(&a, r)| (a, r.size)).collect();
        for (a, n) in overlapping {
            self.take(a);
            heap.unmap(a, n)?;
        }
        Ok(())
    }
}

/// Lines in a file, read through a fixed buffer: at the mapping limit a large allocation can
/// itself fail (malloc needs a new mapping for it), so the file is never held whole.
fn count_lines(path: &str) -> Option<usize> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).ok()?;
    let mut buf = [0u8; 16 << 10];
    let mut lines = 0;
    loop {
        match f.read(&mut buf) {
            Ok(0) => return Some(lines),
            Ok(n) => lines += buf[..n].iter().filter(|&&b| b == b'\n').count(),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
}

impl Drop for SymmetricHeap {
    fn drop(&mut self) {
        // Its recycled ranges go with it (another heap may be reserved here later).
        let (lo, hi) = (self.range.base, self.range.end());
        let mut recycled = RECYCLED.lock();
        recycled.ranges.retain(|&a, _| a < lo || a >= hi);
        recycled.kept_bytes = recycled.ranges.values().filter(|r| r.kept).map(|r| r.size).sum();
        // SAFETY: unmapping exactly the reservation this value owns.
        unsafe { libc::munmap(self.range.base as *mut libc::c_void, self.range.size as usize) };
    }
}

/// First-fit allocator of page-aligned extents with coalescing of freed neighbours.
#[derive(Debug)]
pub struct ExtentAllocator {
    free: BTreeMap<u64, u64>,
    used: BTreeMap<u64, u64>,
}

impl ExtentAllocator {
    /// Manage `[base, base+size)`.
    pub fn new(base: u64, size: u64) -> Self {
        let mut free = BTreeMap::new();
        free.insert(base, size);
        ExtentAllocator { free, used: BTreeMap::new() }
    }

    /// Allocate `size` bytes (rounded up to pages). Returns the start and the rounded size.
    pub fn alloc(&mut self, size: u64) -> Result<(u64, u64), HeapError> {
        let need = page_round(size);
        let (&start, &len) =
            self.free.iter().find(|(_, &len)| len >= need).ok_or(HeapError::Exhausted(need))?;
        self.free.remove(&start);
        if len > need {
            self.free.insert(start + need, len - need);
        }
        self.used.insert(start, need);
        Ok((start, need))
    }

    /// Free the extent starting at `addr`; returns its size, or `None` if not allocated.
    pub fn free(&mut self, addr: u64) -> Option<u64> {
        let len = self.used.remove(&addr)?;
        let (mut start, mut size) = (addr, len);
        if let Some((&ps, &pl)) = self.free.range(..addr).next_back() {
            if ps + pl == addr {
                self.free.remove(&ps);
                start = ps;
                size += pl;
            }
        }
        if let Some(&nl) = self.free.get(&(addr + len)) {
            self.free.remove(&(addr + len));
            size += nl;
        }
        self.free.insert(start, size);
        Some(len)
    }

    /// Take `[addr, addr+size)` (whole pages), which must be free, as if [`Self::alloc`] had
    /// given it; false (nothing taken) if any of it is not free.
    pub fn reserve(&mut self, addr: u64, size: u64) -> bool {
        let need = page_round(size);
        let Some((&start, &len)) = self.free.range(..=addr).next_back() else { return false };
        if addr % PAGE != 0 || addr + need > start + len {
            return false;
        }
        self.free.remove(&start);
        if addr > start {
            self.free.insert(start, addr - start);
        }
        if start + len > addr + need {
            self.free.insert(addr + need, start + len - addr - need);
        }
        self.used.insert(addr, need);
        true
    }

    /// Number of free extents (fragmentation measure).
    pub fn free_extents(&self) -> usize {
        self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extents_coalesce_back_to_one() {
        let mut a = ExtentAllocator::new(0x10000, 64 * PAGE);
        let x = a.alloc(1).unwrap();
        let y = a.alloc(PAGE + 1).unwrap();
        let z = a.alloc(3 * PAGE).unwrap();
        assert_eq!(x, (0x10000, PAGE));
        assert_eq!(y, (0x10000 + PAGE, 2 * PAGE));
        assert_eq!(z.0, 0x10000 + 3 * PAGE);
        assert_eq!(a.free(y.0), Some(2 * PAGE));
        assert_eq!(a.free(y.0), None);
        a.free(x.0);
        a.free(z.0);
        assert_eq!(a.free_extents(), 1);
        assert!(a.alloc(65 * PAGE).is_err());
        assert_eq!(a.alloc(64 * PAGE).unwrap().0, 0x10000);
    }

    #[test]
    fn a_reserved_extent_is_taken_and_given_back_like_an_allocated_one() {
        let mut a = ExtentAllocator::new(0x10000, 16 * PAGE);
        assert!(a.reserve(0x10000 + 4 * PAGE, 2 * PAGE));
        assert!(!a.reserve(0x10000 + 5 * PAGE, PAGE), "taken already");
        assert!(!a.reserve(0x10000 + 15 * PAGE, 2 * PAGE), "past the end");
        assert!(!a.reserve(0x10000 + 1, PAGE), "not a page");
        assert_eq!(a.alloc(4 * PAGE).unwrap().0, 0x10000);
        assert_eq!(a.alloc(PAGE).unwrap().0, 0x10000 + 6 * PAGE);
        assert!(a.reserve(0x10000 + 15 * PAGE, PAGE));
        assert_eq!(a.free(0x10000 + 4 * PAGE), Some(2 * PAGE));
        assert_eq!(a.free(0x10000), Some(4 * PAGE));
        a.free(0x10000 + 6 * PAGE);
        a.free(0x10000 + 15 * PAGE);
        assert_eq!(a.free_extents(), 1);
        assert_eq!(a.alloc(16 * PAGE).unwrap().0, 0x10000);
    }

    #[test]
    fn arenas_are_disjoint_and_above_the_buffers() {
        let h = HeapRange { base: 1 << 40, size: 256 << 30 };
        let (lo, len) = h.buffer_space();
        assert_eq!((lo, len), (1 << 40, 192 << 30));
        let arenas: Vec<Arena> = (0..3).map(|r| h.arena(r, 3)).collect();
        for (r, a) in arenas.iter().enumerate() {
            assert!(a.start >= lo + len && a.start + a.size <= h.end() && a.start % PAGE == 0 && a.size > 0);
            assert!(arenas.iter().enumerate().all(|(o, b)| (o == r) == b.contains(a.start)));
        }
        assert!(arenas.windows(2).all(|w| w[0].start + w[0].size <= w[1].start));
        assert!(!arenas.iter().any(|a| a.contains(lo + len - 1)));
    }

    #[test]
    fn a_released_small_range_is_backed_again_without_a_new_mapping() {
        let heap = SymmetricHeap::reserve_agreed(1 << 30, |ok| ok).unwrap();
        let a = heap.base() + 64 * PAGE;
        heap.back(a, 2 * PAGE).unwrap();
        // SAFETY (all blocks): the pages at `a` are backed read-write while they are used.
        unsafe { *(a as *mut u8).add(5000) = 7 };
        heap.release(a, 2 * PAGE).unwrap();
        assert!(RECYCLED.lock().ranges.get(&a).is_some_and(|r| r.size == 2 * PAGE && r.kept));
        heap.back(a, 2 * PAGE).unwrap();
        assert!(!RECYCLED.lock().ranges.contains_key(&a));
        // Fresh pages read as zero, as after a new mapping.
        unsafe {
            assert_eq!(*(a as *const u8).add(5000), 0);
            *(a as *mut u8).add(5000) = 9;
        }
        // Backing a range that overlaps a recycled one (but is not it) maps it anew.
        heap.release(a, 2 * PAGE).unwrap();
        heap.back(a + PAGE, 2 * PAGE).unwrap();
        assert!(!RECYCLED.lock().ranges.contains_key(&a));
        unsafe { assert_eq!(*(a as *const u8).add(5000), 0) };
        heap.release(a + PAGE, 2 * PAGE).unwrap();
        // Ranges over 64 KiB give their pages back, and still read as zero when backed again.
        heap.back(a, 32 * PAGE).unwrap();
        unsafe { *(a as *mut u8).add(5000) = 3 };
        heap.release(a, 32 * PAGE).unwrap();
        assert!(RECYCLED.lock().ranges.get(&a).is_some_and(|r| r.size == 32 * PAGE && !r.kept));
        heap.back(a, 32 * PAGE).unwrap();
        unsafe { assert_eq!(*(a as *const u8).add(5000), 0) };
        heap.release(a, 32 * PAGE).unwrap();
        // Large ranges are not kept.
        heap.back(a, 512 * PAGE).unwrap();
        heap.release(a, 512 * PAGE).unwrap();
        assert!(RECYCLED.lock().ranges.range(a..a + 512 * PAGE).next().is_none());
        // The heap's recycled ranges go with it.
        heap.back(a, PAGE).unwrap();
        heap.release(a, PAGE).unwrap();
        drop(heap);
        assert!(!RECYCLED.lock().ranges.contains_key(&a));
    }

    #[test]
    fn reserve_back_release() {
        let heap = SymmetricHeap::reserve_agreed(1 << 30, |ok| ok).unwrap();
        let a = heap.base() + 16 * PAGE;
        heap.back(a, 2 * PAGE).unwrap();
        // SAFETY: the two pages at `a` were just backed read-write.
        unsafe {
            let p = a as *mut u8;
            assert_eq!(*p, 0);
            *p.add(5000) = 7;
            assert_eq!(*p.add(5000), 7);
        }
        heap.discard(a, 2 * PAGE).unwrap();
        // SAFETY: still mapped; MADV_DONTNEED zeroed it.
        unsafe { assert_eq!(*(a as *const u8).add(5000), 0) };
        heap.release(a, 2 * PAGE).unwrap();
        assert!(heap.back(a + 1, PAGE).is_err());
        assert!(heap.back(heap.end(), PAGE).is_err());
        // A second reservation at the same base is refused: the range is taken.
        assert!(SymmetricHeap::try_reserve_at(heap.base(), PAGE).is_none());
    }
}
