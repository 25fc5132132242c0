//! Device images on a worker: loaded by our own loader (`loader.rs`) at the base the head
//! chose in the symmetric heap, so every worker has every image at the same address.

use super::loader;
use super::memory::Memory;
use crate::heap::SymmetricHeap;
use parking_lot::RwLock;

/// A loaded image.
#[derive(Debug)]
pub(crate) struct Image {
    /// Kernel entry addresses, in the head's order.
    pub(crate) kernels: Vec<usize>,
    /// Can its kernels print (see `loader::Loaded::may_print`)?
    pub(crate) may_print: bool,
}

impl Image {
    /// Load `bytes` at `[base, base+extent)` and resolve `kernels`. The range is claimed in
    /// `memory` first (so no ALLOC can overlap it), and the image's writable data recorded
    /// there once loaded, so that transfers can reach it like any held buffer.
    pub(crate) fn load(
        heap: &SymmetricHeap,
        memory: &RwLock<Memory>,
        bytes: &[u8],
        base: u64,
        extent: u64,
        kernels: &[String],
    ) -> Result<Self, String> {
        memory.write().claim_image(base, extent)?;
        match loader::load(heap, bytes, base, extent, kernels) {
            Ok(l) => {
                if let Some((addr, size)) = l.data {
                    memory.write().add_image_data(addr, size, &l.local_words, &l.private);
                }
                Ok(Image { kernels: l.kernels, may_print: l.may_print })
            }
            Err(e) => {
                // Nothing runs from a failed image: give the range back.
                let _ = heap.release_mapping(base, extent);
                memory.write().unclaim_image(base);
                Err(format!("cannot load the device image: {e}"))
            }
        }
    }
}
