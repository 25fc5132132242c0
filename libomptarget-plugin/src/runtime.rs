//! Start-up and shutdown of a rank: MPI, the agreed device heap, and the role (head or worker).

use crate::cluster::Cluster;
use crate::config::Config;
use event_system::{Comm, Liveness, NeverDead, SymmetricHeap};
use mpi::collective::SystemOperation;
use mpi::traits::*;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// What this rank is.
pub(crate) enum Runtime {
    /// Rank 0: runs `main`, owns the cluster device.
    Head(Cluster),
    /// Ranks 1..N-1: wait for `register_lib`, then serve events.
    Worker(Mutex<Option<(Arc<Comm>, SymmetricHeap)>>),
}

static RUNTIME: OnceLock<Runtime> = OnceLock::new();
static REGISTERED: AtomicUsize = AtomicUsize::new(0);

/// The runtime, if initialised.
pub(crate) fn get() -> Option<&'static Runtime> {
    RUNTIME.get()
}

/// Initialise MPI (thread level MULTIPLE), agree on a heap base, and take a role.
pub(crate) fn init() -> Result<(), String> {
    if RUNTIME.get().is_some() {
        return Ok(());
    }
    let cfg = match Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ompcluster: invalid setting {e}");
            std::process::exit(2);
        }
    };
    let (universe, level) = mpi::initialize_with_threading(mpi::Threading::Multiple)
        .ok_or("MPI was already initialised: a program run by ompcluster-run must not call MPI_Init itself")?;
    if level != mpi::Threading::Multiple {
        eprintln!("ompcluster: the MPI library does not provide MPI_THREAD_MULTIPLE (got {level:?})");
        std::process::exit(2);
    }
    let world = universe.world();
    if world.size() < 2 {
        // Nothing to offload to: leave MPI initialised (finalised at exit) and let the stock
        // plugin take the program.
        std::mem::forget(universe);
        return Err("fewer than 2 ranks: the cluster device is off (use ompcluster-run -np N with N >= 2)".into());
    }
    let heap = SymmetricHeap::reserve_agreed(cfg.heap_size, |ok| {
        let mine = i32::from(ok);
        let mut all = 0i32;
        world.all_reduce_into(&mine, &mut all, SystemOperation::min());
        all == 1
    })
    .map_err(|e| e.to_string())?;
    let comm = Arc::new(Comm::duplicate_world(cfg.fragment).map_err(|e| e.to_string())?);
    // MPI is finalised explicitly at shutdown (see `finalize`), not when `universe` drops.
    std::mem::forget(universe);
    let live: Arc<dyn Liveness> = Arc::new(NeverDead);
    let rt = if comm.rank() == 0 {
        Runtime::Head(Cluster::new(comm, heap, live, cfg))
    } else {
        Runtime::Worker(Mutex::new(Some((comm, heap))))
    };
    let _ = RUNTIME.set(rt);
    Ok(())
}

/// A library registers its images. On a worker, this is where it becomes a worker for good.
pub(crate) fn register_lib() {
    match RUNTIME.get() {
        Some(Runtime::Head(_)) => {
            REGISTERED.fetch_add(1, Ordering::AcqRel);
        }
        Some(Runtime::Worker(parts)) => {
            let Some((comm, heap)) = parts.lock().take() else { return };
            let rank = comm.rank();
            let code = match event_system::worker::run(comm, heap, Arc::new(NeverDead)) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("ompcluster worker {rank}: {e}");
                    1
                }
            };
            finalize();
            // SAFETY: leaving the process without running the program's destructors, which
            // belong to a `main` this rank never ran.
            unsafe { libc::_exit(code) };
        }
        None => {}
    }
}

/// A library unregisters; the last one stops the workers.
pub(crate) fn unregister_lib() {
    if let Some(Runtime::Head(c)) = RUNTIME.get() {
        if REGISTERED.fetch_sub(1, Ordering::AcqRel) == 1 {
            c.shutdown();
            finalize();
        }
    }
}

fn finalize() {
    // SAFETY: flushing all C streams (kernel printf output) is always allowed.
    unsafe { libc::fflush(std::ptr::null_mut()) };
    // SAFETY: MPI was initialised by `init`; every request of this rank is complete, and no
    // plugin call touches MPI after the runtime is stopped.
    unsafe { mpi::ffi::MPI_Finalize() };
}

/// Is this an x86-64 ELF shared object (what clang-16 emits for x86_64-pc-linux-gnu)?
pub(crate) fn is_x86_64_shared_object(bytes: &[u8]) -> bool {
    const ET_DYN: u16 = 3;
    const EM_X86_64: u16 = 62;
    bytes.len() >= 64
        && bytes[..4] == *b"\x7fELF"
        && bytes[4] == 2 // 64-bit
        && bytes[5] == 1 // little endian
        && u16::from_le_bytes([bytes[16], bytes[17]]) == ET_DYN
        && u16::from_le_bytes([bytes[18], bytes[19]]) == EM_X86_64
}
