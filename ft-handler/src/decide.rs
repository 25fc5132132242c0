//! Recovery's decisions about copies, as pure functions of where copies are ([`Copies`]):
//! where a lost task runs again and which copies there must be rescued first ([`place`]),
//! whether a task may be sent along with a chain ([`can_chain`], [`can_follow`]). The device
//! answers the [`Copies`] questions from its own bookkeeping (under its locks) and acts on the
//! answers; the simulated cluster of the recovery tests answers them from its model, so the
//! tests run these very rules.

use crate::RerunOrder;
use rustc_hash::FxHashMap as HashMap;
use std::collections::BTreeSet;
use task_graph::{Access, Op, TaskRecord};

/// The head's rank.
pub const HEAD: i32 = 0;

/// Where the copies of buffer versions are, as recovery's decisions need it. Dead ranks hold
/// nothing (their copies are forgotten before any decision).
pub trait Copies {
    /// Buffer `id`'s size in bytes and its current version; None once it is gone.
    fn buffer(&self, id: u64) -> Option<(u64, u64)>;
    /// The recorded version rank `r`'s copy of buffer `id` holds, if it holds one.
    fn version_on(&self, id: u64, r: i32) -> Option<u64>;
    /// The ranks (the head included) whose copy holds version `a`.
    fn holders(&self, a: Access) -> Vec<i32>;
    /// Does the head hold `a` apart from every rank's copy: rescued by this recovery, or kept
    /// apart (an older version someone overwrote)?
    fn held_apart(&self, a: Access) -> bool;
    /// Does a published checkpoint hold `a` (not known damaged)?
    fn checkpointed(&self, a: Access) -> bool;
}

/// Is version `a` safe from any worker's failure: zeros (version 0), on the head, held apart
/// there, or in a checkpoint? What is safe needs no rescue, and the task record need not keep
/// what made it (pruning).
pub fn safe(c: &dyn Copies, a: Access) -> bool {
    a.version == 0 || c.holders(a).contains(&HEAD) || c.held_apart(a) || c.checkpointed(a)
}

/// Is version `a` there without re-running anything: safe, or held by a live worker?
pub fn available(c: &dyn Copies, a: Access) -> bool {
    safe(c, a) || !c.holders(a).is_empty()
}

/// Where a re-run task's input comes from, for its worker, cheapest first ([`source`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The worker's copy already holds it.
    Present,
    /// Another rank's copy (the lowest-ranked worker, the head last).
    Copy(i32),
    /// The head's copy held apart (rescued, or kept).
    Apart,
    /// Zeros (version 0: nothing written yet).
    Zeros,
    /// A published checkpoint.
    Checkpoint,
}

/// Where input `a` of a task re-run on `w` comes from: present there, another rank's copy
/// (workers first: the head's link is shared by every transfer it makes), a copy held apart,
/// zeros, or else a checkpoint (if none holds it, the plan counted on a version that vanished:
/// the device plans again). None if the buffer is gone.
pub fn source(c: &dyn Copies, a: Access, w: i32) -> Option<Source> {
    c.buffer(a.buffer)?;
    Some(if c.version_on(a.buffer, w) == Some(a.version) {
        Source::Present
    } else if let Some(r) = c.holders(a).into_iter().filter(|&r| r != w).min_by_key(|&r| (r == HEAD, r)) {
        Source::Copy(r)
    } else if c.held_apart(a) {
        Source::Apart
    } else if a.version == 0 {
        Source::Zeros
    } else {
        Source::Checkpoint
    })
}

/// A fatal rule: a task that allocated device memory (`allocs`: start and span of each block,
/// in order) runs again only if its re-run allocates the same blocks (`again`), since the
/// program's pointers expect its objects there; the head, which runs regions once no worker
/// is left, allocates from its own memory and cannot give them. Err says why not.
pub fn same_allocations(t: &TaskRecord, on_head: bool, again: Option<&[(u64, u64)]>) -> Result<(), String> {
    let why = if on_head && !t.allocs.is_empty() {
        "the head, which runs the regions now that no worker is left, allocates from its own memory".to_string()
    } else {
        match again {
            Some(again) if again != t.allocs.as_slice() => {
                let spans = |v: &[(u64, u64)]| {
                    let shown: Vec<String> = v.iter().take(4).map(|(_, s)| s.to_string()).collect();
                    format!("{} block(s) of {}{} bytes", v.len(), shown.join(", "), if v.len() > 4 { ", ..." } else { "" })
                };
                format!("this run allocated {} where its first run allocated {} (other sizes, or in another order)", spans(again), spans(&t.allocs))
            }
            _ => return Ok(()),
        }
    };
    Err(format!(
        "task #{} ({}) allocated device memory (malloc or new in the region) and must run again, but {why}: \
         its objects cannot be rebuilt where the program's pointers expect them",
        t.id, t.kernel
    ))
}

/// Must `w`'s copy holding version `v` of buffer `id` (current version `current`) be rescued
/// before it is overwritten? Yes if it is neither held apart nor checkpointed and either it is the only safe copy
/// of the current version, or a task still to run (`order`) reads `v` and the head has no
/// copy of it (another worker's copy might be overwritten too). A copy on a worker in `busy`
/// (running another re-run) does not count as another copy: that task may be overwriting it
/// now, with the bookkeeping not yet updated.
fn precious(c: &dyn Copies, id: u64, current: u64, v: u64, w: i32, busy: &BTreeSet<i32>, order: &RerunOrder) -> bool {
    let a = Access { buffer: id, version: v };
    if c.held_apart(a) || c.checkpointed(a) {
        return false;
    }
    let holders = c.holders(a);
    let safe_elsewhere = holders.iter().any(|&r| r != w && (r == HEAD || !busy.contains(&r)));
    let current_here_only = v == current && !safe_elsewhere;
    let needed = order.needed_later(a) && !holders.iter().any(|&r| r == HEAD && r != w);
    current_here_only || needed
}

/// The survivor among `free` to re-run `t` on, and the copies there that must be rescued
/// first: installing `t`'s inputs at the versions it first read overwrites them, and so does
/// `t` itself where it rewrites an input in place, and each may be the only copy of a version
/// still needed ([`precious`]; the record lists a region that read a version after one that
/// rewrote it when the two shared a copy and the reader ended last). Prefers the fewest bytes
/// to rescue, then the most bytes of inputs already there, then the task's first worker, then
/// the lowest rank. None if `free` is empty or an input's buffer is gone.
pub fn place(c: &dyn Copies, t: &TaskRecord, free: &[i32], busy: &BTreeSet<i32>, order: &RerunOrder) -> Option<(i32, Vec<Access>)> {
    free.iter()
        .copied()
        .filter_map(|w| {
            let (mut present, mut rescue_bytes, mut rescue) = (0u64, 0u64, Vec::new());
            for a in &t.reads {
                let (size, current) = c.buffer(a.buffer)?;
                match c.version_on(a.buffer, w) {
                    Some(v) if v == a.version => {
                        present += size;
                        // The task rewrites this copy in place: the version it read is then
                        // gone from here.
                        if t.writes.iter().any(|x| x.buffer == a.buffer) && precious(c, a.buffer, current, v, w, busy, order) {
                            rescue_bytes += size;
                            rescue.push(*a);
                        }
                    }
                    Some(v) if precious(c, a.buffer, current, v, w, busy, order) => {
                        rescue_bytes += size;
                        rescue.push(Access { buffer: a.buffer, version: v });
                    }
                    _ => {}
                }
            }
            Some(((std::cmp::Reverse(rescue_bytes), present, w == t.worker, std::cmp::Reverse(w)), (w, rescue)))
        })
        .max_by_key(|(k, _)| *k)
        .map(|(_, v)| v)
}

/// Can `t` lead a chain on `w` (tasks sent to it together, before the first reply)? Only short
/// kernels (under `short_kernel_s` seconds in their first run) that allocate nothing, on a
/// worker: it runs them on its polling thread, in the order they come.
pub fn can_chain(t: &TaskRecord, w: i32, short_kernel_s: f64) -> bool {
    w != HEAD && matches!(t.op, Op::Kernel) && t.allocs.is_empty() && t.kernel_s < short_kernel_s
}

/// Can `t` run on `w` right after a chain whose tasks leave buffer -> version `on_w` there,
/// with no transfer and without overwriting a version another task still needs? Each input
/// must be there at the version `t` read; one it rewrites in place must be read by no other
/// task still to start (its own read counts once) and must not be a current version.
pub fn can_follow(c: &dyn Copies, t: &TaskRecord, w: i32, on_w: &HashMap<u64, u64>, order: &RerunOrder, short_kernel_s: f64) -> bool {
    can_chain(t, w, short_kernel_s)
        && t.reads.iter().all(|a| {
            let Some((_, current)) = c.buffer(a.buffer) else { return false };
            let there = on_w.get(&a.buffer).copied().or_else(|| c.version_on(a.buffer, w));
            let rewrites = t.writes.iter().any(|x| x.buffer == a.buffer);
            there == Some(a.version) && (!rewrites || (order.readers_left(*a) <= 1 && a.version != current))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Buffers: id -> (size, current version, rank -> version held); versions kept apart.
    #[derive(Default)]
    struct Model {
        bufs: BTreeMap<u64, (u64, u64, BTreeMap<i32, u64>)>,
        apart: BTreeSet<Access>,
        ckpt: BTreeSet<Access>,
    }

    impl Copies for Model {
        fn buffer(&self, id: u64) -> Option<(u64, u64)> {
            self.bufs.get(&id).map(|b| (b.0, b.1))
        }
        fn version_on(&self, id: u64, r: i32) -> Option<u64> {
            self.bufs.get(&id)?.2.get(&r).copied()
        }
        fn holders(&self, a: Access) -> Vec<i32> {
            self.bufs.get(&a.buffer).map_or(Vec::new(), |b| b.2.iter().filter(|(_, &v)| v == a.version).map(|(&r, _)| r).collect())
        }
        fn held_apart(&self, a: Access) -> bool {
            self.apart.contains(&a)
        }
        fn checkpointed(&self, a: Access) -> bool {
            self.ckpt.contains(&a)
        }
    }

    fn acc(buffer: u64, version: u64) -> Access {
        Access { buffer, version }
    }

    fn task(worker: i32, reads: &[Access], writes: &[Access]) -> TaskRecord {
        crate::testing::kernel_task(worker, reads.to_vec(), writes.to_vec())
    }

    /// The order of a recovery that runs only `t` (started: nothing else reads anything).
    fn alone(t: &TaskRecord) -> RerunOrder {
        let mut o = RerunOrder::new(std::slice::from_ref(t));
        let i = o.pop().unwrap();
        o.start(i);
        o
    }

    #[test]
    fn a_worker_with_the_inputs_and_nothing_to_rescue_wins() {
        // Buffer 1 (100 bytes) at version 1 on the head and worker 2; worker 3 has nothing.
        let m = Model { bufs: [(1, (100, 1, [(HEAD, 1), (2, 1)].into()))].into(), ..Model::default() };
        let t = task(1, &[acc(1, 1)], &[]);
        assert_eq!(place(&m, &t, &[3, 2], &BTreeSet::new(), &alone(&t)), Some((2, vec![])));
        assert_eq!(place(&m, &t, &[], &BTreeSet::new(), &alone(&t)), None);
        // An input whose buffer is gone: nowhere.
        let gone = task(1, &[acc(9, 1)], &[]);
        assert_eq!(place(&m, &gone, &[2, 3], &BTreeSet::new(), &alone(&gone)), None);
    }

    #[test]
    fn the_only_copy_of_a_current_version_is_rescued_or_avoided() {
        // Buffer 1: worker 2 holds the current version 3 alone; the task reads version 1
        // (on the head). Installing version 1 on worker 2 would destroy version 3.
        let m = Model { bufs: [(1, (64, 3, [(HEAD, 1), (2, 3)].into()))].into(), ..Model::default() };
        let t = task(1, &[acc(1, 1)], &[]);
        // Worker 3 costs no rescue: chosen over worker 2.
        assert_eq!(place(&m, &t, &[2, 3], &BTreeSet::new(), &alone(&t)), Some((3, vec![])));
        // Only worker 2 free: it must rescue version 3 first.
        assert_eq!(place(&m, &t, &[2], &BTreeSet::new(), &alone(&t)), Some((2, vec![acc(1, 3)])));
        // Held apart, or in a checkpoint: nothing to rescue.
        let mut kept = Model { bufs: m.bufs.clone(), ..Model::default() };
        kept.apart.insert(acc(1, 3));
        assert_eq!(place(&kept, &t, &[2], &BTreeSet::new(), &alone(&t)), Some((2, vec![])));
        let mut saved = m;
        saved.ckpt.insert(acc(1, 3));
        assert_eq!(place(&saved, &t, &[2], &BTreeSet::new(), &alone(&t)), Some((2, vec![])));
    }

    #[test]
    fn a_copy_on_a_busy_worker_is_no_second_copy() {
        // Version 3 (current) on workers 2 and 4; worker 4 is busy re-running another task.
        let m = Model { bufs: [(1, (64, 3, [(HEAD, 1), (2, 3), (4, 3)].into()))].into(), ..Model::default() };
        let t = task(1, &[acc(1, 1)], &[]);
        assert_eq!(place(&m, &t, &[2], &BTreeSet::new(), &alone(&t)), Some((2, vec![])), "worker 4's copy is safe");
        assert_eq!(place(&m, &t, &[2], &[4].into(), &alone(&t)), Some((2, vec![acc(1, 3)])), "worker 4 may be overwriting its copy");
    }

    #[test]
    fn an_input_rewritten_in_place_that_a_later_task_reads_is_rescued() {
        // Task A rewrites buffer 1 from version 1 to 2 in place on worker 2 (which holds
        // version 1 only there); task B, still to run, also reads version 1.
        let m = Model { bufs: [(1, (64, 2, [(2, 1)].into()))].into(), ..Model::default() };
        let a = task(2, &[acc(1, 1)], &[acc(1, 2)]);
        let b = task(3, &[acc(1, 1)], &[]);
        let mut order = RerunOrder::new(&[a.clone(), b]);
        let first = order.pop().unwrap();
        order.start(first);
        assert!(order.needed_later(acc(1, 1)));
        assert_eq!(place(&m, &a, &[2], &BTreeSet::new(), &order), Some((2, vec![acc(1, 1)])));
        // With the head holding version 1 too, nothing is lost by rewriting it.
        let mut on_head = m;
        on_head.bufs.get_mut(&1).unwrap().2.insert(HEAD, 1);
        assert_eq!(place(&on_head, &a, &[2], &BTreeSet::new(), &order), Some((2, vec![])));
    }

    #[test]
    fn chains_take_short_kernels_on_workers_only() {
        let t = task(1, &[acc(1, 1)], &[acc(1, 2)]);
        assert!(can_chain(&t, 2, 50e-6));
        assert!(!can_chain(&t, HEAD, 50e-6), "the head runs no chain");
        let long = TaskRecord { kernel_s: 1e-3, ..t.clone() };
        assert!(!can_chain(&long, 2, 50e-6));
        let allocating = TaskRecord { allocs: vec![(0x1000, 64)], ..t.clone() };
        assert!(!can_chain(&allocating, 2, 50e-6));
        let update = TaskRecord { op: Op::HostUpdate { offset: 0, bytes: Vec::new().into() }, ..t };
        assert!(!can_chain(&update, 2, 50e-6));
    }

    #[test]
    fn a_follower_finds_its_inputs_and_overwrites_no_needed_version() {
        // Buffer 1 current at version 3; a chain on worker 2 left version 2 there. The
        // follower is not started yet when asked (its own read counts once).
        let m = Model { bufs: [(1, (64, 3, [(HEAD, 1)].into()))].into(), ..Model::default() };
        let next = task(1, &[acc(1, 2)], &[acc(1, 3)]);
        let on_w: HashMap<u64, u64> = [(1, 2)].into_iter().collect();
        let order = RerunOrder::new(std::slice::from_ref(&next));
        assert!(can_follow(&m, &next, 2, &on_w, &order, 50e-6));
        // Not there at that version: no.
        let elsewhere: HashMap<u64, u64> = [(1, 1)].into_iter().collect();
        assert!(!can_follow(&m, &next, 2, &elsewhere, &order, 50e-6));
        // Nor on the head, nor a long kernel.
        assert!(!can_follow(&m, &next, HEAD, &on_w, &order, 50e-6));
        assert!(!can_follow(&m, &next, 2, &on_w, &order, 1e-7));
        // Rewriting the current version in place: no.
        let rewrites_current = task(1, &[acc(1, 3)], &[acc(1, 4)]);
        let at3: HashMap<u64, u64> = [(1, 3)].into_iter().collect();
        assert!(!can_follow(&m, &rewrites_current, 2, &at3, &RerunOrder::new(std::slice::from_ref(&rewrites_current)), 50e-6));
        // Rewriting a version another task still to start reads: no.
        let other = task(3, &[acc(1, 2)], &[]);
        let shared = RerunOrder::new(&[next.clone(), other]);
        assert_eq!(shared.readers_left(acc(1, 2)), 2);
        assert!(!can_follow(&m, &next, 2, &on_w, &shared, 50e-6));
    }

    #[test]
    fn safe_and_available_versions() {
        let mut m = Model { bufs: [(1, (64, 3, [(HEAD, 1), (2, 3)].into()))].into(), ..Model::default() };
        m.apart.insert(acc(1, 2));
        assert!(safe(&m, acc(1, 0)), "zeros");
        assert!(safe(&m, acc(1, 1)), "on the head");
        assert!(safe(&m, acc(1, 2)), "held apart");
        assert!(!safe(&m, acc(1, 3)) && available(&m, acc(1, 3)), "only on a worker");
        assert!(!available(&m, acc(1, 4)));
        m.ckpt.insert(acc(1, 4));
        assert!(safe(&m, acc(1, 4)));
    }

    #[test]
    fn an_input_comes_from_the_cheapest_source() {
        // Version 2 on workers 3 and 2 and the head; version 1 held apart; version 5 nowhere.
        let mut m = Model { bufs: [(1, (64, 2, [(HEAD, 2), (3, 2), (2, 2), (4, 7)].into()))].into(), ..Model::default() };
        m.apart.insert(acc(1, 1));
        assert_eq!(source(&m, acc(1, 2), 3), Some(Source::Present));
        assert_eq!(source(&m, acc(1, 2), 4), Some(Source::Copy(2)), "the lowest worker, not the head");
        m.bufs.get_mut(&1).unwrap().2.retain(|&r, _| r == HEAD || r == 4);
        assert_eq!(source(&m, acc(1, 2), 4), Some(Source::Copy(HEAD)), "the head when no worker has it");
        assert_eq!(source(&m, acc(1, 1), 4), Some(Source::Apart));
        assert_eq!(source(&m, acc(1, 0), 4), Some(Source::Zeros));
        assert_eq!(source(&m, acc(1, 5), 4), Some(Source::Checkpoint));
        assert_eq!(source(&m, acc(9, 1), 4), None, "a buffer gone");
    }

    #[test]
    fn a_task_that_allocated_reruns_only_into_the_same_blocks() {
        let plain = task(1, &[acc(1, 1)], &[]);
        assert_eq!(same_allocations(&plain, true, None), Ok(()));
        assert_eq!(same_allocations(&plain, false, Some(&[])), Ok(()));
        let alloc = TaskRecord { allocs: vec![(0x1000, 64), (0x2000, 128)], ..plain };
        assert_eq!(same_allocations(&alloc, false, Some(&[(0x1000, 64), (0x2000, 128)])), Ok(()));
        let e = same_allocations(&alloc, false, Some(&[(0x1000, 64)])).unwrap_err();
        assert!(e.contains("allocated 1 block(s) of 64 bytes where its first run allocated 2 block(s) of 64, 128 bytes"), "{e}");
        let e = same_allocations(&alloc, true, None).unwrap_err();
        assert!(e.contains("the head") && e.contains("task #0 (k)"), "{e}");
    }
}
