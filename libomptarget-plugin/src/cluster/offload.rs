//! Offloading's own state: the symmetric heap, the kernels and images handed to
//! libomptarget, placement (the scheduler and the regions in flight per rank), the head's own
//! device once no worker is left, and the waker of libomp's hidden helpers.
//!
//! Threads: offloading threads; the handler reads `local` and `images` (recovery re-runs),
//! the buddy thread reads `in_flight`. `kernels` is read-mostly (an RwLock, written at
//! `load_binary`, under `images`); `images` comes before the ledger's `buffers` (loading an
//! image, the head's own device); `omp_said` is innermost; `in_flight` and `attached` are
//! atomics.

use super::{ImageTables, Kernel};
use event_system::{LocalDevice, SymmetricHeap};
use parking_lot::{Mutex, RwLock};
use rustc_hash::FxHashMap as HashMap;
use scheduler::Scheduler;
use std::sync::atomic::{AtomicBool, AtomicU32};
use std::sync::{Arc, OnceLock};

/// Kernels, images, placement and the head's own device.
pub(super) struct Offload {
    pub(super) heap: SymmetricHeap,
    /// Entry token -> kernel.
    pub(super) kernels: RwLock<HashMap<usize, Arc<Kernel>>>,
    pub(super) images: Mutex<Vec<ImageTables>>,
    pub(super) sched: Scheduler,
    /// Per rank: regions running there now.
    pub(super) in_flight: Vec<AtomicU32>,
    /// The head's own device, once every worker died and the head runs the target regions
    /// itself (see `images::continue_on_head`), and when that started (seconds since start).
    pub(super) local: OnceLock<(LocalDevice, f64)>,
    /// Wakes libomp's hidden helper threads when regions are ready and workers idle
    /// (`helpers.rs`).
    pub(super) waker: Option<crate::helpers::Waker>,
    /// libomp's messages (`OMP: Warning #96`) workers' regions printed on stderr, and the
    /// worker that printed each first (see `execute.rs`, `once_per_job`).
    pub(super) omp_said: Mutex<HashMap<Vec<u8>, i32>>,
    /// A pointer member was attached (see `data::Buffers::attach`): submits look for them.
    pub(super) attached: AtomicBool,
}

impl Offload {
    pub(super) fn new(heap: SymmetricHeap, sched: Scheduler, ranks: usize) -> Self {
        Offload {
            heap,
            kernels: RwLock::new(HashMap::default()),
            images: Mutex::new(Vec::new()),
            sched,
            in_flight: (0..ranks).map(|_| AtomicU32::new(0)).collect(),
            local: OnceLock::new(),
            waker: crate::helpers::Waker::start(),
            omp_said: Mutex::new(HashMap::default()),
            attached: AtomicBool::new(false),
        }
    }

    /// The head's own device, if it runs target regions itself.
    pub(super) fn local(&self) -> Option<&LocalDevice> {
        self.local.get().map(|(d, _)| d)
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
