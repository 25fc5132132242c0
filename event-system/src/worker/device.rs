//! The device side of one process: the device memory it holds, the images it loaded, and
//! running a kernel over them. Every worker has one; so does a head that runs target regions
//! itself because no worker is left ([`LocalDevice`]).

use super::exec;
use super::images::Image;
use super::memory::Memory;
use crate::heap::SymmetricHeap;
use crate::protocol::{self, Allocated, FoundPointers, Patch, Region};
use super::device_alloc::{self, KernelRun};
use super::written::{self, Pages, Tracker};
use parking_lot::{Mutex, RwLock};
use std::sync::Arc;
use std::time::Instant;

/// Largest image data region whose changes are reported byte by byte (see
/// `Reply::Executed::patches`).
const MAX_PATCHED: u64 = 1 << 20;

/// What running a kernel did (the fields of `Reply::Executed` but the output).
#[derive(Debug)]
pub struct Ran {
    /// For each region, in order: did its contents change?
    pub changed: Vec<bool>,
    /// For each changed region: device pointers found in it.
    pub pointers: Vec<FoundPointers>,
    /// Seconds in the kernel.
    pub seconds: f64,
    /// Changes to image data regions: (region index, runs).
    pub patches: Vec<(u32, Patch)>,
    /// Blocks device code allocated (see `Reply::Executed::allocated`).
    pub allocated: Vec<Allocated>,
    /// Blocks allocated before that it freed (their start).
    pub freed: Vec<u64>,
    /// With [`Checks::digest`]: per changed region, in order, the digest of its bytes; then
    /// that of each block in `allocated`.
    pub digests: Vec<u64>,
}

/// What a run does besides the kernel (see `Event::Execute`'s fields of the same names).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Checks {
    /// Digest each changed region after the kernel.
    pub(super) digest: bool,
    /// Test only: flip this bit of one byte of what the kernel wrote (see [`flipped_at`]).
    pub(super) flip: Option<u8>,
    /// The range device code allocates in, shared by the replicas of the region.
    pub(super) arena: Option<Region>,
}

/// The byte of a region of `size` bytes an injected flip changes: byte 6 of the eight-byte
/// word in its middle (bits 4-7 of it are a double's exponent bits), or its first byte if it
/// is smaller than a word.
pub(super) fn flipped_at(size: u64) -> u64 {
    if size < 8 {
        0
    } else {
        ((size / 2) & !7) + 6
    }
}

/// What [`Device::execute`] notes of one region before the call.
enum Before {
    /// Its written pages are tracked (`written.rs`): the change count after the scan before
    /// the call (`None` if the scan failed: the region then counts as changed).
    Tracked { tracker: &'static Tracker, pages: Arc<Mutex<Pages>>, start: Option<u64> },
    /// Hashed whole.
    Hashed {
        /// The pieces (offsets) whose changes count; `None`: all of it.
        pieces: Option<Vec<(usize, usize)>>,
        /// Their hash (0 for a region surely written).
        hash: u64,
        /// A copy of an image's data, to report what the kernel changed in it.
        snapshot: Option<Vec<u8>>,
    },
}

/// Memory and images of one process.
#[derive(Debug, Default)]
pub(crate) struct Device {
    /// Shared with the allocator of device code (`device_alloc.rs`), which backs its blocks.
    pub(crate) memory: Arc<RwLock<Memory>>,
    pub(crate) images: RwLock<Vec<Option<Image>>>,
}

impl Device {
    /// Load image number `image` (see [`Image::load`]).
    pub(crate) fn load(&self, heap: &SymmetricHeap, image: u32, bytes: &[u8], base: u64, extent: u64, kernels: &[String]) -> Result<(), String> {
        let img = Image::load(heap, &self.memory, bytes, base, extent, kernels)?;
        let mut images = self.images.write();
        let idx = image as usize;
        if images.len() <= idx {
            images.resize_with(idx + 1, || None);
        }
        images[idx] = Some(img);
        Ok(())
    }

    /// Can the kernels of `image` print (see `loader::Loaded::may_print`)? True for an
    /// unknown image.
    pub(crate) fn may_print(&self, image: u32) -> bool {
        self.images.read().get(image as usize).and_then(|i| i.as_ref()).is_none_or(|i| i.may_print)
    }

    /// Run kernel `kernel` of image `image` with `args`, over `regions` (every range it can
    /// reach), at the local pointers `ptrs` (one per region); `assume_written[i]` says region
    /// i is surely written (its hash is not needed). Device addresses lie in `lo..hi`.
    /// `replay`: the blocks a first run allocated, for a re-execution (see `device_alloc.rs`).
    ///
    /// Around the call, the written pages of each tracked buffer are rehashed (`written.rs`),
    /// every other region is hashed whole (but those assumed written), to learn which ones
    /// the kernel changed; changed regions are scanned for device pointers, and the changes
    /// to small image data regions are diffed (see [`Ran`]).
    ///
    /// # Safety
    /// Each `ptrs[i]` must point to the `regions[i].size` bytes of `regions[i]`, held by this
    /// process and kept so while the kernel runs; `args` must be the argument list
    /// libomptarget generated for this kernel.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn execute(
        &self,
        (lo, hi): (u64, u64),
        image: u32,
        kernel: u32,
        args: &[u64],
        regions: &[Region],
        ptrs: &[*mut u8],
        assume_written: &[bool],
        replay: &[Region],
        checks: Checks,
    ) -> Result<Ran, String> {
        let entry = {
            let images = self.images.read();
            match images.get(image as usize).and_then(|i| i.as_ref()).and_then(|i| i.kernels.get(kernel as usize)) {
                Some(&e) => e,
                None => return Err(format!("no kernel {kernel} in image {image}")),
            }
        };
        // Per region, before the call: the pieces whose changes count (all of it, but in an
        // image's data, which holds the OpenMP runtime's lock words: libomp sets them on
        // first use), their hash (unless surely written), and a copy of a (small enough)
        // image data region, to tell what changed.
        let before: Vec<Before> = {
            let mem = self.memory.read();
            regions
                .iter()
                .zip(ptrs)
                .zip(assume_written)
                .map(|((r, &p), &aw)| {
                    if let (Some(t), Some(pages)) = (written::tracker(), mem.tracked(r.addr, r.size)) {
                        // SAFETY: the caller guarantees the buffer is held here for the call.
                        let start = unsafe { pages.lock().before(t, (lo, hi)) };
                        let start = start.map_err(|e| tracing::warn!(addr = r.addr, "page scan failed, region counted as changed: {e}")).ok();
                        return Before::Tracked { tracker: t, pages, start };
                    }
                    let pieces = mem.pieces_to_hash(r.addr, r.size);
                    // SAFETY (here and below): the caller guarantees every pointer is to the
                    // held bytes of its region (the pieces lie inside it) for the whole call.
                    let hash = if aw { 0 } else { unsafe { exec::hash(p, r.size as usize, pieces.as_deref()) } };
                    let snapshot = (!aw && r.size <= MAX_PATCHED && mem.is_image_data(r.addr))
                        .then(|| unsafe { std::slice::from_raw_parts(p, r.size as usize) }.to_vec());
                    Before::Hashed { pieces, hash, snapshot }
                })
                .collect()
        };
        let start = Instant::now();
        let run = KernelRun::begin(replay, checks.arena);
        // SAFETY: `entry` was resolved by name from a loaded image; the caller guarantees the
        // argument list.
        unsafe { exec::call_kernel(entry, args) };
        let (blocks, freed) = run.finish();
        if let Some(bit) = checks.flip {
            let mem = self.memory.read();
            // The region a faulty core's write lands in: the first mapped `from`, else the
            // first that is not image data (libomp's lock words live there).
            let target = (0..regions.len()).find(|&i| assume_written[i]).or_else(|| (0..regions.len()).find(|&i| !mem.is_image_data(regions[i].addr)));
            if let Some(i) = target.filter(|&i| regions[i].size > 0) {
                let at = flipped_at(regions[i].size);
                // SAFETY: the caller guarantees `ptrs[i]` points to the `regions[i].size`
                // writable bytes of a region held here for the whole call; `at` is below
                // that size.
                unsafe { *ptrs[i].add(at as usize) ^= 1 << (bit & 7) };
                tracing::warn!(addr = regions[i].addr, at, bit, "injected a bit flip (OMPCLUSTER_FT_INJECT)");
            }
        }
        let seconds = start.elapsed().as_secs_f64();
        let allocated: Vec<Allocated> = blocks
            .into_iter()
            .map(|b| Allocated {
                region: Region { addr: b.addr, size: b.size },
                span: b.span,
                // SAFETY: the block is backed on this rank (the allocator backed it, and only
                // the head, after this reply, can have it released).
                pointers: unsafe { protocol::scan_pointers(b.addr as *const u8, b.size as usize, lo, hi) },
            })
            .collect();
        let mut changed = Vec::with_capacity(regions.len());
        let mut pointers = Vec::new();
        let mut patches = Vec::new();
        for (i, ((r, &p), (&aw, b))) in regions.iter().zip(ptrs).zip(assume_written.iter().zip(before)).enumerate() {
            let c = match b {
                Before::Tracked { tracker: t, pages, start } => {
                    let mut pages = pages.lock();
                    // SAFETY: as above (the buffer is held here for the whole call).
                    let after = unsafe { pages.after(t, (lo, hi), start.unwrap_or(u64::MAX)) };
                    let c = aw || after.as_ref().copied().unwrap_or_else(|e| {
                        tracing::warn!(addr = r.addr, "page scan failed, region counted as changed: {e}");
                        true
                    });
                    if c {
                        // SAFETY: as above.
                        pointers.push(match after {
                            Ok(_) => unsafe { pages.pointers(r.size, (lo, hi)) },
                            Err(_) => unsafe { protocol::scan_pointers(p, r.size as usize, lo, hi) },
                        });
                    }
                    c
                }
                Before::Hashed { pieces, hash, snapshot } => {
                    let c = aw || unsafe { exec::hash(p, r.size as usize, pieces.as_deref()) } != hash;
                    if c {
                        pointers.push(unsafe { protocol::scan_pointers(p, r.size as usize, lo, hi) });
                        if let Some(old) = snapshot {
                            let now = unsafe { std::slice::from_raw_parts(p, old.len()) };
                            let whole = [(0, old.len())];
                            patches.push((i as u32, protocol::diff(&old, now, pieces.as_deref().unwrap_or(&whole))));
                        }
                    }
                    c
                }
            };
            changed.push(c);
        }
        let digests = if checks.digest {
            let mem = self.memory.read();
            let regions_digests = (0..regions.len()).filter(|&i| changed[i]).map(|i| {
                let pieces = mem.pieces_to_hash(regions[i].addr, regions[i].size);
                // SAFETY: as above (the region is held here for the whole call).
                unsafe { exec::hash(ptrs[i], regions[i].size as usize, pieces.as_deref()) }
            });
            // Then each block device code allocated (what replicas compare too).
            // SAFETY: each block is backed on this rank (as for `allocated` above).
            let blocks_digests = allocated.iter().map(|a| unsafe { exec::hash(a.region.addr as *const u8, a.region.size as usize, None) });
            regions_digests.chain(blocks_digests).collect()
        } else {
            Vec::new()
        };
        Ok(Ran { changed, pointers, seconds, patches, allocated, freed, digests })
    }

    /// Write `bytes`, which came from another rank, at device address `addr` (held here, at
    /// `p`): into an image's data only the pieces that are the program's data (see
    /// [`Memory::pieces_to_write`]).
    ///
    /// # Safety
    /// `p` must point to `bytes.len()` writable bytes of `addr`, held by this process.
    pub(crate) unsafe fn write(&self, (lo, hi): (u64, u64), addr: u64, p: *mut u8, bytes: &[u8]) {
        let mem = self.memory.read();
        if !mem.needs_care(addr, bytes.len() as u64) {
            // SAFETY: forwarded contract; `bytes` is a separate allocation.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len()) };
            return;
        }
        for (s, e) in mem.pieces_to_write(addr, bytes, lo, hi) {
            // SAFETY: `s..e` lies within the bytes at `p` (forwarded contract) and within
            // `bytes`, a separate allocation.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr().add(s), p.add(s), e - s) };
        }
    }
}

/// The device of a head that runs target regions itself, once every worker died: the images
/// are loaded into the head's own address space with the same loader and at the same
/// addresses as on workers, and kernels run on the head's copies of the buffers (which the
/// head keeps at their device addresses in the symmetric heap anyway).
///
/// The head owns the bookkeeping: it backs the buffers' pages, and it only runs a kernel over
/// buffers it holds.
#[derive(Debug)]
pub struct LocalDevice {
    dev: Device,
    bounds: (u64, u64),
}

impl LocalDevice {
    /// A device with no image yet, over `heap`.
    pub fn new(heap: &SymmetricHeap) -> Self {
        device_alloc::know_heap(heap.range());
        LocalDevice { dev: Device::default(), bounds: (heap.base(), heap.end()) }
    }

    /// Load image number `image` (`bytes`, an ELF file) at `[base, base+extent)` of `heap`
    /// and resolve its `kernels`. The range's pages are replaced by the image's: a caller
    /// that kept a copy of the image's data there must save it first and [`Self::write`] it
    /// back.
    pub fn load(&self, heap: &SymmetricHeap, image: u32, bytes: &[u8], base: u64, extent: u64, kernels: &[String]) -> Result<(), String> {
        self.dev.load(heap, image, bytes, base, extent, kernels)
    }

    /// Write `bytes` (from another rank, a checkpoint or the host) at device address `addr`,
    /// leaving out of a loaded image's data the words that must keep this process's values.
    ///
    /// # Safety
    /// `addr..addr+bytes.len()` must be writable memory of a buffer this process backed, or
    /// of a loaded image's data, not used by a running kernel.
    pub unsafe fn write(&self, addr: u64, bytes: &[u8]) {
        // SAFETY: forwarded contract; device addresses are local addresses (symmetric heap).
        unsafe { self.dev.write(self.bounds, addr, addr as *mut u8, bytes) }
    }

    /// Run a kernel, as a worker runs an EXECUTE (see `Event::Execute`).
    ///
    /// # Safety
    /// Every region must be held by this process (backed by the caller at its device address,
    /// or a loaded image's data) and stay so while the kernel runs; `args` must be the
    /// argument list libomptarget generated for this kernel.
    pub unsafe fn execute(&self, image: u32, kernel: u32, args: &[u64], regions: &[Region], assume_written: &[bool]) -> Result<Ran, String> {
        let ptrs: Vec<*mut u8> = regions.iter().map(|r| r.addr as *mut u8).collect();
        // SAFETY: forwarded contract; device addresses are local addresses.
        unsafe { self.dev.execute(self.bounds, image, kernel, args, regions, &ptrs, assume_written, &[], Checks::default()) }
    }
}
