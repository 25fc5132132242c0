//! The head's record of device buffers: where each lives in the symmetric heap, its current
//! version, which ranks hold that version, and which buffers its contents point to.
//!
//! This module is pure bookkeeping (no MPI): `cluster.rs` decides and moves, this records.

use event_system::heap::{ExtentAllocator, HeapError};
use std::collections::{BTreeMap, BTreeSet};

/// Rank of the head.
pub(crate) const HEAD: i32 = event_system::HEAD;

/// Device buffers a buffer's contents point to (found by scanning submitted or written data).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PointsTo {
    /// Device addresses found in it.
    Some(BTreeSet<u64>),
    /// Too many to track: it may reach any buffer.
    All,
}

impl PointsTo {
    pub(crate) fn none() -> Self {
        PointsTo::Some(BTreeSet::new())
    }

    pub(crate) fn add(&mut self, found: PointsTo) {
        match (self, found) {
            (PointsTo::All, _) => {}
            (me, PointsTo::All) => *me = PointsTo::All,
            (PointsTo::Some(a), PointsTo::Some(b)) => a.extend(b),
        }
    }
}

/// One device buffer (or a `declare target` global under its alias range).
#[derive(Debug, Clone)]
pub(crate) struct Buffer {
    /// Never reused, unlike addresses.
    pub(crate) id: u64,
    pub(crate) addr: u64,
    /// Bytes libomptarget asked for.
    pub(crate) size: u64,
    /// Page-rounded extent in the heap.
    pub(crate) span: u64,
    /// 0: zero-filled as allocated; each change makes a new version.
    pub(crate) version: u64,
    /// Ranks holding the current version (HEAD = the head's staging copy).
    pub(crate) holders: BTreeSet<i32>,
    /// Ranks that have pages (or, for globals, the image) for it.
    pub(crate) backed: BTreeSet<i32>,
    /// Workers a copy is being sent to right now.
    pub(crate) incoming: BTreeSet<i32>,
    pub(crate) points_to: PointsTo,
    /// For a global: the image it belongs to.
    pub(crate) global_of: Option<u32>,
}

impl Buffer {
    /// Can rank `r` use its copy as the current version?
    pub(crate) fn held_by(&self, r: i32) -> bool {
        if self.version == 0 {
            self.backed.contains(&r)
        } else {
            self.holders.contains(&r)
        }
    }
}

/// All buffers, by address.
#[derive(Debug)]
pub(crate) struct Buffers {
    alloc: ExtentAllocator,
    by_addr: BTreeMap<u64, Buffer>,
    next_id: u64,
}

impl Buffers {
    pub(crate) fn new(base: u64, size: u64) -> Self {
        Buffers { alloc: ExtentAllocator::new(base, size), by_addr: BTreeMap::new(), next_id: 1 }
    }

    /// Make a new buffer of `size` bytes.
    pub(crate) fn create(&mut self, size: u64, global_of: Option<u32>) -> Result<&mut Buffer, HeapError> {
        let (addr, span) = self.alloc.alloc(size)?;
        let id = self.next_id;
        self.next_id += 1;
        let b = Buffer {
            id,
            addr,
            size,
            span,
            version: 0,
            holders: BTreeSet::new(),
            backed: BTreeSet::new(),
            incoming: BTreeSet::new(),
            points_to: PointsTo::none(),
            global_of,
        };
        Ok(self.by_addr.entry(addr).or_insert(b))
    }

    /// Forget a buffer (its range stays allocated until [`Buffers::free_range`]).
    pub(crate) fn remove(&mut self, addr: u64) -> Option<Buffer> {
        self.by_addr.remove(&addr)
    }

    /// Return a removed buffer's range to the allocator.
    pub(crate) fn free_range(&mut self, addr: u64) {
        self.alloc.free(addr);
    }

    pub(crate) fn get(&self, addr: u64) -> Option<&Buffer> {
        self.by_addr.get(&addr)
    }

    pub(crate) fn get_mut(&mut self, addr: u64) -> Option<&mut Buffer> {
        self.by_addr.get_mut(&addr)
    }

    /// The buffer whose extent contains `addr`.
    pub(crate) fn containing(&self, addr: u64) -> Option<&Buffer> {
        self.by_addr.range(..=addr).next_back().map(|(_, b)| b).filter(|b| addr < b.addr + b.span)
    }

    /// The buffer containing all of `[addr, addr+len)`.
    pub(crate) fn containing_range(&self, addr: u64, len: u64) -> Option<&Buffer> {
        self.containing(addr).filter(|b| addr + len <= b.addr + b.span)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Buffer> {
        self.by_addr.values()
    }

    /// Every buffer a kernel can reach from `roots` (device addresses among its arguments) and
    /// from the globals of `image`, following recorded pointers. Sorted by address.
    pub(crate) fn reachable(&self, roots: &[u64], image: u32) -> Vec<u64> {
        let mut seen: BTreeSet<u64> = BTreeSet::new();
        let mut todo: Vec<u64> = roots.iter().filter_map(|&a| self.containing(a).map(|b| b.addr)).collect();
        todo.extend(self.iter().filter(|b| b.global_of == Some(image)).map(|b| b.addr));
        while let Some(a) = todo.pop() {
            if !seen.insert(a) {
                continue;
            }
            match &self.by_addr[&a].points_to {
                PointsTo::All => todo.extend(self.by_addr.keys().copied()),
                PointsTo::Some(ptrs) => todo.extend(ptrs.iter().filter_map(|&p| self.containing(p).map(|b| b.addr))),
            }
        }
        seen.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reachability_follows_pointers_and_globals() {
        let mut bs = Buffers::new(0x10_0000, 1 << 20);
        let a = bs.create(100, None).unwrap().addr;
        let b = bs.create(5000, None).unwrap().addr;
        let c = bs.create(8, None).unwrap().addr;
        let g = bs.create(4, Some(7)).unwrap().addr;
        let lone = bs.create(4, None).unwrap().addr;
        // a holds a pointer into the middle of b; b points to c.
        bs.get_mut(a).unwrap().points_to.add(PointsTo::Some([b + 4100].into()));
        bs.get_mut(b).unwrap().points_to.add(PointsTo::Some([c].into()));
        assert_eq!(bs.reachable(&[a + 8, 12345], 0), vec![a, b, c]);
        assert_eq!(bs.reachable(&[c], 7), vec![c, g]);
        bs.get_mut(c).unwrap().points_to.add(PointsTo::All);
        assert_eq!(bs.reachable(&[c], 0).len(), 5);
        assert!(bs.containing(lone + 4096).is_none());
        assert_eq!(bs.containing_range(b + 4000, 1000).map(|x| x.addr), Some(b));
        assert!(bs.containing_range(b + 8000, 1000).is_none());
    }
}
