//! The cluster device, as the head sees it: every libomptarget request becomes events to the
//! workers. Data moves lazily: a host submit is staged in the head's own copy of the buffer
//! (at the same device address), and a buffer travels to a worker only when a kernel placed
//! there needs it, from the head or straight from the worker holding the latest version.
//!
//! Concurrency (design note): libomptarget calls in from many threads at once (the `nowait`
//! tasks run on hidden helper threads). The bookkeeping (`Buffers`) is behind one mutex that
//! is held only for decisions and small control sends, never across a bulk transfer or a
//! kernel. Two guarantees need care:
//! * An ALLOC for a worker is sent while holding the mutex, before any thread can see the
//!   buffer as backed there, so the worker always gets ALLOC before data for that range. A
//!   range is given back to the allocator only after the DELETEs for it were sent, so the
//!   worker always sees DELETE before the next ALLOC of the same range.
//! * Two threads needing the same buffer on the same worker do not both send it: the first
//!   marks it `incoming`, the second waits on `moved` until the copy arrived.
//!
//! Conflicting concurrent accesses to one buffer are data races in the user's program
//! (libomptarget orders dependent regions), so versions are updated without further locking.

use crate::checkpoint::{Checkpointer, SaveItem};
use crate::config::Config;
use crate::data::{Buffer, Buffers, PointsTo, HEAD};
use crate::report::{Report, Stats};
use event_system::comm::{CommError, CONTROL_TAG};
use event_system::protocol::{Envelope, Event, FoundPointers, Patch, Region, Reply};
use event_system::{Comm, Liveness, SymmetricHeap, TagAllocator};
use parking_lot::{Condvar, Mutex, RwLock};
use scheduler::{Candidate, Scheduler};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use task_graph::{Access, TaskGraph, TaskRecord};
use thiserror::Error;

/// Why a request failed. Each becomes OFFLOAD_FAIL plus one line on stderr.
#[derive(Debug, Error)]
pub enum ClusterError {
    /// Transport failure.
    #[error(transparent)]
    Comm(#[from] CommError),
    /// A worker refused an event.
    #[error("worker {rank}: {msg}")]
    Worker {
        /// Worker.
        rank: i32,
        /// Its message.
        msg: String,
    },
    /// A device address libomptarget gave us is not a live buffer.
    #[error("{0:#x} is not a device address of a live buffer (or the range runs past it)")]
    UnknownAddress(u64),
    /// Device heap error.
    #[error(transparent)]
    Heap(#[from] event_system::HeapError),
    /// No worker left.
    #[error("no live worker to run on")]
    NoWorker,
    /// The entry point is not one we handed out.
    #[error("unknown kernel entry {0:#x}")]
    UnknownKernel(usize),
    /// The device image is malformed.
    #[error("bad device image: {0}")]
    BadImage(String),
    /// The runtime already shut down.
    #[error("the cluster device has shut down")]
    Stopped,
    /// Two regions changed one buffer concurrently on different workers.
    #[error(
        "regions running at the same time on workers {others:?} and {worker} both changed {what} at {addr:#x} ({size} bytes) in their own copies, which cannot be merged; {advice}"
    )]
    Conflict {
        /// What the buffer is: a device buffer, or the globals and statics of an image.
        what: String,
        /// How to avoid it.
        advice: &'static str,
        /// Buffer address.
        addr: u64,
        /// Its size.
        size: u64,
        /// The worker whose change came second.
        worker: i32,
        /// Where the other change is.
        others: Vec<i32>,
    },
}

type Result<T> = std::result::Result<T, ClusterError>;

/// A kernel handed to libomptarget: which image, which index.
#[derive(Debug)]
struct Kernel {
    image: u32,
    index: u32,
    name: Arc<str>,
    /// Duration of its last run, nanoseconds (u64::MAX before the first run).
    last_ns: std::sync::atomic::AtomicU64,
}

/// A worker's report of a kernel run: changed regions, pointers found in them, seconds in
/// the kernel, and the changes to image data regions (see `Reply::Executed`).
type Executed = (Vec<bool>, Vec<FoundPointers>, f64, Vec<(u32, Patch)>);

/// Kernels whose last run took less than this run on the worker's polling thread.
const SHORT_KERNEL_NS: u64 = 50_000;

/// Tables given to libomptarget must stay alive (and unmoved) while the program runs.
pub(crate) struct ImageTables {
    _entries: Box<[crate::abi::OffloadEntry]>,
    pub(crate) table: Box<crate::abi::TargetTable>,
    _tokens: Box<[u8]>,
}

// SAFETY: the raw pointers inside point to the boxed arrays owned by the same value (and to
// name strings in the program's read-only data); nothing mutates them after creation.
unsafe impl Send for ImageTables {}

/// The head's state.
pub struct Cluster {
    comm: Arc<Comm>,
    heap: SymmetricHeap,
    live: Arc<dyn Liveness>,
    tags: Arc<TagAllocator>,
    /// Read side: any offloading request; write side: a checkpoint (see `checkpoint.rs`).
    gate: RwLock<()>,
    ckpt: Option<Checkpointer>,
    /// Bytes of all live device buffers (for the checkpoint interval).
    device_bytes: AtomicU64,
    /// Host allocations (`alloc_host`): address -> extent.
    host_allocs: Mutex<HashMap<u64, u64>>,
    cfg: Config,
    buffers: Mutex<Buffers>,
    moved: Condvar,
    kernels: RwLock<HashMap<usize, Arc<Kernel>>>,
    images: Mutex<Vec<ImageTables>>,
    sched: Scheduler,
    in_flight: Vec<AtomicU32>,
    graph: Mutex<TaskGraph>,
    stats: Stats,
    start: Instant,
    stopped: AtomicBool,
}

impl Cluster {
    /// The head's cluster device over `comm` (rank 0), with the agreed heap.
    pub(crate) fn new(comm: Arc<Comm>, heap: SymmetricHeap, live: Arc<dyn Liveness>, cfg: Config, ckpt: Option<Checkpointer>) -> Self {
        let n = comm.size() as usize;
        Cluster {
            tags: Arc::new(TagAllocator::new(comm.tag_ub())),
            gate: RwLock::new(()),
            ckpt,
            device_bytes: AtomicU64::new(0),
            host_allocs: Mutex::new(HashMap::new()),
            buffers: Mutex::new(Buffers::new(heap.base(), heap.end() - heap.base())),
            moved: Condvar::new(),
            kernels: RwLock::new(HashMap::new()),
            images: Mutex::new(Vec::new()),
            sched: Scheduler::new(cfg.policy),
            in_flight: (0..n).map(|_| AtomicU32::new(0)).collect(),
            graph: Mutex::new(TaskGraph::new()),
            stats: Stats::new(n),
            start: Instant::now(),
            stopped: AtomicBool::new(false),
            comm,
            heap,
            live,
            cfg,
        }
    }

    fn workers(&self) -> impl Iterator<Item = i32> + '_ {
        (1..self.comm.size()).filter(|&r| !self.live.is_dead(r))
    }

    fn check_running(&self) -> Result<()> {
        if self.stopped.load(Ordering::Acquire) {
            Err(ClusterError::Stopped)
        } else {
            Ok(())
        }
    }

    /// Send `event` to `rank` under a fresh tag; returns the tag.
    fn post(&self, rank: i32, event: Event) -> Result<i32> {
        let tag = self.tags.next();
        self.comm.send_msg(rank, CONTROL_TAG, &Envelope { tag, event }, self.live.as_ref())?;
        Ok(tag)
    }

    fn expect_ok(&self, rank: i32, tag: i32) -> Result<()> {
        match self.comm.recv_msg::<Reply>(rank, tag, self.live.as_ref())? {
            Reply::Ok => Ok(()),
            Reply::Error(msg) => Err(ClusterError::Worker { rank, msg }),
            other => Err(ClusterError::Worker { rank, msg: format!("unexpected reply {other:?}") }),
        }
    }

    fn log(&self, what: std::fmt::Arguments<'_>) {
        if self.cfg.verbose {
            eprintln!("[ompcluster {:>9.3} ms] {what}", self.start.elapsed().as_secs_f64() * 1e3);
        }
    }

    /// Enter an offloading request: take a checkpoint first if one is due, then hold the
    /// gate's read side for the request.
    fn enter(&self) -> Result<parking_lot::RwLockReadGuard<'_, ()>> {
        self.check_running()?;
        if let Some(cp) = &self.ckpt {
            if cp.due(self.device_bytes.load(Ordering::Relaxed)) {
                self.checkpoint(cp);
            }
        }
        Ok(self.gate.read())
    }

    /// Take a consistent checkpoint: pause offloading, decide who saves which changed buffer,
    /// tell the saving workers, resume; the saves that follow and the flush run in the
    /// background (design note in `checkpoint.rs`).
    fn checkpoint(&self, cp: &Checkpointer) {
        let t0 = Instant::now();
        let gate = self.gate.write();
        if !cp.due(self.device_bytes.load(Ordering::Relaxed)) {
            return; // another thread took it while we waited
        }
        let (ckpt, saved) = cp.begin();
        let mut plan: BTreeMap<i32, Vec<SaveItem>> = BTreeMap::new();
        {
            let bufs = self.buffers.lock();
            for b in bufs.iter().filter(|b| b.version > b.pristine_version() && saved.get(&b.id) != Some(&b.version)) {
                let saver = self.current_holder(b);
                match saver {
                    Some(r) => plan.entry(r).or_default().push((b.id, b.addr, b.size, b.version)),
                    None => eprintln!("ompcluster: checkpoint {ckpt}: no live holder of buffer {}", b.id),
                }
            }
        }
        let mut posted = Vec::new();
        let mut post_failed = None;
        for (&r, items) in plan.iter().filter(|(&r, _)| r != HEAD) {
            let regions = items.iter().map(|&(id, addr, size, _)| (id, Region { addr, size })).collect();
            match self.post(r, Event::Checkpoint { ckpt, regions }) {
                Ok(tag) => posted.push((r, tag)),
                Err(e) => {
                    // This checkpoint fails; the workers already told still answer, and the
                    // background thread collects their answers like any others.
                    post_failed = Some(format!("rank {r}: {e}"));
                    break;
                }
            }
        }
        let head_items = plan.get(&HEAD).cloned().unwrap_or_default();
        let items: Vec<SaveItem> = plan.values().flatten().copied().collect();
        let pause = t0.elapsed();
        let (comm, live) = (self.comm.clone(), self.live.clone());
        self.log(format_args!("CHECKPOINT {ckpt}: {} regions, pause {:.3} ms", items.len(), pause.as_secs_f64() * 1e3));
        cp.end_pause(ckpt, &items, head_items, pause, move |own_flush, saved| {
            // Each worker answers twice on its tag: saved (Ok), then flushed (Flushed). Every
            // answer is collected, even after a failure, so that none is left behind.
            let mut failed = post_failed;
            let mut flushing = Vec::new();
            for &(r, tag) in &posted {
                match comm.recv_msg::<Reply>(r, tag, live.as_ref()) {
                    Ok(Reply::Ok) => flushing.push((r, tag)),
                    Ok(Reply::Error(e)) => failed = failed.or(Some(format!("rank {r}: {e}"))),
                    Ok(other) => failed = failed.or(Some(format!("rank {r}: unexpected reply {other:?}"))),
                    Err(e) => failed = failed.or(Some(e.to_string())),
                }
            }
            saved();
            let mut records = Vec::new();
            match own_flush.and_then(|h| h.wait()) {
                Ok(own) => records.extend(own.records),
                Err(e) => failed = failed.or(Some(e.to_string())),
            }
            for (r, tag) in flushing {
                let recs = match comm.recv_msg::<Reply>(r, tag, live.as_ref()) {
                    Ok(Reply::Flushed(bytes)) => serde_json::from_slice::<Vec<ckpt_veloc::RegionRecord>>(&bytes)
                        .map_err(|e| format!("bad flush records from rank {r}: {e}"))
                        .and_then(|recs| match recs.iter().all(|x| x.rank == r as u32 && x.ckpt == ckpt) {
                            true => Ok(recs),
                            false => Err(format!("rank {r} sent records of another rank or checkpoint")),
                        }),
                    Ok(Reply::Error(e)) => Err(format!("rank {r}: {e}")),
                    Ok(other) => Err(format!("rank {r}: unexpected reply {other:?}")),
                    Err(e) => Err(e.to_string()),
                };
                match recs {
                    Ok(recs) => records.extend(recs),
                    Err(e) => failed = failed.or(Some(e)),
                }
            }
            failed.map_or(Ok(records), Err)
        });
        drop(gate);
    }

    // ----- images -----

    /// Send a device image to every worker and build libomptarget's entry table.
    ///
    /// The image gets a range of the symmetric heap, and every worker loads it there, so its
    /// code and data have the same addresses everywhere: libomptarget gets the real device
    /// address of each global (`base + st_value`), and the image's writable data (`.data`,
    /// `.bss`, ..., everything past RELRO) becomes one device buffer, held by every worker
    /// after loading and moved like any buffer once a kernel changes it.
    ///
    /// `entries` are the image's offload entries (names valid for the program's lifetime).
    pub(crate) fn load_binary(&self, image: &[u8], entries: &[crate::abi::OffloadEntry]) -> Result<*mut crate::abi::TargetTable> {
        let _gate = self.enter()?;
        let mut images = self.images.lock();
        let idx = images.len() as u32;
        let elf = event_system::elf::ElfImage::parse(image).map_err(|e| ClusterError::BadImage(e.to_string()))?;
        let data = elf.writable_data().map_err(|e| ClusterError::BadImage(e.to_string()))?;
        let extent = elf.extent();
        let tokens: Box<[u8]> = vec![0u8; entries.len().max(1)].into_boxed_slice();
        let mut table_entries: Box<[crate::abi::OffloadEntry]> = entries.to_vec().into_boxed_slice();
        let mut kernels = Vec::new();
        let mut globals = 0;
        let mut new_kernels = Vec::new();
        // Check every entry before reserving anything.
        for e in table_entries.iter() {
            let name = e.name_str().ok_or_else(|| ClusterError::BadImage("entry without a name".into()))?;
            if e.size != 0 && elf.symbol(&name).is_none() {
                return Err(ClusterError::BadImage(format!("global {name} is not in the image's dynamic symbol table")));
            }
        }
        let base = self.buffers.lock().reserve_image(extent)?;
        for (i, e) in table_entries.iter_mut().enumerate() {
            let name = e.name_str().expect("checked above");
            if e.size == 0 {
                let token = tokens.as_ptr() as usize + i;
                new_kernels.push((token, Arc::new(Kernel { image: idx, index: kernels.len() as u32, name: name.as_str().into(), last_ns: u64::MAX.into() })));
                kernels.push(name);
                e.addr = token as *mut libc::c_void;
            } else {
                e.addr = (base + elf.symbol(&name).expect("checked above")) as *mut libc::c_void;
                globals += 1;
            }
        }
        let workers: Vec<i32> = self.workers().collect();
        let mut tags = Vec::new();
        for &w in &workers {
            let tag = self.post(
                w,
                Event::LoadBinary { image: idx, size: image.len() as u64, base, extent, kernels: kernels.clone() },
            )?;
            // SAFETY: `image` is the device image libomptarget keeps alive for the program.
            unsafe { self.comm.send_bytes(w, tag, image.as_ptr(), image.len(), self.live.as_ref())? };
            tags.push((w, tag));
        }
        for (w, tag) in tags {
            self.expect_ok(w, tag)?;
        }
        if let Some((start, end)) = data {
            // Every worker now holds the loaded image's initial data (after its constructors,
            // which are deterministic: the same on every worker).
            let mut bufs = self.buffers.lock();
            let b = bufs.add_image_data(base + start, end - start, idx);
            b.version = 1;
            b.holders = workers.iter().copied().collect();
            b.backed = b.holders.clone();
        }
        self.log(format_args!(
            "LOAD_BINARY image {idx}: {} bytes at {base:#x}+{extent:#x}, {} kernels, {globals} globals, data {data:x?}",
            image.len(),
            kernels.len()
        ));
        self.kernels.write().extend(new_kernels);
        let begin = table_entries.as_mut_ptr();
        // SAFETY: one past the end of the same boxed slice.
        let end = unsafe { begin.add(table_entries.len()) };
        let table = Box::new(crate::abi::TargetTable { entries_begin: begin, entries_end: end });
        images.push(ImageTables { _entries: table_entries, table, _tokens: tokens });
        let t = images.last_mut().expect("just pushed");
        Ok(&mut *t.table as *mut _)
    }

    // ----- memory -----

    /// Allocate a device buffer.
    pub(crate) fn alloc(&self, size: u64, host: u64) -> Result<u64> {
        let _gate = self.enter()?;
        let addr = self.buffers.lock().create(size, host)?.addr;
        self.device_bytes.fetch_add(size, Ordering::Relaxed);
        self.log(format_args!("ALLOC {addr:#x} {size} bytes"));
        Ok(addr)
    }

    /// Allocate host memory for `llvm_omp_target_alloc_host`: pages of the symmetric heap that
    /// only the head backs. The program uses it as host memory (maps copy it like any host
    /// data); a region that dereferences it directly faults on its worker, where the range is
    /// reserved but never backed, instead of reading whatever the worker has at that address.
    pub(crate) fn alloc_host(&self, size: u64) -> Result<u64> {
        self.check_running()?;
        let (addr, span) = self.buffers.lock().reserve_raw(size)?;
        self.heap.back(addr, span)?;
        self.host_allocs.lock().insert(addr, span);
        self.log(format_args!("ALLOC_HOST {addr:#x} {size} bytes"));
        Ok(addr)
    }

    /// Free a device buffer, or host memory from [`Cluster::alloc_host`].
    pub(crate) fn delete(&self, addr: u64) -> Result<()> {
        if let Some(span) = self.host_allocs.lock().remove(&addr) {
            self.heap.release(addr, span)?;
            self.buffers.lock().free_range(addr);
            return Ok(());
        }
        if self.stopped.load(Ordering::Acquire) {
            return Ok(()); // the workers are gone; the range dies with the process
        }
        let _gate = self.enter()?;
        let b = {
            let mut bufs = self.buffers.lock();
            if bufs.get(addr).is_some_and(|b| b.global_of.is_some()) {
                // An image's data lives as long as the image: not libomptarget's to free.
                return Err(ClusterError::UnknownAddress(addr));
            }
            bufs.remove(addr).ok_or(ClusterError::UnknownAddress(addr))?
        };
        self.device_bytes.fetch_sub(b.size, Ordering::Relaxed);
        if let Some(cp) = &self.ckpt {
            cp.forget(b.id);
        }
        let region = Region { addr: b.addr, size: b.span };
        for &r in &b.backed {
            if r == HEAD {
                self.before_changing_staged(b.addr);
                self.heap.release(b.addr, b.span)?;
            } else if !self.live.is_dead(r) {
                self.post(r, Event::Delete(region))?;
            }
        }
        self.buffers.lock().free_range(addr);
        self.log(format_args!("DELETE {addr:#x}"));
        Ok(())
    }

    /// Wait until a checkpoint in progress has saved the head's staged copy of the buffer at
    /// `addr` (if it is saving it): call before changing or freeing that copy.
    fn before_changing_staged(&self, addr: u64) {
        if let Some(cp) = &self.ckpt {
            cp.head_pending.wait(addr);
        }
    }

    fn stage_on_head(&self, bufs: &mut Buffers, addr: u64) -> Result<()> {
        let b = bufs.get_mut(addr).expect("caller holds a live buffer");
        if !b.backed.contains(&HEAD) {
            self.heap.back(b.addr, b.span)?;
            b.backed.insert(HEAD);
        }
        Ok(())
    }

    /// Copy `len` host bytes at `host` to device address `tgt`.
    ///
    /// # Safety
    /// `host..host+len` must be readable.
    pub(crate) unsafe fn submit(&self, tgt: u64, host: *const u8, len: u64) -> Result<()> {
        let _gate = self.enter()?;
        // SAFETY: forwarded contract.
        unsafe { self.submit_inner(tgt, host, len) }
    }

    /// [`Cluster::submit`] without the gate (the caller holds it).
    ///
    /// # Safety
    /// As for `submit`.
    unsafe fn submit_inner(&self, tgt: u64, host: *const u8, len: u64) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let (lo, hi) = (self.heap.base(), self.heap.end());
        // SAFETY: the caller guarantees `host..host+len` is readable until we return.
        let scan = || match unsafe { event_system::protocol::scan_pointers(host, len as usize, lo, hi) } {
            FoundPointers::Many => PointsTo::All,
            FoundPointers::Some(v) => PointsTo::Some(v.into_iter().collect()),
        };
        // SAFETY: forwarded contract (readable host bytes).
        let (addr, targets, whole, found) = unsafe { self.submit_bytes(tgt, host, len, scan)? };
        let mut bufs = self.buffers.lock();
        if let Some(b) = bufs.get_mut(addr) {
            b.version += 1;
            b.holders = targets.into_iter().collect();
            if whole {
                b.points_to = found;
            } else {
                b.points_to.add(found);
            }
        }
        drop(bufs);
        self.log(format_args!("SUBMIT {tgt:#x} {len} bytes"));
        Ok(())
    }

    /// Move the bytes of a submit where they belong; returns the buffer, where its current
    /// version now is, whether the submit covered all of it, and what `scan` (which reads
    /// the host bytes) found: it runs while the bytes travel to the first worker.
    ///
    /// # Safety
    /// `host..host+len` must be readable.
    unsafe fn submit_bytes(
        &self,
        tgt: u64,
        host: *const u8,
        len: u64,
        scan: impl FnOnce() -> PointsTo,
    ) -> Result<(u64, Vec<i32>, bool, PointsTo)> {
        let (addr, targets, whole) = {
            let mut bufs = self.buffers.lock();
            let b = bufs.containing_range(tgt, len).ok_or(ClusterError::UnknownAddress(tgt))?;
            let addr = b.addr;
            let whole = tgt == b.addr && len >= b.size;
            let on_workers = b.version > 0 && !b.holders.is_empty() && !b.holders.contains(&HEAD);
            let targets: Vec<i32> = if !on_workers {
                // Fresh or staged on the head: stage here, move lazily to where it is used.
                vec![HEAD]
            } else if whole {
                // It lives on workers: update it where it is used (one holder is enough).
                let holders = b.holders.clone();
                vec![self.least_busy(&holders).ok_or(ClusterError::NoWorker)?]
            } else {
                // A piece of it: patch every copy of the current version.
                b.holders.iter().copied().collect()
            };
            if targets.contains(&HEAD) {
                self.stage_on_head(&mut bufs, addr)?;
            }
            (addr, targets, whole)
        };
        if targets.contains(&HEAD) {
            self.before_changing_staged(addr);
        }
        let mut scan = Some(scan);
        let mut found = None;
        for &r in &targets {
            if r == HEAD {
                // SAFETY: `tgt..tgt+len` lies in a buffer the head has backed (staged above);
                // the host range is readable (caller).
                unsafe { std::ptr::copy_nonoverlapping(host, tgt as *mut u8, len as usize) };
            } else {
                let tag = self.post(r, Event::Submit(Region { addr: tgt, size: len }))?;
                let during = || scan.take().map(|s| s());
                // SAFETY: host range readable (caller) and unchanged until we return; the
                // scan only reads it.
                let f = unsafe { self.comm.send_bytes_during(r, tag, host, len as usize, self.live.as_ref(), during)? };
                found = found.or(f);
                self.expect_ok(r, tag)?;
                self.stats.add_submitted(len);
            }
        }
        let found = match (found, scan) {
            (Some(f), _) => f,
            (None, Some(s)) => s(),
            (None, None) => PointsTo::All,
        };
        Ok((addr, targets, whole, found))
    }

    /// Copy `len` bytes at device address `tgt` to host memory at `host`.
    ///
    /// # Safety
    /// `host..host+len` must be writable and not accessed by others meanwhile.
    pub(crate) unsafe fn retrieve(&self, host: *mut u8, tgt: u64, len: u64) -> Result<()> {
        let _gate = self.enter()?;
        // SAFETY: forwarded contract.
        unsafe { self.retrieve_inner(host, tgt, len) }
    }

    /// [`Cluster::retrieve`] without the gate (the caller holds it).
    ///
    /// # Safety
    /// As for `retrieve`.
    unsafe fn retrieve_inner(&self, host: *mut u8, tgt: u64, len: u64) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let src = {
            let bufs = self.buffers.lock();
            let b = bufs.containing_range(tgt, len).ok_or(ClusterError::UnknownAddress(tgt))?;
            if b.version == 0 {
                None
            } else {
                Some(self.current_holder(b).ok_or(ClusterError::NoWorker)?)
            }
        };
        match src {
            // SAFETY: the caller guarantees the host range is writable.
            None => unsafe { std::ptr::write_bytes(host, 0, len as usize) },
            // SAFETY: the head holds the current version in its staged copy at `tgt`.
            Some(HEAD) => unsafe { std::ptr::copy_nonoverlapping(tgt as *const u8, host, len as usize) },
            Some(w) => {
                let tag = self.post(w, Event::Retrieve(Region { addr: tgt, size: len }))?;
                self.expect_ok(w, tag)?;
                // SAFETY: the caller guarantees the host range is writable and exclusive.
                unsafe { self.comm.recv_bytes(w, tag, host, len as usize, self.live.as_ref())? };
                self.stats.add_retrieved(len);
            }
        }
        self.log(format_args!("RETRIEVE {tgt:#x} {len} bytes from {src:?}"));
        Ok(())
    }

    /// Where to take a buffer's current version from: the head's staged copy if it holds
    /// one, else the least busy live worker holding it.
    fn current_holder(&self, b: &Buffer) -> Option<i32> {
        if b.holders.contains(&HEAD) {
            Some(HEAD)
        } else {
            self.least_busy(&b.holders)
        }
    }

    /// Give worker `w` pages for the buffer if it has none. Called with the buffer lock held,
    /// so the ALLOC reaches `w` before anything another thread sends it for this buffer.
    fn back_on(&self, b: &mut Buffer, w: i32) -> Result<()> {
        if !b.backed.contains(&w) {
            self.comm.send_msg(w, CONTROL_TAG, &Envelope { tag: 0, event: Event::Alloc(Region { addr: b.addr, size: b.span }) }, self.live.as_ref())?;
            b.backed.insert(w);
        }
        Ok(())
    }

    fn least_busy(&self, ranks: &BTreeSet<i32>) -> Option<i32> {
        ranks
            .iter()
            .copied()
            .filter(|&r| r != HEAD && !self.live.is_dead(r))
            .min_by_key(|&r| self.in_flight[r as usize].load(Ordering::Relaxed))
    }

    /// Make the current version of the buffer at `addr` present on worker `w`. Returns the
    /// bytes moved.
    fn ensure_present(&self, addr: u64, w: i32) -> Result<u64> {
        let mut bufs = self.buffers.lock();
        let (src, version, size) = loop {
            let b = bufs.get_mut(addr).ok_or(ClusterError::UnknownAddress(addr))?;
            if b.held_by(w) {
                self.back_on(b, w)?;
                return Ok(0);
            }
            if b.incoming.contains(&w) {
                self.moved.wait(&mut bufs);
                continue;
            }
            let src = self.current_holder(b).ok_or(ClusterError::NoWorker)?;
            self.back_on(b, w)?;
            b.incoming.insert(w);
            break (src, b.version, b.size);
        };
        drop(bufs);
        let t0 = Instant::now();
        let region = Region { addr, size };
        let moved = if src == HEAD {
            self.post(w, Event::Submit(region)).and_then(|tag| {
                // SAFETY: the head's staged copy of this buffer is backed and holds the current
                // version; pages are only discarded (never unmapped) while the buffer lives.
                unsafe { self.comm.send_bytes(w, tag, addr as *const u8, size as usize, self.live.as_ref())? };
                self.expect_ok(w, tag)?;
                self.stats.add_submitted(size);
                Ok(())
            })
        } else {
            let tag = self.tags.next();
            let send = |rank: i32, event: Event| {
                self.comm.send_msg(rank, CONTROL_TAG, &Envelope { tag, event }, self.live.as_ref())
            };
            send(src, Event::ExchangeSend { region, peer: w })
                .and_then(|_| send(w, Event::ExchangeRecv { region, peer: src }))
                .map_err(ClusterError::from)
                .and_then(|_| {
                    self.expect_ok(src, tag)?;
                    self.expect_ok(w, tag)?;
                    self.stats.add_exchanged(size);
                    Ok(())
                })
        };
        self.sched.transfer_finished(size, t0.elapsed().as_secs_f64());
        let mut bufs = self.buffers.lock();
        if let Some(b) = bufs.get_mut(addr) {
            b.incoming.remove(&w);
            if moved.is_ok() && b.version == version {
                b.holders.insert(w);
            }
        }
        self.moved.notify_all();
        drop(bufs);
        moved?;
        self.log(format_args!("MOVE {addr:#x} {size} bytes {src} -> {w}"));
        Ok(size)
    }

    /// Device-to-device copy inside the cluster device (`omp_target_memcpy`).
    pub(crate) fn copy(&self, src: u64, dst: u64, len: u64) -> Result<()> {
        let _gate = self.enter()?;
        if len == 0 {
            return Ok(());
        }
        let (src_buf, dst_buf, at, whole) = {
            let bufs = self.buffers.lock();
            let s = bufs.containing_range(src, len).ok_or(ClusterError::UnknownAddress(src))?;
            let d = bufs.containing_range(dst, len).ok_or(ClusterError::UnknownAddress(dst))?;
            let at = if s.version == 0 { HEAD } else { self.current_holder(s).ok_or(ClusterError::NoWorker)? };
            (s.addr, d.addr, at, dst == d.addr && len >= d.size)
        };
        if at == HEAD {
            // Do it on the head: the source's current version is staged there (or is zeros).
            let mut tmp = vec![0u8; len as usize];
            // SAFETY: `tmp` has `len` writable bytes.
            unsafe { self.retrieve_inner(tmp.as_mut_ptr(), src, len)? };
            // SAFETY: `tmp` has `len` readable bytes.
            return unsafe { self.submit_inner(dst, tmp.as_ptr(), len) };
        }
        self.ensure_present(src_buf, at)?;
        if !whole {
            self.ensure_present(dst_buf, at)?;
        } else {
            let mut bufs = self.buffers.lock();
            let b = bufs.get_mut(dst_buf).ok_or(ClusterError::UnknownAddress(dst))?;
            self.back_on(b, at)?;
        }
        let tag = self.post(at, Event::Copy { src, dst, size: len })?;
        self.expect_ok(at, tag)?;
        let mut bufs = self.buffers.lock();
        let from = bufs.get(src_buf).map(|b| b.points_to.clone()).unwrap_or(PointsTo::All);
        if let Some(b) = bufs.get_mut(dst_buf) {
            b.version += 1;
            b.holders = [at].into();
            b.points_to.add(from);
        }
        self.log(format_args!("COPY {src:#x} -> {dst:#x} {len} bytes on {at}"));
        Ok(())
    }

    // ----- kernels -----

    /// Run the kernel `entry` (a token from `load_binary`) with argument values `args`;
    /// `begins[i]` is the device begin of argument i's mapped section, `hosts[i]` its host
    /// pointer (0 for by-value arguments): see [`Buffers::by_translation`] for why both.
    /// `mapped_from[i]` says argument i was mapped `from` (its buffer is surely written).
    pub(crate) fn launch(&self, entry: usize, args: Vec<u64>, begins: &[u64], hosts: &[u64], mapped_from: &[bool]) -> Result<()> {
        let _gate = self.enter()?;
        let t0 = self.start.elapsed().as_secs_f64();
        let kernel = self.kernels.read().get(&entry).cloned().ok_or(ClusterError::UnknownKernel(entry))?;
        // What can it reach, where is it, and where must it run? Placement and the marking of
        // the buffers it writes happen under one lock, so two concurrent writers of a buffer
        // always see each other.
        let (w, reach, assume_written) = {
            let mut bufs = self.buffers.lock();
            loop {
                let translated: Vec<(u64, u64)> =
                    begins.iter().zip(hosts).filter(|(_, &h)| h != 0).map(|(&d, &h)| (d, h)).collect();
                let arg_buffers = |i: usize| -> Vec<u64> {
                    let mut v: Vec<u64> = bufs.near(begins[i]).collect();
                    if hosts[i] != 0 {
                        v.extend_from_slice(bufs.by_translation(begins[i], hosts[i]));
                    }
                    v
                };
                let written: BTreeSet<u64> =
                    (0..begins.len()).filter(|&i| mapped_from[i]).flat_map(arg_buffers).collect();
                let reach: Vec<(u64, u64, u64, u64)> = bufs
                    .reachable(&args.iter().chain(begins).copied().collect::<Vec<u64>>(), &translated, kernel.image)
                    .into_iter()
                    .map(|a| {
                        let b = bufs.get(a).expect("reachable buffers exist");
                        (b.addr, b.size, b.id, b.version)
                    })
                    .collect();
                let pins: BTreeSet<i32> =
                    reach.iter().filter_map(|(a, ..)| bufs.get(*a).and_then(|b| b.writing).map(|(w, _)| w)).collect();
                if pins.len() > 1 {
                    // It reaches buffers being written on two workers: wait for one to finish.
                    self.moved.wait(&mut bufs);
                    continue;
                }
                let candidates: Vec<Candidate> = self
                    .workers()
                    .filter(|w| pins.is_empty() || pins.contains(w))
                    .map(|w| Candidate {
                        rank: w,
                        missing_bytes: reach
                            .iter()
                            .filter(|(a, ..)| !bufs.get(*a).is_some_and(|b| b.held_by(w)))
                            .map(|(_, s, ..)| *s)
                            .sum(),
                        in_flight: self.in_flight[w as usize].load(Ordering::Relaxed),
                    })
                    .collect();
                let w = self.sched.choose(&candidates).ok_or(ClusterError::NoWorker)?;
                for a in &written {
                    if let Some(b) = bufs.get_mut(*a) {
                        b.writing = Some((w, b.writing.map_or(0, |(_, n)| n) + 1));
                    }
                }
                let assume_written: Vec<bool> = reach.iter().map(|(a, ..)| written.contains(a)).collect();
                break (w, reach, assume_written);
            }
        };
        self.in_flight[w as usize].fetch_add(1, Ordering::Relaxed);
        let result = self.run_on(w, &kernel, &args, &reach, assume_written.clone());
        self.in_flight[w as usize].fetch_sub(1, Ordering::Relaxed);
        let release_writes = |bufs: &mut Buffers| {
            for ((a, ..), aw) in reach.iter().zip(&assume_written) {
                if let Some(b) = bufs.get_mut(*a).filter(|_| *aw) {
                    b.writing = match b.writing {
                        Some((x, n)) if n > 1 => Some((x, n - 1)),
                        _ => None,
                    };
                }
            }
        };
        if result.is_err() {
            release_writes(&mut self.buffers.lock());
            self.moved.notify_all();
        }
        let (changed, pointers, kernel_s, patches) = result?;
        let mut patches: HashMap<usize, Vec<(u64, Vec<u8>)>> = patches.into_iter().map(|(i, p)| (i as usize, p)).collect();
        // Image data this kernel changed while another worker changed it too: its changes,
        // to apply on top of the other's (below, once the lock is released).
        let mut merges: Vec<(u64, Patch)> = Vec::new();
        // Record the new versions.
        let mut reads = Vec::with_capacity(reach.len());
        let mut writes = Vec::new();
        let mut conflict = None;
        {
            let mut bufs = self.buffers.lock();
            release_writes(&mut bufs);
            let mut found = pointers.into_iter();
            for (i, ((addr, _, id, version), c)) in reach.iter().zip(changed).enumerate() {
                reads.push(Access { buffer: *id, version: *version });
                if !c {
                    continue;
                }
                let f = found.next().unwrap_or(FoundPointers::Many);
                if let Some(b) = bufs.get_mut(*addr) {
                    if b.version != *version && !b.holders.contains(&w) && b.global_of.is_some() {
                        if let Some(p) = patches.remove(&i) {
                            // The globals and statics of one image are one buffer: regions
                            // writing different ones at the same time on different workers
                            // change different bytes. Patch this kernel's bytes into the
                            // copies holding the other change (as a partial submit would).
                            b.points_to.add(match f {
                                FoundPointers::Many => PointsTo::All,
                                FoundPointers::Some(v) => PointsTo::Some(v.into_iter().collect()),
                            });
                            merges.push((b.addr, p));
                            continue;
                        }
                    }
                    if b.version != *version && !b.holders.contains(&w) {
                        // Another worker changed it meanwhile, in its own copy: two copies with
                        // different changes cannot be merged. Say so rather than lose either.
                        conflict = Some((b.addr, b.size, b.holders.clone(), b.global_of));
                    }
                    b.version += 1;
                    b.holders = [w].into();
                    b.points_to = match f {
                        FoundPointers::Many => PointsTo::All,
                        FoundPointers::Some(v) => PointsTo::Some(v.into_iter().collect()),
                    };
                    if b.backed.contains(&HEAD) {
                        // The staged copy is stale: give its memory back (it stays mapped).
                        self.before_changing_staged(b.addr);
                        let _ = self.heap.discard(b.addr, b.span);
                    }
                    writes.push(Access { buffer: b.id, version: b.version });
                }
            }
        }
        self.moved.notify_all();
        for (addr, runs) in merges {
            for (off, bytes) in runs {
                // SAFETY: `bytes` is a readable local vector; the gate is held (`_gate`).
                unsafe { self.submit_inner(addr + off, bytes.as_ptr(), bytes.len() as u64)? };
            }
            if let Some(b) = self.buffers.lock().get(addr) {
                writes.push(Access { buffer: b.id, version: b.version });
            }
            self.log(format_args!("MERGE image data {addr:#x}: changes of {} on {w} applied to the current copies", kernel.name));
        }
        if let Some((addr, size, others, image)) = conflict {
            // An image's globals and statics are one buffer: regions writing different ones
            // also conflict when they run at the same time on different workers.
            let (what, advice) = match image {
                Some(i) => (
                    format!("the device globals and statics of device image {i} (.data and .bss)"),
                    "regions writing device globals or statics, even different ones, must not overlap in time: order them with depend or taskwait",
                ),
                None => (
                    "the device buffer".to_string(),
                    "map it with map(from:) or map(tofrom:) in the regions that write it (they then share one worker) or order them with depend",
                ),
            };
            return Err(ClusterError::Conflict { what, advice, addr, size, worker: w, others: others.into_iter().collect() });
        }
        self.sched.task_finished(kernel_s);
        kernel.last_ns.store((kernel_s * 1e9) as u64, Ordering::Relaxed);
        self.stats.add_task(w);
        let t1 = self.start.elapsed().as_secs_f64();
        self.graph.lock().record(TaskRecord {
            id: 0,
            kernel: kernel.name.clone(),
            args,
            worker: w,
            reads,
            writes,
            start_s: t0,
            end_s: t1,
            kernel_s,
        });
        self.log(format_args!("EXECUTE {} on {w}: {:.3} ms in kernel, {:.3} ms total", kernel.name, kernel_s * 1e3, (t1 - t0) * 1e3));
        Ok(())
    }

    fn run_on(
        &self,
        w: i32,
        kernel: &Kernel,
        args: &[u64],
        reach: &[(u64, u64, u64, u64)],
        assume_written: Vec<bool>,
    ) -> Result<Executed> {
        for (addr, ..) in reach {
            self.ensure_present(*addr, w)?;
        }
        let regions: Vec<Region> = reach.iter().map(|&(addr, size, ..)| Region { addr, size }).collect();
        let n = regions.len();
        let short = kernel.last_ns.load(Ordering::Relaxed) < SHORT_KERNEL_NS;
        let tag = self.post(
            w,
            Event::Execute { image: kernel.image, kernel: kernel.index, args: args.to_vec(), regions, assume_written, short },
        )?;
        match self.comm.recv_msg::<Reply>(w, tag, self.live.as_ref())? {
            Reply::Executed { changed, pointers, seconds, patches, output } if changed.len() == n => {
                if !output.is_empty() {
                    // What the region printed, after what the program printed before it.
                    // SAFETY: flushing all C streams is always allowed.
                    unsafe { libc::fflush(std::ptr::null_mut()) };
                    event_system::write_all(1, &output);
                }
                Ok((changed, pointers, seconds, patches))
            }
            Reply::Error(msg) => Err(ClusterError::Worker { rank: w, msg }),
            other => Err(ClusterError::Worker { rank: w, msg: format!("bad reply to EXECUTE: {other:?}") }),
        }
    }

    // ----- shutdown -----

    /// Stop the workers and write the report and the graph. Idempotent.
    pub(crate) fn shutdown(&self) {
        if let Some(cp) = &self.ckpt {
            cp.wait(); // a flush in progress needs the workers
        }
        if self.stopped.swap(true, Ordering::AcqRel) {
            return;
        }
        let workers: Vec<i32> = self.workers().collect();
        let mut tags = Vec::new();
        for &w in &workers {
            match self.post(w, Event::Exit) {
                Ok(tag) => tags.push((w, tag)),
                Err(e) => eprintln!("ompcluster: could not stop worker {w}: {e}"),
            }
        }
        for (w, tag) in tags {
            if let Err(e) = self.expect_ok(w, tag) {
                eprintln!("ompcluster: worker {w} did not stop cleanly: {e}");
            }
        }
        let wall = self.start.elapsed().as_secs_f64();
        if let Some(path) = &self.cfg.report {
            let mut report = Report::from_stats(&self.stats, workers.len(), wall);
            if let Some(cp) = &self.ckpt {
                let p = cp.published.lock();
                report.checkpoints = p.checkpoints;
                report.checkpoint_bytes = p.bytes;
                report.checkpoint_pauses_seconds = cp.pauses();
                report.checkpoint_pause_seconds = report.checkpoint_pauses_seconds.iter().sum();
                report.checkpoint_errors = p.errors.clone();
                report.checkpoint_save_seconds = p.save_seconds.clone();
                report.checkpoint_flush_seconds = p.flush_seconds.clone();
            }
            if let Err(e) = report.write(path) {
                eprintln!("ompcluster: cannot write report {}: {e}", path.display());
            }
        }
        if let Some(path) = &self.cfg.graph {
            if let Err(e) = std::fs::write(path, self.graph.lock().to_dot()) {
                eprintln!("ompcluster: cannot write task graph {}: {e}", path.display());
            }
        }
        if let Some(cp) = &self.ckpt {
            // The head's store is never dropped (the process ends in `exit`): remove its
            // scratch directory now.
            cp.store.close();
        }
    }
}
