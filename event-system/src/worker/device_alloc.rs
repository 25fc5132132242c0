//! Memory that device code allocates: `malloc`, `calloc`, `realloc`, `free`, `aligned_alloc`,
//! `posix_memalign`, `memalign`, `valloc`, `strdup`, `strndup`, `malloc_usable_size` and C++
//! `new`/`delete` called in a target region.
//!
//! In OpenMP that is device memory: a pointer one region makes is valid in every later region,
//! wherever it runs. The loader binds those symbols of every device image to the functions
//! here instead of the process's own ([`interposed`]). They allocate in this rank's arena of
//! the symmetric heap ([`crate::heap::HeapRange::arena`]): each rank has its own, so
//! allocating needs no message and no address is ever given out twice. Each allocation is a
//! block of whole pages after a guard gap (so it moves between ranks like any device buffer);
//! a 16-byte header right before the pointer returned holds the block's start and the size
//! asked for, so any rank holding the block can `realloc` or `free` it.
//!
//! What a kernel allocated and freed goes back with its EXECUTE reply
//! (`Reply::Executed::allocated`, `freed`). The head records each block as a device buffer
//! the kernel produced, held by this rank, and deletes the freed ones (then gives the range
//! back to its arena's owner: `Event::Reclaim`). A block allocated and freed before the reply
//! never reaches the head. A re-executed kernel (recovery) gets the same addresses: the head
//! sends the blocks its first run allocated (`Event::Execute::replay`), and allocations of the
//! same size take them, in order. Replicas of one region (`OMPCLUSTER_FT_REPLICAS`) allocate
//! at the same addresses: the head gives them one range of its own arena
//! (`Event::Execute::arena`), and each replica allocates first-fit in it from the same empty
//! state, so the same calls give the same pointers and the replicas' results can be compared.
//!
//! Outside a kernel (an image's static constructors) and in a process with no arena (the head
//! running regions itself), these are the C library's functions; `free` there ignores device
//! addresses (the head's bookkeeping owns those pages).
//!
//! ## Concurrency (design note)
//! One mutex guards the arena and the logs of the kernels running now; backing pages takes the
//! device memory's write lock inside it (nobody takes them in the other order: kernels never
//! hold the memory lock while running). An allocation belongs to the kernel whose thread makes
//! it (a thread-local set around the call); one made on another thread (a libomp thread of a
//! `parallel` inside the region) belongs to the oldest kernel running. Nothing here may panic:
//! these functions are called from C.

use super::memory::Memory;
use crate::heap::{page_round, Arena, ExtentAllocator, HeapRange, PAGE};
use crate::protocol::Region;
use parking_lot::{const_mutex, Mutex, RwLock};
use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void};
use std::collections::HashMap;
use std::sync::Arc;

use crate::heap::BLOCK_GAP as GAP;
/// Marks a header: the first word holds the block's start XOR this.
const MAGIC: u64 = 0x6f6d_7063_6d61_6c63;
/// Header bytes before every pointer returned (also the smallest alignment: malloc's).
const HEADER: u64 = 16;

/// One block a kernel allocated: start, bytes from the start to the end of what was asked
/// for (what moves between ranks), and whole pages reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Block {
    pub(crate) addr: u64,
    pub(crate) size: u64,
    pub(crate) span: u64,
}

/// What one running kernel allocated and freed so far.
struct Run {
    id: u64,
    allocated: Vec<Block>,
    /// Blocks made before this kernel (by another) that it freed.
    freed: Vec<u64>,
    /// Blocks to give again (a re-execution): start and span.
    replay: Vec<Region>,
    /// The range this run allocates in, shared with the other replicas of its region, and
    /// its extents (empty at the start of every replica).
    shared: Option<(Region, ExtentAllocator)>,
}

struct Arenas {
    heap: HeapRange,
    mine: Arena,
    extents: ExtentAllocator,
    memory: Arc<RwLock<Memory>>,
    /// Blocks allocated and freed within running kernels, kept backed for the next
    /// allocation of the same span (span -> starts): a scratch `malloc`/`free` in a loop
    /// then costs no `mmap`. The head never knew them.
    cache: HashMap<u64, Vec<u64>>,
    cached: usize,
}

/// Most blocks kept in [`Arenas::cache`], and the largest span kept.
const CACHE_BLOCKS: usize = 256;
const CACHE_SPAN: u64 = 1 << 20;

struct State {
    /// Set on workers; `None` elsewhere (device code allocates from the C library).
    arena: Option<Arenas>,
    /// The device heap, where known (also without an arena).
    heap: Option<HeapRange>,
    runs: Vec<Run>,
    next_run: u64,
}

static STATE: Mutex<State> = const_mutex(State { arena: None, heap: None, runs: Vec::new(), next_run: 1 });

thread_local! {
    /// The kernel this thread runs (0: none).
    static RUN: Cell<u64> = const { Cell::new(0) };
    /// This thread runs an image's initialisers: allocations there are the process's own.
    static LOADING: Cell<bool> = const { Cell::new(false) };
}

/// Allocations of device code on this rank go to `mine`, backed in `memory`.
pub(crate) fn init(heap: HeapRange, mine: Arena, memory: Arc<RwLock<Memory>>) {
    let mut st = STATE.lock();
    st.heap = Some(heap);
    st.arena = Some(Arenas { heap, mine, extents: ExtentAllocator::new(mine.start, mine.size), memory, cache: HashMap::new(), cached: 0 });
}

/// This process has a device heap but no arena (a head running regions itself): device code
/// allocates from the C library, and `free` ignores device addresses.
pub(crate) fn know_heap(heap: HeapRange) {
    STATE.lock().heap.get_or_insert(heap);
}

/// The range of block `addr` (a block this rank's arena gave out, now freed everywhere) may be
/// given out again. Its pages were released already (`Event::Delete`), if they were here.
pub(crate) fn reclaim(addr: u64) {
    let mut st = STATE.lock();
    if let Some(a) = st.arena.as_mut().filter(|a| a.mine.contains(addr)) {
        a.extents.free(addr - GAP);
    }
}

/// Runs an image's initialisers while it lives: their allocations are the process's own.
pub(crate) struct Loading(bool);

impl Loading {
    pub(crate) fn enter() -> Self {
        Loading(LOADING.try_with(|l| l.replace(true)).unwrap_or(false))
    }
}

impl Drop for Loading {
    fn drop(&mut self) {
        let _ = LOADING.try_with(|l| l.set(self.0));
    }
}

/// A kernel running on this thread: its allocations and frees are logged until
/// [`KernelRun::finish`].
pub(crate) struct KernelRun {
    id: u64,
    prev: u64,
}

impl KernelRun {
    /// Start logging; `replay` are blocks a first run of this kernel allocated (start, span);
    /// `shared`, a range of the head's arena to allocate in (a replica: `Event::Execute::arena`).
    pub(crate) fn begin(replay: &[Region], shared: Option<Region>) -> Self {
        let id = {
            let mut st = STATE.lock();
            let id = st.next_run;
            st.next_run += 1;
            let shared = shared.map(|r| (r, ExtentAllocator::new(r.addr, r.size)));
            st.runs.push(Run { id, allocated: Vec::new(), freed: Vec::new(), replay: replay.to_vec(), shared });
            id
        };
        KernelRun { id, prev: RUN.try_with(|r| r.replace(id)).unwrap_or(0) }
    }

    /// Stop logging: the blocks it allocated (and still holds) and those it freed.
    pub(crate) fn finish(self) -> (Vec<Block>, Vec<u64>) {
        let mut st = STATE.lock();
        match st.runs.iter().position(|r| r.id == self.id) {
            Some(i) => {
                let run = st.runs.remove(i);
                (run.allocated, run.freed)
            }
            None => (Vec::new(), Vec::new()),
        }
    }
}

impl Drop for KernelRun {
    fn drop(&mut self) {
        let _ = RUN.try_with(|r| r.set(self.prev));
        let mut st = STATE.lock();
        st.runs.retain(|r| r.id != self.id);
    }
}

/// The log an allocation or free on this thread belongs to.
fn run_index(st: &State) -> Option<usize> {
    if LOADING.try_with(|l| l.get()).unwrap_or(true) {
        return None;
    }
    let mine = RUN.try_with(|r| r.get()).unwrap_or(0);
    st.runs.iter().position(|r| r.id == mine).or(if st.runs.is_empty() { None } else { Some(0) })
}

enum Got {
    /// Not device code's allocation here: the C library's.
    NotMine,
    Ptr(*mut c_void),
    /// The arena is full (or pages could not be had).
    Exhausted,
}

/// Allocate `n` bytes aligned to `align` (a power of two) for the running kernel.
fn alloc(n: usize, align: usize) -> Got {
    let mut guard = STATE.lock();
    let st = &mut *guard;
    let Some(i) = run_index(st) else { return Got::NotMine };
    let Some(a) = st.arena.as_mut() else { return Got::NotMine };
    let align = (align as u64).max(HEADER);
    let n = n as u64;
    // Room for the header and the alignment before the bytes asked for.
    let Some(span) = align.checked_add(n).map(page_round) else {
        return Got::Exhausted;
    };
    let run = &mut st.runs[i];
    let block = match run.replay.iter().position(|r| r.size == span) {
        Some(k) => {
            let r = run.replay.remove(k);
            // The head backed it for the re-run; back it here if not.
            let held = a.memory.read().resolve(r.addr, r.size).is_ok();
            if !held && a.memory.write().back(&a.heap, r.addr, r.size).is_err() {
                return Got::Exhausted;
            }
            r.addr
        }
        None => {
            // A replica: first-fit in the range shared with the other replicas (full: in this
            // rank's arena, as unreplicated; the head then cannot compare the replicas).
            let shared = run.shared.as_mut().and_then(|(_, ext)| ext.alloc(GAP + span).ok().map(|x| (ext, x)));
            match shared {
                Some((ext, (start, extent))) => {
                    let block = start + GAP;
                    if let Err(e) = a.memory.write().back(&a.heap, block, extent - GAP) {
                        eprintln!("ompcluster: device code's allocation of {n} bytes: {e}");
                        ext.free(start);
                        return Got::Exhausted;
                    }
                    block
                }
                None => match a.cache.get_mut(&span).and_then(Vec::pop) {
                    Some(block) => {
                        a.cached -= 1;
                        block
                    }
                    None => {
                        let Ok((start, extent)) = a.extents.alloc(GAP + span) else { return Got::Exhausted };
                        let block = start + GAP;
                        if let Err(e) = a.memory.write().back(&a.heap, block, extent - GAP) {
                            eprintln!("ompcluster: device code's allocation of {n} bytes: {e}");
                            a.extents.free(start);
                            return Got::Exhausted;
                        }
                        block
                    }
                },
            }
        }
    };
    // The first address at least HEADER past the block's start with the alignment asked for.
    let mut off = (align - block % align) % align;
    if off < HEADER {
        off += align;
    }
    let p = block + off;
    // SAFETY: `block..block+span` was just backed (or is held) on this rank, and
    // `off + n <= align + n <= span`; the header lies in `block..p`.
    unsafe {
        std::ptr::write((p - HEADER) as *mut u64, block ^ MAGIC);
        std::ptr::write((p - HEADER + 8) as *mut u64, n);
    }
    run.allocated.push(Block { addr: block, size: off + n, span });
    Got::Ptr(p as *mut c_void)
}

/// What the header before device pointer `p` says: (block start, size asked for), or `None`
/// if `p` is no pointer that [`alloc`] returned (its header is not held here, or not one).
fn header(st: &State, p: u64) -> Option<(u64, u64)> {
    let a = st.arena.as_ref()?;
    if p % HEADER != 0 || p < a.heap.base() + HEADER || a.memory.read().resolve(p - HEADER, HEADER).is_err() {
        return None;
    }
    // SAFETY: the 16 bytes before `p` are held (resolved just above) and 8-aligned.
    let (w0, n) = unsafe { (std::ptr::read((p - HEADER) as *const u64), std::ptr::read((p - HEADER + 8) as *const u64)) };
    let block = w0 ^ MAGIC;
    (block % PAGE == 0 && block < p && p - block <= (1 << 40) && a.heap.contains(block, p - block)).then_some((block, n))
}

/// Is `p` in the device heap? (`None`: no heap known here.)
fn in_heap(st: &State, p: u64) -> bool {
    st.heap.is_some_and(|h| h.contains(p, 1))
}

/// Free device pointer `p`. Returns false if `p` is not in the device heap (the C library's).
fn release(p: *mut c_void) -> bool {
    let p = p as u64;
    let mut guard = STATE.lock();
    let st = &mut *guard;
    if !in_heap(st, p) {
        return false;
    }
    let Some((block, _)) = header(st, p) else {
        if st.arena.is_some() {
            eprintln!("ompcluster: device code freed {p:#x}, which device code did not allocate: ignored");
        }
        return true;
    };
    // Made by a kernel still running (not reported yet): gone at once, the head never knows.
    // (A block given again to a re-run is the head's: it is reported freed, below.)
    let made_here = st.runs.iter().enumerate().find_map(|(i, r)| r.allocated.iter().position(|b| b.addr == block).map(|k| (i, k)));
    if let Some((i, k)) = made_here {
        let b = st.runs[i].allocated.remove(k);
        let shared = st.runs[i].shared.as_mut().filter(|(r, _)| r.holds(block, 1));
        if let (Some((_, ext)), Some(a)) = (shared, st.arena.as_mut()) {
            // Given back to the shared range at once, as every replica does: the next
            // allocation takes the same address on each.
            let _ = a.memory.write().release(&a.heap, block);
            ext.free(block - GAP);
            return true;
        }
        if let Some(a) = st.arena.as_mut().filter(|a| a.mine.contains(block)) {
            if a.cached < CACHE_BLOCKS && b.span <= CACHE_SPAN {
                a.cache.entry(b.span).or_default().push(block);
                a.cached += 1;
            } else {
                let _ = a.memory.write().release(&a.heap, block);
                a.extents.free(block - GAP);
            }
            return true;
        }
    }
    if let Some(i) = run_index(st) {
        if !st.runs[i].freed.contains(&block) {
            st.runs[i].freed.push(block);
        }
    }
    true
}

/// Bytes asked for when device pointer `p` was allocated (`None`: not a device pointer).
fn size_of(p: *mut c_void) -> Option<Option<u64>> {
    let st = STATE.lock();
    if !in_heap(&st, p as u64) {
        return None;
    }
    Some(header(&st, p as u64).map(|(_, n)| n))
}

fn errno(e: c_int) {
    // SAFETY: writing this thread's errno.
    unsafe { *libc::__errno_location() = e };
}

extern "C" fn malloc(n: usize) -> *mut c_void {
    match alloc(n, HEADER as usize) {
        Got::Ptr(p) => p,
        Got::Exhausted => {
            errno(libc::ENOMEM);
            std::ptr::null_mut()
        }
        // SAFETY: the C library's malloc, for the process's own memory.
        Got::NotMine => unsafe { libc::malloc(n) },
    }
}

extern "C" fn calloc(count: usize, size: usize) -> *mut c_void {
    let Some(n) = count.checked_mul(size) else {
        errno(libc::ENOMEM);
        return std::ptr::null_mut();
    };
    match alloc(n, HEADER as usize) {
        Got::Ptr(p) => {
            // SAFETY: `p` points to `n` bytes just allocated (a replayed block may hold a
            // first run's bytes).
            unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0, n) };
            p
        }
        Got::Exhausted => {
            errno(libc::ENOMEM);
            std::ptr::null_mut()
        }
        // SAFETY: the C library's calloc.
        Got::NotMine => unsafe { libc::calloc(count, size) },
    }
}

extern "C" fn free(p: *mut c_void) {
    if !p.is_null() && !release(p) {
        // SAFETY: not a device address: the C library's pointer (or the program's bug, as
        // under any malloc).
        unsafe { libc::free(p) }
    }
}

extern "C" fn realloc(p: *mut c_void, n: usize) -> *mut c_void {
    if p.is_null() {
        return malloc(n);
    }
    match size_of(p) {
        // SAFETY: the C library's pointer.
        None => unsafe { libc::realloc(p, n) },
        Some(None) => {
            eprintln!("ompcluster: device code reallocated {:#x}, which device code did not allocate", p as u64);
            errno(libc::EINVAL);
            std::ptr::null_mut()
        }
        Some(Some(old)) => {
            if n == 0 {
                free(p);
                return std::ptr::null_mut();
            }
            let q = malloc(n);
            if !q.is_null() {
                // SAFETY: `p` holds `old` bytes (its header says so, and it is held here) and
                // `q` has `n`; two different blocks.
                unsafe { std::ptr::copy_nonoverlapping(p.cast::<u8>(), q.cast::<u8>(), (old as usize).min(n)) };
                free(p);
            }
            q
        }
    }
}

fn aligned(align: usize, n: usize) -> *mut c_void {
    if !align.is_power_of_two() {
        errno(libc::EINVAL);
        return std::ptr::null_mut();
    }
    match alloc(n, align) {
        Got::Ptr(p) => p,
        Got::Exhausted => {
            errno(libc::ENOMEM);
            std::ptr::null_mut()
        }
        // SAFETY: the C library's aligned_alloc (any power of two is accepted by glibc).
        Got::NotMine => unsafe { libc::aligned_alloc(align.max(std::mem::size_of::<usize>()), n) },
    }
}

extern "C" fn aligned_alloc(align: usize, n: usize) -> *mut c_void {
    aligned(align, n)
}

extern "C" fn memalign(align: usize, n: usize) -> *mut c_void {
    aligned(align, n)
}

extern "C" fn valloc(n: usize) -> *mut c_void {
    aligned(PAGE as usize, n)
}

extern "C" fn posix_memalign(out: *mut *mut c_void, align: usize, n: usize) -> c_int {
    if !align.is_power_of_two() || align % std::mem::size_of::<usize>() != 0 {
        return libc::EINVAL;
    }
    let p = aligned(align, n);
    if p.is_null() {
        return libc::ENOMEM;
    }
    // SAFETY: the caller passes a valid place for the result, as posix_memalign requires.
    unsafe { *out = p };
    0
}

extern "C" fn malloc_usable_size(p: *mut c_void) -> usize {
    if p.is_null() {
        return 0;
    }
    match size_of(p) {
        // SAFETY: the C library's pointer.
        None => unsafe { libc::malloc_usable_size(p) },
        Some(n) => n.unwrap_or(0) as usize,
    }
}

extern "C" fn strdup(s: *const c_char) -> *mut c_char {
    // SAFETY: the caller passes a C string, as strdup requires.
    let n = unsafe { libc::strlen(s) };
    copy_str(s, n)
}

extern "C" fn strndup(s: *const c_char, max: usize) -> *mut c_char {
    // SAFETY: the caller passes a string readable up to its NUL or `max` bytes.
    let n = unsafe { libc::strnlen(s, max) };
    copy_str(s, n)
}

fn copy_str(s: *const c_char, n: usize) -> *mut c_char {
    let p = malloc(n + 1).cast::<c_char>();
    if !p.is_null() {
        // SAFETY: `s` has `n` readable bytes; `p` has `n + 1` writable ones.
        unsafe {
            std::ptr::copy_nonoverlapping(s, p, n);
            *p.add(n) = 0;
        }
    }
    p
}

/// `operator new`: no null; out of device memory ends the region with a message (an
/// exception cannot be thrown from here).
fn new(n: usize, align: usize) -> *mut c_void {
    let p = if align <= HEADER as usize { malloc(n.max(1)) } else { aligned(align, n.max(1)) };
    if p.is_null() {
        eprintln!("ompcluster: operator new in device code: no device memory left for {n} bytes (this rank's arena is full)");
        // SAFETY: ending the process, as an uncaught std::bad_alloc would.
        unsafe { libc::abort() };
    }
    p
}

extern "C" fn op_new(n: usize) -> *mut c_void {
    new(n, 0)
}

extern "C" fn op_new_aligned(n: usize, align: usize) -> *mut c_void {
    new(n, align)
}

extern "C" fn op_new_nothrow(n: usize, _: *const c_void) -> *mut c_void {
    malloc(n.max(1))
}

extern "C" fn op_new_aligned_nothrow(n: usize, align: usize, _: *const c_void) -> *mut c_void {
    aligned(align, n.max(1))
}

extern "C" fn op_delete(p: *mut c_void) {
    free(p)
}

extern "C" fn op_delete_2(p: *mut c_void, _: usize) {
    free(p)
}

extern "C" fn op_delete_3(p: *mut c_void, _: usize, _: usize) {
    free(p)
}

/// The function device code calls instead of `name`, if it is one of those above.
pub(crate) fn interposed(name: &str) -> Option<u64> {
    let f: usize = match name {
        "malloc" => malloc as *const () as usize,
        "calloc" => calloc as *const () as usize,
        "realloc" => realloc as *const () as usize,
        "free" | "cfree" => free as *const () as usize,
        "aligned_alloc" => aligned_alloc as *const () as usize,
        "memalign" => memalign as *const () as usize,
        "valloc" => valloc as *const () as usize,
        "posix_memalign" => posix_memalign as *const () as usize,
        "malloc_usable_size" => malloc_usable_size as *const () as usize,
        "strdup" | "__strdup" => strdup as *const () as usize,
        "strndup" | "__strndup" => strndup as *const () as usize,
        // operator new / new[] (size), (size, nothrow), (size, align), (size, align, nothrow)
        "_Znwm" | "_Znam" => op_new as *const () as usize,
        "_ZnwmRKSt9nothrow_t" | "_ZnamRKSt9nothrow_t" => op_new_nothrow as *const () as usize,
        "_ZnwmSt11align_val_t" | "_ZnamSt11align_val_t" => op_new_aligned as *const () as usize,
        "_ZnwmSt11align_val_tRKSt9nothrow_t" | "_ZnamSt11align_val_tRKSt9nothrow_t" => op_new_aligned_nothrow as *const () as usize,
        // operator delete / delete[]: (p), (p, size | align | nothrow), (p, size, align),
        // (p, align, nothrow)
        "_ZdlPv" | "_ZdaPv" => op_delete as *const () as usize,
        "_ZdlPvm" | "_ZdaPvm" | "_ZdlPvSt11align_val_t" | "_ZdaPvSt11align_val_t" | "_ZdlPvRKSt9nothrow_t" | "_ZdaPvRKSt9nothrow_t" => {
            op_delete_2 as *const () as usize
        }
        "_ZdlPvmSt11align_val_t" | "_ZdaPvmSt11align_val_t" | "_ZdlPvSt11align_val_tRKSt9nothrow_t" | "_ZdaPvSt11align_val_tRKSt9nothrow_t" => {
            op_delete_3 as *const () as usize
        }
        _ => return None,
    };
    Some(f as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::heap::SymmetricHeap;

    /// The only test that sets the process's arena (the state is global).
    #[test]
    fn allocates_in_the_arena_logs_per_kernel_and_replays() {
        let heap = SymmetricHeap::reserve_agreed(1 << 30, |ok| ok).unwrap();
        let memory = Arc::new(RwLock::new(Memory::default()));
        let mine = heap.arena(1, 2);
        // Outside a kernel: the C library's.
        let p = malloc(10);
        assert!(!heap.contains(p as u64, 1));
        free(p);
        init(heap.range(), mine, memory.clone());
        let p = malloc(10);
        assert!(!heap.contains(p as u64, 1), "no kernel runs: the process's own memory");
        free(p);

        let run = KernelRun::begin(&[], None);
        let a = malloc(100) as u64;
        let b = calloc(3, 8) as u64;
        let c = aligned_alloc(8192, 10) as u64;
        assert!(mine.contains(a) && mine.contains(b) && mine.contains(c));
        assert_eq!((a % 16, c % 8192), (0, 0));
        assert!(memory.read().resolve(a, 100).is_ok(), "backed here");
        // SAFETY: 100 bytes at `a` were just allocated.
        unsafe { std::ptr::write_bytes(a as *mut u8, 7, 100) };
        assert_eq!(malloc_usable_size(a as *mut c_void), 100);
        // Grown: the old bytes move along, the old block is gone at once (never reported).
        let a2 = realloc(a as *mut c_void, 5000) as u64;
        // SAFETY: 5000 bytes at `a2`.
        assert_eq!(unsafe { std::slice::from_raw_parts(a2 as *const u8, 100) }, &[7u8; 100][..]);
        // The old block is kept backed for the next allocation of its size.
        let again = malloc(40) as u64;
        assert_eq!(again, a);
        free(again as *mut c_void);
        free(c as *mut c_void);
        let (blocks, freed) = run.finish();
        assert_eq!(blocks.len(), 2);
        assert!(freed.is_empty());
        assert_eq!(blocks[0].addr, b & !(PAGE - 1));
        assert_eq!(blocks[1], Block { addr: a2 - HEADER, size: HEADER + 5000, span: 2 * PAGE });

        // A later kernel frees a block an earlier one made: reported, pages kept (the head
        // deletes it everywhere), the range reused only after reclaim.
        let run = KernelRun::begin(&[], None);
        free(b as *mut c_void);
        let (blocks, freed) = run.finish();
        assert!(blocks.is_empty());
        assert_eq!(freed, vec![b & !(PAGE - 1)]);
        assert!(memory.read().resolve(b, 24).is_ok());

        // A re-execution takes the blocks of the first run, by size, in order.
        let first = Region { addr: a2 - HEADER, size: 2 * PAGE };
        memory.write().release(&heap, first.addr).unwrap();
        let run = KernelRun::begin(&[first], None);
        let small = malloc(8) as u64;
        let again = malloc(5000) as u64;
        let (blocks, _) = run.finish();
        assert_eq!(again, a2);
        assert_ne!(small & !(PAGE - 1), first.addr);
        assert_eq!(blocks.iter().map(|b| b.addr).collect::<Vec<_>>(), vec![small - HEADER, first.addr]);

        // Replicas: each run allocates in the range the head shared, from the same empty
        // state, so the same calls give the same addresses (a block freed within the run is
        // given back there at once); a full range falls back to this rank's arena.
        let shared = Region { addr: heap.arena(0, 2).start, size: 64 * PAGE };
        let replica = |big: usize| {
            let run = KernelRun::begin(&[], Some(shared));
            let x = malloc(10) as u64;
            let y = malloc(3 * PAGE as usize) as u64;
            free(x as *mut c_void);
            let z = malloc(20) as u64;
            let w = malloc(big) as u64;
            let (blocks, freed) = run.finish();
            assert!(freed.is_empty());
            let addrs: Vec<u64> = blocks.iter().map(|b| b.addr).collect();
            for b in &blocks {
                memory.write().release(&heap, b.addr).unwrap();
            }
            (y, z, w, addrs)
        };
        let (y, z, w, addrs) = replica(100);
        assert_eq!((y, z, w, addrs.clone()), replica(100), "a second replica allocates at the same addresses");
        let inside = |p: u64| p >= shared.addr && p < shared.addr + shared.size;
        assert!(inside(y) && inside(z) && inside(w) && !mine.contains(y));
        assert_eq!(z, shared.addr + GAP + HEADER, "the freed block's range was taken again first");
        assert_eq!(addrs.len(), 3);
        let (_, _, far, _) = replica(1 << 20);
        assert!(mine.contains(far), "no room left in the shared range: this rank's arena");
        STATE.lock().arena = None;
    }
}
