//! What the unit tests share: a recorded kernel run.

use task_graph::{Access, Op, TaskRecord};

/// A recorded run of a short kernel (1 us) on `worker` that read `reads` and made `writes`.
pub(crate) fn kernel_task(worker: i32, reads: Vec<Access>, writes: Vec<Access>) -> TaskRecord {
    TaskRecord {
        id: 0,
        kernel: "k".into(),
        image: 0,
        index: 0,
        args: vec![],
        worker,
        reads,
        writes,
        start_s: 0.0,
        end_s: 0.0,
        kernel_s: 1e-6,
        op: Op::Kernel,
        allocs: Vec::new(),
        replicated: false,
    }
}

/// (buffer, version) pairs as accesses.
pub(crate) fn accesses(v: &[(u64, u64)]) -> Vec<Access> {
    v.iter().map(|&(buffer, version)| Access { buffer, version }).collect()
}
