//! Looking buffers up: by address, by a pointer that may lie in a guard gap, by libomptarget's
//! translation of a host pointer, and everything a kernel can reach.

use super::{Buffer, Buffers, PointsTo, GUARD_GAP};
use std::collections::BTreeSet;

impl Buffers {
    pub(crate) fn get(&self, addr: u64) -> Option<&Buffer> {
        self.by_addr.get(&addr)
    }

    pub(crate) fn get_mut(&mut self, addr: u64) -> Option<&mut Buffer> {
        self.by_addr.get_mut(&addr)
    }

    /// The buffer whose extent contains `addr`. Most addresses asked about are a buffer's
    /// start (a mapped section from element 0), found by hash; the others by range.
    pub(crate) fn containing(&self, addr: u64) -> Option<&Buffer> {
        let b = match self.by_addr.get(&addr) {
            Some(b) => b,
            None => self.order.range(..=addr).next_back().map(|a| &self.by_addr[a])?,
        };
        Some(b).filter(|b| addr < b.addr + b.span)
    }

    /// The buffers a pointer value may belong to: the one containing it, or, for a value in a
    /// guard gap, the buffer after the gap and the one ending right before it.
    /// Buffers the program deleted while regions could reach them are left out.
    pub(crate) fn near(&self, addr: u64) -> impl Iterator<Item = u64> + '_ {
        let inside = self.containing(addr).map(|b| b.addr);
        let (after, before) = if inside.is_some() {
            (None, None)
        } else {
            let after = self.order.range(addr..).next().map(|a| &self.by_addr[a]).filter(|b| b.addr - addr <= GUARD_GAP);
            let before = self.order.range(..addr).next_back().map(|a| &self.by_addr[a]).filter(|b| addr - (b.addr + b.span) <= GUARD_GAP);
            (after.map(|b| b.addr), before.map(|b| b.addr))
        };
        inside.into_iter().chain(after).chain(before).filter(|a| !self.by_addr[a].deleted)
    }

    /// The buffer containing all of `[addr, addr+len)`.
    pub(crate) fn containing_range(&self, addr: u64, len: u64) -> Option<&Buffer> {
        self.containing(addr).filter(|b| addr + len <= b.addr + b.span)
    }

    /// The live buffers in address order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Buffer> {
        self.order.iter().map(|a| &self.by_addr[a])
    }

    /// The buffers libomptarget translated host pointer `host` from, to device value `device`.
    pub(crate) fn by_translation(&self, device: u64, host: u64) -> &[u64] {
        self.by_delta.get(&device.wrapping_sub(host)).map_or(&[], |v| v.as_slice())
    }

    /// Every buffer a kernel can reach from `roots` (device addresses among its arguments),
    /// from `translated` (device value, host pointer) pairs of its mapped arguments, and from
    /// the writable data of its `image`, following recorded pointers. Sorted by address.
    pub(crate) fn reachable(&self, roots: &[u64], translated: &[(u64, u64)], image: u32) -> Vec<u64> {
        let mut seen: BTreeSet<u64> = BTreeSet::new();
        let mut todo: Vec<u64> = roots.iter().flat_map(|&a| self.near(a)).collect();
        for &(d, h) in translated {
            todo.extend_from_slice(self.by_translation(d, h));
        }
        todo.extend(self.image_data.get(&image).into_iter().flatten().copied());
        while let Some(a) = todo.pop() {
            if !seen.insert(a) {
                continue;
            }
            match &self.by_addr[&a].points_to {
                PointsTo::All => todo.extend(self.order.iter().copied()),
                PointsTo::Some(ptrs) => todo.extend(ptrs.iter().flat_map(|&p| self.near(p))),
            }
        }
        seen.into_iter().collect()
    }
}
