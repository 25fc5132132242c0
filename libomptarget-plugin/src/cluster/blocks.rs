//! Blocks that device code allocates in a region (`malloc`, C++ `new` and the like in a
//! target region, from the worker's arena: `event_system`'s `worker/device_alloc.rs`):
//! [`Blocks`] adopts them as buffers the region made, and deletes one the device code freed
//! as the program's `omp_target_free` would. Called by a launch (`launch.rs`) when the
//! EXECUTE's reply lists them: adopting under the `buffers` lock that records the region,
//! freeing after the record.

use super::durability::Durability;
use super::ledger::Ledger;
use super::link::Link;
use super::memory::Memory;
use super::meter::Meter;
use super::offload::Offload;
use super::{ClusterError, Result};
use crate::data::{Buffer, Buffers, PointsTo, HEAD};
use event_system::protocol::Region;
use crate::inject::Injector;
use task_graph::Access;

view! {
    /// Device code's blocks: borrows the ledger (the buffers they become), the offload and the
    /// link (the worker's arena in the heap), the meter (the log), and what [`Memory`] borrows
    /// (a block freed is deleted as a buffer).
    pub(super) struct Blocks { link: Link, ledger: Ledger, offload: Offload, durability: Durability, meter: Meter, inject: Injector }
}

impl<'a> Blocks<'a> {
    /// Blocks device code allocated in a kernel on `w` become buffers that the kernel made
    /// (version 1, held by `w`): read at version 0 and written, in the task record. Returns
    /// them (start, span), in order, for a re-execution. Each lies in `w`'s arena, or in
    /// `grant`, the range of the head's arena the region's replicas allocated in (then the
    /// head's arena gets its range back: `Offload::reclaim_shared`).
    pub(super) fn adopt_blocks(
        &self,
        bufs: &mut Buffers,
        w: i32,
        allocated: Vec<event_system::protocol::Allocated>,
        grant: Option<Region>,
        reads: &mut Vec<Access>,
        writes: &mut Vec<Access>,
    ) -> Vec<(u64, u64)> {
        let arena = self.offload.heap.arena(w, self.link.comm.size());
        let in_grant = |a: u64, span: u64| grant.is_some_and(|g| g.holds(a, span));
        let mut allocs = Vec::with_capacity(allocated.len());
        for al in allocated {
            let (addr, size, span) = (al.region.addr, al.region.size, al.span);
            let owner = match span > 0 {
                true if arena.contains(addr) && arena.contains(addr + span - 1) => Some(w),
                true if in_grant(addr, span) => Some(HEAD),
                _ => None,
            };
            let Some(b) = owner.and_then(|o| bufs.adopt(addr, size, span, o)) else {
                eprintln!("ompcluster: worker {w} reported a device allocation at {addr:#x}+{span} outside its arena or over another buffer: ignored");
                continue;
            };
            b.points_to = PointsTo::from(al.pointers);
            b.backed.insert(w);
            let id = b.id;
            let v = bufs.new_version(addr, [w].into()).expect("adopted just above");
            reads.push(Access { buffer: id, version: 0 });
            writes.push(Access { buffer: id, version: v });
            allocs.push((addr, span));
            self.ledger.add_device_bytes(size);
            self.meter.log(format_args!("DEVICE ALLOC {addr:#x} {size} bytes on {w}"));
        }
        allocs
    }

    /// Device code on `w` freed the block at `addr`, which device code allocated: delete it
    /// as the program's `omp_target_free` would.
    pub(super) fn free_block(&self, w: i32, addr: u64) -> Result<()> {
        let block = |b: &Buffer| b.arena_of.is_some() && !b.deleted;
        if !self.ledger.buffers.lock().get(addr).is_some_and(block) {
            // Freed twice, or by two regions at once: the program's bug, as on one device.
            eprintln!("ompcluster: device code on worker {w} freed {addr:#x}, which is no live device allocation: ignored");
            return Ok(());
        }
        self.meter.log(format_args!("DEVICE FREE {addr:#x} on {w}"));
        match Memory::of(*self).remove_buffer(addr, block) {
            // Freed meanwhile by another region: the program's bug, as above.
            Ok(()) | Err(ClusterError::UnknownAddress(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }
}
