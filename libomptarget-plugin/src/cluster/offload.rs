//! Offloading's own state: the symmetric heap, the kernels and images handed to
//! libomptarget ([`Kernel`], with what its runs wrote, [`WriteSet`]; [`ImageTables`]),
//! placement (the scheduler and the regions in flight per rank), and the head's own device
//! once no worker is left.
//!
//! Threads: offloading threads; the handler reads `local` and `images` (recovery re-runs),
//! the buddy thread reads `in_flight`. `kernels` is read-mostly (an RwLock, written at
//! `load_binary`, under `images`); `images` comes before the ledger's `buffers` (loading an
//! image, the head's own device); `omp_said` is innermost; `in_flight` and `attached` are
//! atomics; `chooser` is innermost, under `buffers`.

use super::replica_choice::Chooser;
use crate::data::Buffer;
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
}

impl Offload {
    pub(super) fn new(heap: SymmetricHeap, sched: Scheduler, ranks: usize, cfg: &crate::config::Config) -> Self {
        Offload {
            heap,
            kernels: RwLock::new(HashMap::default()),
            images: Mutex::new(Vec::new()),
            sched,
            in_flight: (0..ranks).map(|_| AtomicU32::new(0)).collect(),
            local: OnceLock::new(),
            omp_said: Mutex::new(HashMap::default()),
            attached: AtomicBool::new(false),
            chooser: match cfg.replicate {
                crate::config::Replicate::Auto { budget_percent } if cfg.replicas > 1 => Some(Mutex::new(Chooser::new(budget_percent, cfg.replicas))),
                _ => None,
            },
        }
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
/// changed (a set of `launch.rs`'s `arg_mask` bits), and whether it changed a buffer it
/// reaches otherwise (its image's globals and statics, a buffer through a pointer stored in
/// another).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct WriteSet {
    pub(super) args: u64,
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
    /// A run of it allocated or freed device memory (`malloc` in a region): its runs are not
    /// replicated (`launch.rs`: each replica's blocks would lie in its own worker's arena).
    pub(super) allocates: std::sync::atomic::AtomicBool,
}

impl Kernel {
    /// A run of it allocated or freed device memory: its later runs get no replicas (see
    /// `allocates`). The first time, with voting on, the user is told that its regions are
    /// not voted on, and why.
    pub(super) fn learn_allocates(&self, vote: bool) {
        if !self.allocates.swap(true, Ordering::Relaxed) && vote {
            eprintln!(
                "ompcluster: kernel {} allocates or frees device memory (malloc, new or free in the region): each \
                 replica's blocks would lie in its own worker's memory, so its regions run on one worker and are \
                 not voted on (OMPCLUSTER_FT_VOTE=1 cannot check them; the report counts them as unvoted)",
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
