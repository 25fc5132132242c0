//! What device memory a worker holds: backed buffer ranges and the alias ranges of
//! `declare target` globals (which live inside the worker's loaded image, not in the heap).

use crate::heap::SymmetricHeap;
use crate::protocol::GlobalDesc;
use std::collections::BTreeMap;

/// Backed ranges and global aliases of one worker.
#[derive(Debug, Default)]
pub(crate) struct Memory {
    backed: BTreeMap<u64, u64>,
    aliases: BTreeMap<u64, (u64, u64)>,
}

impl Memory {
    /// Back a buffer. Overlap with a backed buffer is an error (the head never does that).
    pub(crate) fn back(&mut self, heap: &SymmetricHeap, addr: u64, size: u64) -> Result<(), String> {
        let size = crate::heap::page_round(size);
        if self.overlaps(addr, size) {
            return Err(format!("alloc {addr:#x}+{size} overlaps a held buffer"));
        }
        heap.back(addr, size).map_err(|e| e.to_string())?;
        self.backed.insert(addr, size);
        Ok(())
    }

    /// Release a backed buffer.
    pub(crate) fn release(&mut self, heap: &SymmetricHeap, addr: u64) -> Result<(), String> {
        let size = self.backed.remove(&addr).ok_or_else(|| format!("delete of unknown buffer {addr:#x}"))?;
        heap.release(addr, size).map_err(|e| e.to_string())
    }

    fn overlaps(&self, addr: u64, size: u64) -> bool {
        self.backed.range(..addr + size).next_back().is_some_and(|(&s, &l)| s + l > addr)
    }

    /// Register the globals of a loaded image: alias -> (local address, size).
    pub(crate) fn add_aliases(&mut self, globals: &[GlobalDesc], locals: &[u64]) {
        for (g, &local) in globals.iter().zip(locals) {
            self.aliases.insert(g.alias, (local, g.size));
        }
    }

    /// Translate a device range to a local pointer: inside one backed buffer, or inside one
    /// global's alias range.
    pub(crate) fn resolve(&self, addr: u64, size: u64) -> Result<*mut u8, String> {
        let end = addr.checked_add(size).ok_or("address overflow")?;
        if let Some((&s, &l)) = self.backed.range(..=addr).next_back() {
            if end <= s + l {
                return Ok(addr as *mut u8);
            }
        }
        if let Some((&alias, &(local, l))) = self.aliases.range(..=addr).next_back() {
            if end <= alias + l {
                return Ok((local + (addr - alias)) as *mut u8);
            }
        }
        Err(format!("range {addr:#x}+{size} is not held by this worker"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_backed_and_alias() {
        let heap = SymmetricHeap::reserve_agreed(1 << 24, |ok| ok).unwrap();
        let mut m = Memory::default();
        let a = heap.base();
        m.back(&heap, a, 100).unwrap();
        assert!(m.back(&heap, a + 4096 - 4096, 1).is_err());
        assert_eq!(m.resolve(a + 10, 20).unwrap() as u64, a + 10);
        assert!(m.resolve(a + 4000, 200).is_err());
        let g = GlobalDesc { name: "g".into(), alias: a + (1 << 20), size: 16 };
        m.add_aliases(&[g], &[0x5000]);
        assert_eq!(m.resolve(a + (1 << 20) + 8, 8).unwrap() as u64, 0x5008);
        assert!(m.resolve(a + (1 << 20) + 8, 9).is_err());
        m.release(&heap, a).unwrap();
        assert!(m.resolve(a, 1).is_err());
        assert!(m.release(&heap, a).is_err());
    }
}
