//! Offloading's own state: the symmetric heap, the kernels and images handed to
//! libomptarget ([`Kernel`], with what its runs wrote, [`WriteSet`]; [`ImageTables`]),
//! placement (the scheduler and the regions in flight per rank), and the head's own device
//! once no worker is left.
//!
//! Threads: offloading threads; the handler reads `local` and `images` (recovery re-runs),
//! the buddy thread reads `in_flight`. `kernels` is read-mostly (an RwLock, written at
//! `load_binary`, under `images`); `images` comes before the ledger's `buffers` (loading an
//! image, the head's own device); `omp_said` is innermost; `in_flight` and `attached` are
//! atomics; `chooser` and `shared` are innermost, under `buffers`.

use super::replica_choice::Chooser;
use crate::data::{Buffer, HEAD};
use event_system::heap::{Arena, ExtentAllocator, BLOCK_GAP, PAGE};
use event_system::protocol::Region;
use event_system::{LocalDevice, SymmetricHeap};
use parking_lot::{Mutex, RwLock};
use rustc_hash::FxHashMap as HashMap;
use scheduler::Scheduler;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

/// Kernels, images, placement and the head's own device.
pub(super) struct Offload {
    pub(super) heap: SymmetricHeap,
    /// Entry token -> kernel.
    pub(super) kernels: RwLock<HashMap<usize, Arc<Kernel>>>,
    pub(super) images: Mutex<Vec<ImageTables>>,
    pub(super) sched: Scheduler,
    /// Per rank: regions running there now.
    in_flight: Vec<AtomicU32>,
    /// The head's own device, once every worker died and the head runs the target regions
    /// itself (see `OnHead::continue_on_head`), and when that started (seconds since start).
    local: OnceLock<(LocalDevice, f64)>,
    /// libomp's messages (`OMP: Warning #96`) workers' regions printed on stderr, and the
    /// worker that printed each first (see `execute.rs`, `once_per_job`).
    pub(super) omp_said: Mutex<HashMap<Vec<u8>, i32>>,
    /// A pointer member was attached (see `data::Buffers::attach`): submits look for them.
    attached: AtomicBool,
    /// Which regions get replicas, with `OMPCLUSTER_FT_REPLICATE=auto` (None: every region).
    /// Taken under the `buffers` lock, innermost.
    pub(super) chooser: Option<Mutex<Chooser>>,
    /// The head's arena (its own device code allocates from the C library, never there), and
    /// the ranges of it given to regions' replicas to allocate in ([`Offload::grant`]) or
    /// held by blocks they made. Taken under the `buffers` lock, innermost.
    shared: (Arena, Mutex<ExtentAllocator>),
    /// Replicas still running when their region went on (`tails.rs`).
    pub(super) tails: super::tails::Tails,
}

impl Offload {
    pub(super) fn new(heap: SymmetricHeap, sched: Scheduler, ranks: usize, cfg: &crate::config::Config) -> Self {
        Offload {
            kernels: RwLock::new(HashMap::default()),
            images: Mutex::new(Vec::new()),
            sched,
            in_flight: (0..ranks).map(|_| AtomicU32::new(0)).collect(),
            local: OnceLock::new(),
            omp_said: Mutex::new(HashMap::default()),
            attached: AtomicBool::new(false),
            tails: Default::default(),
            chooser: match cfg.replicate {
                crate::config::Replicate::Auto { budget_percent } if cfg.replicas > 1 => Some(Mutex::new(Chooser::new(budget_percent, cfg.replicas))),
                _ => None,
            },
            shared: {
                let a = heap.arena(HEAD, ranks as i32);
                (a, Mutex::new(ExtentAllocator::new(a.start, a.size)))
            },
            heap,
        }
    }

    /// A range of the head's arena for the replicas of one region of `kernel` to allocate
    /// device memory in, the same for all (`Event::Execute::arena`): a 16th of the arena (at
    /// most 1 GiB), or twice what the kernel's largest run took, up to a quarter. `None`
    /// when the arena has no such range free (as many regions' replicas run at once).
    pub(super) fn grant(&self, kernel: &Kernel) -> Option<Region> {
        let arena = self.shared.0.size;
        let usual = (arena / 16).min(1 << 30);
        let want = kernel.arena_peak.load(Ordering::Relaxed).saturating_mul(2).clamp(usual, arena / 4) / PAGE * PAGE;
        let (addr, size) = self.shared.1.lock().alloc(want.max(PAGE)).ok()?;
        Some(Region { addr, size })
    }

    /// The replicas given `grant` are settled: the range is free again but for the blocks
    /// (start, span) that became buffers (`kept`); every other block a replica made there is
    /// deleted on its worker, or about to be (its DELETE posted before any later EXECUTE).
    pub(super) fn settle_grant(&self, grant: Region, kept: &[(u64, u64)]) {
        let mut ext = self.shared.1.lock();
        ext.free(grant.addr);
        for &(block, span) in kept.iter().filter(|&&(b, span)| b >= grant.addr + BLOCK_GAP && grant.holds(b, span)) {
            ext.reserve(block - BLOCK_GAP, BLOCK_GAP + span);
        }
    }

    /// Device block `addr` in the head's arena is deleted everywhere: its range may be given
    /// out again.
    pub(super) fn reclaim_shared(&self, addr: u64) {
        self.shared.1.lock().free(addr - BLOCK_GAP);
    }

    /// The head's own device, if it runs target regions itself.
    pub(super) fn local(&self) -> Option<&LocalDevice> {
        self.local.get().map(|(d, _)| d)
    }

    /// The head runs the target regions itself from now on (seconds since start) on `dev`;
    /// nothing if it did already.
    pub(super) fn set_local(&self, dev: LocalDevice, at: f64) {
        let _ = self.local.set((dev, at));
    }

    /// When the head started running the target regions itself (seconds since start).
    pub(super) fn local_since(&self) -> Option<f64> {
        self.local.get().map(|(_, at)| *at)
    }

    /// Regions running on rank `r` now.
    pub(super) fn in_flight(&self, r: i32) -> u32 {
        self.in_flight[r as usize].load(Ordering::Relaxed)
    }

    /// Regions running on any rank now.
    pub(super) fn all_in_flight(&self) -> u32 {
        self.in_flight.iter().map(|n| n.load(Ordering::Relaxed)).sum()
    }

    /// A region starts running on rank `r`.
    pub(super) fn start_running(&self, r: i32) {
        self.in_flight[r as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// A region ended on rank `r`.
    pub(super) fn stop_running(&self, r: i32) {
        self.in_flight[r as usize].fetch_sub(1, Ordering::Relaxed);
    }

    /// Has a pointer member been attached? (Then submits look for them.)
    pub(super) fn attached(&self) -> bool {
        self.attached.load(Ordering::Acquire)
    }

    /// A pointer member was attached.
    pub(super) fn set_attached(&self) {
        self.attached.store(true, Ordering::Release);
    }

    /// Write `bytes` into the head's copy at `addr`: through the head's device once it runs
    /// regions (an image's data keeps the head's own library addresses and runtime state),
    /// else plainly.
    ///
    /// # Safety
    /// `addr..addr+bytes.len()` must lie in a buffer the head backed, which nothing reads or
    /// writes meanwhile.
    pub(super) unsafe fn write_on_head(&self, addr: u64, bytes: &[u8]) {
        match self.local() {
            // SAFETY: forwarded contract.
            Some(dev) => unsafe { dev.write(addr, bytes) },
            // SAFETY: forwarded contract; `bytes` is another allocation.
            None => unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), addr as *mut u8, bytes.len()) },
        }
    }
}

/// What the runs of one kernel changed so far (see `launch.rs`): the arguments whose buffers
/// changed (a set of `launch.rs`'s `arg_mask` bits), whether it changed its image's globals
/// and statics, and whether it changed a buffer it reaches otherwise (through a pointer
/// stored in another: objects device code allocated, say). Told apart so that a kernel
/// writing the objects it points to does not count as writing the image's data, which every
/// region of the image reaches.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct WriteSet {
    pub(super) args: u64,
    pub(super) globals: bool,
    pub(super) other: bool,
}

/// A kernel handed to libomptarget: which image, which index.
#[derive(Debug)]
pub(super) struct Kernel {
    pub(super) image: u32,
    pub(super) index: u32,
    pub(super) name: Arc<str>,
    /// The key of its image's bytes (`journal::key::of_image`).
    pub(super) image_key: u64,
    /// Duration of its last run, nanoseconds (u64::MAX before the first run).
    pub(super) last_ns: std::sync::atomic::AtomicU64,
    /// What its runs so far changed (None until one completed): see `launch.rs`.
    pub(super) writes: Mutex<Option<WriteSet>>,
    /// Runs in flight placed while `writes` was None; changed under the `buffers` lock.
    pub(super) learning: std::sync::atomic::AtomicU32,
    /// Arguments (a `launch.rs` argument mask) whose buffers, mapped `from`, libomptarget
    /// retrieved right after a run: their new contents come back with the EXECUTE's reply.
    /// Unlearned when bytes so sent were replaced before being retrieved.
    pub(super) send_back: std::sync::atomic::AtomicU64,
    /// A run of it allocated or freed device memory (`malloc` in a region): its replicas
    /// need a range to allocate in (`Offload::grant`), or they are not run.
    pub(super) allocates: std::sync::atomic::AtomicBool,
    /// The most address space its allocations in one run took (blocks and their gaps).
    pub(super) arena_peak: std::sync::atomic::AtomicU64,
    /// The user was told that its replicas' results could not be compared.
    pub(super) told_unvotable: AtomicBool,
}

impl Kernel {
    /// A run of it allocated (`blocks`: start, span) or freed device memory: its replicas
    /// need a range of the head's arena that holds what it took (see `allocates`).
    pub(super) fn learn_allocates(&self, blocks: impl Iterator<Item = (u64, u64)>) {
        self.allocates.store(true, Ordering::Relaxed);
        let took = blocks.map(|(_, span)| BLOCK_GAP + span).sum();
        self.arena_peak.fetch_max(took, Ordering::Relaxed);
    }

    /// Once, with voting on: the replicas of a region of it allocated outside the range they
    /// shared (more than it holds, or none was free), so their results could not be compared
    /// and one was taken unvoted.
    pub(super) fn tell_unvotable_allocation(&self) {
        if !self.told_unvotable.swap(true, Ordering::Relaxed) {
            eprintln!(
                "ompcluster: the replicas of a region of kernel {} allocated device memory (malloc, new in the region) \
                 outside the range of addresses they shared (it took more than the range holds, or none was free): \
                 their pointers differ, so one result was taken unvoted (the report counts it as unvoted); its next \
                 regions get a range twice as large as it took",
                crate::config::Config::kernel_short_name(&self.name)
            );
        }
    }

    /// The content key of a run over the buffers it can reach (`journal::key::task`): one
    /// recipe for where a region is logged (`launch.rs`) and where a resumed job looks it up
    /// (`resume.rs`).
    /// A standard stream among the arguments counts as which stream it is, not its address.
    pub(super) fn region_key<'a>(&self, args: &[u64], reached: impl Iterator<Item = &'a Buffer>) -> u64 {
        let mut keyed: Vec<(u64, u64)> = reached.map(|b| (b.addr, b.key)).collect();
        let args = event_system::protocol::StdStream::stable_args(args);
        crate::journal::key::task(self.image_key, &self.name, &args, &mut keyed)
    }
}

/// Kernels whose last run took less than this run on the worker's polling thread.
pub(super) const SHORT_KERNEL_NS: u64 = 50_000;

/// Tables given to libomptarget must stay alive (and unmoved) while the program runs.
pub(crate) struct ImageTables {
    pub(super) _entries: Box<[crate::ctypes::OffloadEntry]>,
    pub(crate) table: Box<crate::ctypes::TargetTable>,
    pub(super) _tokens: Box<[u8]>,
    /// What the head needs to load the image itself (see `on_head.rs`).
    pub(super) source: ImageSource,
}

/// A device image as the workers loaded it.
pub(super) struct ImageSource {
    /// The ELF file (kept only while recovery is on: without it the head never runs regions).
    pub(super) bytes: Option<Box<[u8]>>,
    pub(super) base: u64,
    pub(super) extent: u64,
    pub(super) kernels: Vec<String>,
    /// Address of its writable data, if it has any.
    pub(super) data: Option<u64>,
}

// SAFETY: the raw pointers inside point to the boxed arrays owned by the same value (and to
// name strings in the program's read-only data); nothing mutates them after creation.
unsafe impl Send for ImageTables {}
