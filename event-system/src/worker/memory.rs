//! What device memory a worker holds: backed buffer ranges (ALLOC/DELETE), and the ranges of
//! loaded device images, whose writable data the head tracks as one more buffer per image.
//!
//! An image's range is fixed for the life of the process: ALLOC of a range overlapping it and
//! DELETE of it are refused, so the head can never unmap loaded code or data by mistake.

use super::written::{self, Pages};
use crate::heap::HeapRange;
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Backed ranges and loaded images of one worker.
#[derive(Debug, Default)]
pub(crate) struct Memory {
    backed: BTreeMap<u64, u64>,
    /// The backed buffers whose written pages are tracked (`written.rs`): those of at least
    /// `TRACK_MIN` bytes when this process tracks pages, unless registering one failed (it
    /// is hashed).
    tracked: BTreeMap<u64, Arc<Mutex<Pages>>>,
    /// Whole image ranges (start -> length): nobody else may use them.
    images: BTreeMap<u64, u64>,
    /// The writable data of each image (start -> length), usable like a backed buffer.
    image_data: BTreeMap<u64, u64>,
    /// Words of image data holding this process's address of a library symbol -> that value.
    local_words: BTreeMap<u64, u64>,
    /// Objects of image data holding the OpenMP runtime's per-process state: start -> length.
    private: BTreeMap<u64, u64>,
}

/// The parts of `[addr, end)` outside the ranges `skip`, as offsets from `addr`.
fn complement(addr: u64, end: u64, mut skip: Vec<(u64, u64)>) -> Vec<(usize, usize)> {
    skip.sort_unstable();
    let mut out = Vec::new();
    let mut at = addr;
    for (s, e) in skip {
        let (s, e) = (s.clamp(addr, end), e.clamp(addr, end));
        if s > at {
            out.push(((at - addr) as usize, (s - addr) as usize));
        }
        at = at.max(e);
    }
    if end > at {
        out.push(((at - addr) as usize, (end - addr) as usize));
    }
    out
}

fn overlaps(map: &BTreeMap<u64, u64>, addr: u64, size: u64) -> bool {
    map.range(..addr + size).next_back().is_some_and(|(&s, &l)| s + l > addr)
}

fn inside(map: &BTreeMap<u64, u64>, addr: u64, end: u64) -> bool {
    map.range(..=addr).next_back().is_some_and(|(&s, &l)| end <= s + l)
}

impl Memory {
    /// Back a buffer. Overlap with a backed buffer or an image is an error (the head never
    /// does that).
    pub(crate) fn back(&mut self, heap: &HeapRange, addr: u64, size: u64) -> Result<(), String> {
        let size = crate::heap::page_round(size);
        if overlaps(&self.backed, addr, size) || overlaps(&self.images, addr, size) {
            return Err(format!("alloc {addr:#x}+{size} overlaps a held buffer or a loaded image"));
        }
        heap.back(addr, size).map_err(|e| e.to_string())?;
        self.backed.insert(addr, size);
        if let Some(t) = written::tracker().filter(|_| size >= written::TRACK_MIN) {
            match Pages::new(t, addr, size) {
                Ok(p) => {
                    self.tracked.insert(addr, Arc::new(Mutex::new(p)));
                }
                Err(e) => tracing::warn!(addr, size, "buffer hashed instead of page-tracked: {e}"),
            }
        }
        Ok(())
    }

    /// The page tracking of the buffer `[addr, addr+size)`, if it is a tracked backed buffer.
    pub(crate) fn tracked(&self, addr: u64, size: u64) -> Option<Arc<Mutex<Pages>>> {
        let len = *self.backed.get(&addr)?;
        (size <= len).then(|| self.tracked.get(&addr).cloned()).flatten()
    }

    /// Release a backed buffer (never an image: images are not in `backed`).
    pub(crate) fn release(&mut self, heap: &HeapRange, addr: u64) -> Result<(), String> {
        let size = self.backed.remove(&addr).ok_or_else(|| format!("delete of unknown buffer {addr:#x}"))?;
        self.tracked.remove(&addr);
        heap.release(addr, size).map_err(|e| e.to_string())
    }

    /// Claim `[base, base+extent)` for an image about to be loaded there.
    pub(crate) fn claim_image(&mut self, base: u64, extent: u64) -> Result<(), String> {
        if overlaps(&self.backed, base, extent) || overlaps(&self.images, base, extent) {
            return Err(format!("image range {base:#x}+{extent} overlaps a held buffer or another image"));
        }
        self.images.insert(base, extent);
        Ok(())
    }

    /// Give up a claim after a failed load.
    pub(crate) fn unclaim_image(&mut self, base: u64) {
        if let Some(extent) = self.images.remove(&base) {
            self.image_data.retain(|&a, _| a < base || a >= base + extent);
            self.local_words.retain(|&a, _| a < base || a >= base + extent);
            self.private.retain(|&a, _| a < base || a >= base + extent);
        }
    }

    /// Record the writable data `[addr, addr+size)` of a loaded image (inside its claim),
    /// its words that hold local addresses of library symbols (address -> value) and the
    /// objects of the OpenMP runtime's own state in it (address, size); see
    /// [`Memory::pieces_to_write`].
    pub(crate) fn add_image_data(&mut self, addr: u64, size: u64, local_words: &[(u64, u64)], private: &[(u64, u64)]) {
        debug_assert!(inside(&self.images, addr, addr + size));
        self.image_data.insert(addr, size);
        self.local_words.extend(local_words.iter().copied());
        self.private.extend(private.iter().copied());
    }

    fn private_in(&self, addr: u64, end: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        // Private objects are small and never overlap each other: one before `addr` at most.
        let first = self.private.range(..addr).next_back().map(|(&a, _)| a).unwrap_or(addr);
        self.private.range(first..end).filter(move |(&a, &l)| a + l > addr).map(|(&a, &l)| (a, a + l))
    }

    /// Does `[addr, addr+size)` hold words that must not simply be overwritten with another
    /// rank's bytes?
    pub(crate) fn needs_care(&self, addr: u64, size: u64) -> bool {
        let end = addr.saturating_add(size);
        self.local_words.range(addr.saturating_sub(7)..end).next().is_some() || self.private_in(addr, end).next().is_some()
    }

    /// `bytes`, about to be written at `addr`, came from another rank: the pieces of it
    /// (offsets) to write. Left out, so that this worker keeps its own values there:
    /// * the OpenMP runtime's per-process objects (a `critical` lock word holds a pointer to a
    ///   lock libomp allocated in this process);
    /// * the words holding a library symbol's address (a `.got.plt` slot, a pointer to
    ///   `stdout`): each rank maps the libraries elsewhere. A word whose incoming value is a
    ///   device address (`lo..hi`: the program stored a pointer into device code or data
    ///   there) is written.
    pub(crate) fn pieces_to_write(&self, addr: u64, bytes: &[u8], lo: u64, hi: u64) -> Vec<(usize, usize)> {
        let end = addr + bytes.len() as u64;
        let mut skip: Vec<(u64, u64)> = self.private_in(addr, end).collect();
        for (&a, _) in self.local_words.range(addr.saturating_sub(7)..end) {
            let device = a >= addr && a + 8 <= end && {
                let at = (a - addr) as usize;
                (lo..hi).contains(&u64::from_ne_bytes(bytes[at..at + 8].try_into().expect("8 bytes")))
            };
            if !device {
                skip.push((a, a + 8));
            }
        }
        complement(addr, end, skip)
    }

    /// The pieces (offsets) of `[addr, addr+size)` whose changes are changes of the program's
    /// data: all but the OpenMP runtime's per-process objects.
    /// `None` when that is all of it (most buffers: only image data has such objects).
    pub(crate) fn pieces_to_hash(&self, addr: u64, size: u64) -> Option<Vec<(usize, usize)>> {
        let end = addr + size;
        let private: Vec<(u64, u64)> = self.private_in(addr, end).collect();
        (!private.is_empty()).then(|| complement(addr, end, private))
    }

    /// Is `addr` the start of an image's writable data?
    pub(crate) fn is_image_data(&self, addr: u64) -> bool {
        self.image_data.contains_key(&addr)
    }

    /// Translate a device range to a local pointer: inside one backed buffer, or inside one
    /// image's writable data. Addresses are the same on every rank, so this is the identity.
    pub(crate) fn resolve(&self, addr: u64, size: u64) -> Result<*mut u8, String> {
        let end = addr.checked_add(size).ok_or("address overflow")?;
        if inside(&self.backed, addr, end) || inside(&self.image_data, addr, end) {
            Ok(addr as *mut u8)
        } else {
            Err(format!("range {addr:#x}+{size} is not held by this worker"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::heap::SymmetricHeap;

    #[test]
    fn resolve_backed_and_image_data() {
        let heap = SymmetricHeap::reserve_agreed(1 << 24, |ok| ok).unwrap();
        let mut m = Memory::default();
        let a = heap.base();
        m.back(&heap, a, 100).unwrap();
        assert!(m.back(&heap, a + 4096 - 4096, 1).is_err());
        assert_eq!(m.resolve(a + 10, 20).unwrap() as u64, a + 10);
        assert!(m.resolve(a + 4000, 200).is_err());
        // An image at 1 MiB with writable data in its third page.
        let img = a + (1 << 20);
        m.claim_image(img, 4 * 4096).unwrap();
        let d = img + 2 * 4096;
        m.add_image_data(d, 8192, &[(d + 16, 0x7f00_1234)], &[(d + 64, 32)]);
        // From another rank: a library address is not written, a device address is, and the
        // runtime's lock word never is.
        assert!(m.needs_care(d, 24) && !m.needs_care(d, 16) && m.needs_care(d + 90, 8) && !m.needs_care(d + 96, 8));
        let mut bytes = [0u8; 128];
        bytes[16..24].copy_from_slice(&0x7f99_0000u64.to_ne_bytes());
        assert_eq!(m.pieces_to_write(d, &bytes, heap.base(), heap.end()), vec![(0, 16), (24, 64), (96, 128)]);
        bytes[16..24].copy_from_slice(&(img + 8).to_ne_bytes());
        assert_eq!(m.pieces_to_write(d, &bytes, heap.base(), heap.end()), vec![(0, 64), (96, 128)]);
        assert_eq!(m.pieces_to_write(d + 80, &bytes[..32], heap.base(), heap.end()), vec![(16, 32)]);
        assert_eq!(m.pieces_to_hash(d, 4096), Some(vec![(0, 64), (96, 4096)]));
        assert_eq!(m.pieces_to_hash(d, 8), None);
        assert_eq!(m.resolve(img + 2 * 4096 + 8, 8).unwrap() as u64, img + 2 * 4096 + 8);
        assert!(m.resolve(img + 8, 8).is_err(), "code and RELRO are not data");
        assert!(m.resolve(img + 4 * 4096 - 8, 9).is_err());
        // ALLOC and DELETE never touch an image.
        assert!(m.back(&heap, img + 4096, 4096).is_err());
        assert!(m.release(&heap, img).is_err());
        assert!(m.release(&heap, img + 2 * 4096).is_err());
        assert!(m.claim_image(img + 4096, 4096).is_err());
        m.release(&heap, a).unwrap();
        assert!(m.resolve(a, 1).is_err());
        assert!(m.release(&heap, a).is_err());
        m.unclaim_image(img);
        assert!(m.resolve(img + 2 * 4096, 1).is_err());
        m.back(&heap, img, 4096).unwrap();
    }
}
