//! The order in which recovery re-runs a set of recorded tasks (the lost work lineage found),
//! kept apart from how each task is run, so that it is tested without MPI.
//!
//! Dependences are per buffer, in record order (see [`RerunOrder::new`]). A ready queue (a
//! binary heap by record index) hands out the tasks whose dependences are done, earliest in
//! record order first: scheduling a set of n tasks with e dependences costs
//! O((n + e) log n), not a rescan of every task for each one started. [`RerunOrder::chain`]
//! finds the tasks that can follow a started one on the same worker without waiting for a
//! reply in between (a chain of in-place updates of one buffer, the common case), so they can
//! be sent together.
//!
//! Concurrency: none here; the caller (the recovery thread) owns the value.

use rustc_hash::FxHashMap as HashMap;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use task_graph::{Access, TaskRecord};

/// Where one task of the set stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    /// Some task it depends on is not done.
    Waiting,
    /// In the ready queue.
    Ready,
    /// Handed out ([`RerunOrder::start`]), not yet done.
    Started,
    /// Done.
    Done,
}

/// The dependences of a re-run set and the progress through it.
#[derive(Debug)]
pub struct RerunOrder {
    deps: Vec<Vec<usize>>,
    succ: Vec<Vec<usize>>,
    /// Per task: dependences not yet done.
    waiting_on: Vec<usize>,
    state: Vec<TaskState>,
    ready: BinaryHeap<Reverse<usize>>,
    /// Per version: tasks not yet started that read it.
    readers_left: HashMap<Access, u32>,
    reads: Vec<Vec<Access>>,
    done: usize,
}

impl RerunOrder {
    /// The order of `tasks` (a re-run set, in record order). Per buffer, in record order: a
    /// task that writes it waits for every earlier task touching it since the previous writer
    /// (and for that writer: by transitivity that is enough); a task that only reads it waits
    /// for the last writer and for the readers since of another version (both would put
    /// another version in the copy it reads). Record order is an order the program allowed,
    /// and keeping it per buffer means no task overwrites a copy another still needs.
    pub fn new(tasks: &[TaskRecord]) -> Self {
        let n = tasks.len();
        // Buffer -> (last writer since which the list runs, readers since it by version).
        #[derive(Default)]
        struct Since {
            writer: Option<usize>,
            readers: Vec<(u64, Vec<usize>)>,
        }
        let mut since: HashMap<u64, Since> = HashMap::default();
        let mut deps: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (i, t) in tasks.iter().enumerate() {
            let d = &mut deps[i];
            for a in &t.reads {
                let writes = t.writes.iter().any(|w| w.buffer == a.buffer);
                let s = since.entry(a.buffer).or_default();
                d.extend(s.writer);
                if writes {
                    d.extend(s.readers.iter().flat_map(|(_, r)| r.iter().copied()));
                    s.readers.clear();
                    s.writer = Some(i);
                } else {
                    // Readers of the same version are independent of each other: only other
                    // versions' readers (rare) are walked.
                    for (v, r) in &s.readers {
                        if *v != a.version {
                            d.extend(r.iter().copied());
                        }
                    }
                    match s.readers.iter_mut().find(|(v, _)| *v == a.version) {
                        Some((_, r)) => r.push(i),
                        None => s.readers.push((a.version, vec![i])),
                    }
                }
            }
            // Written without being read (not in its reads): still after the previous writer.
            for w in &t.writes {
                if !t.reads.iter().any(|a| a.buffer == w.buffer) {
                    let s = since.entry(w.buffer).or_default();
                    d.extend(s.writer);
                    d.extend(s.readers.iter().flat_map(|(_, r)| r.iter().copied()));
                    s.readers.clear();
                    s.writer = Some(i);
                }
            }
            d.retain(|&j| j != i);
            d.sort_unstable();
            d.dedup();
        }
        let mut succ = vec![Vec::new(); n];
        for (i, d) in deps.iter().enumerate() {
            for &j in d {
                succ[j].push(i);
            }
        }
        let waiting_on: Vec<usize> = deps.iter().map(Vec::len).collect();
        let mut ready = BinaryHeap::new();
        let mut state = vec![TaskState::Waiting; n];
        for i in (0..n).filter(|&i| waiting_on[i] == 0) {
            ready.push(Reverse(i));
            state[i] = TaskState::Ready;
        }
        let mut readers_left: HashMap<Access, u32> = HashMap::default();
        for t in tasks {
            for a in &t.reads {
                *readers_left.entry(*a).or_default() += 1;
            }
        }
        RerunOrder { deps, succ, waiting_on, state, ready, readers_left, reads: tasks.iter().map(|t| t.reads.clone()).collect(), done: 0 }
    }

    /// The tasks task `i` waits for.
    pub fn deps(&self, i: usize) -> &[usize] {
        &self.deps[i]
    }

    /// Where task `i` stands.
    pub fn state(&self, i: usize) -> TaskState {
        self.state[i]
    }

    /// The earliest ready task, taken out of the queue (give it back with [`Self::unpop`] if
    /// it cannot start now).
    pub fn pop(&mut self) -> Option<usize> {
        let Reverse(i) = self.ready.pop()?;
        Some(i)
    }

    /// Give back a task [`Self::pop`] returned.
    pub fn unpop(&mut self, i: usize) {
        debug_assert_eq!(self.state[i], TaskState::Ready);
        self.ready.push(Reverse(i));
    }

    /// Task `i` is handed out: its reads no longer count as needed by tasks still to start.
    pub fn start(&mut self, i: usize) {
        debug_assert!(matches!(self.state[i], TaskState::Ready | TaskState::Waiting));
        self.state[i] = TaskState::Started;
        for a in &self.reads[i] {
            if let Some(n) = self.readers_left.get_mut(a) {
                *n -= 1;
                if *n == 0 {
                    self.readers_left.remove(a);
                }
            }
        }
    }

    /// Does a task not yet started read `a`?
    pub fn needed_later(&self, a: Access) -> bool {
        self.readers_left.contains_key(&a)
    }

    /// How many tasks not yet started read `a`.
    pub fn readers_left(&self, a: Access) -> u32 {
        self.readers_left.get(&a).copied().unwrap_or(0)
    }

    /// Task `i` (started) is done: the tasks waiting only for it become ready.
    pub fn finish(&mut self, i: usize) {
        debug_assert_eq!(self.state[i], TaskState::Started);
        self.state[i] = TaskState::Done;
        self.done += 1;
        for k in 0..self.succ[i].len() {
            let j = self.succ[i][k];
            self.waiting_on[j] -= 1;
            if self.waiting_on[j] == 0 && self.state[j] == TaskState::Waiting {
                self.state[j] = TaskState::Ready;
                self.ready.push(Reverse(j));
            }
        }
    }

    /// Task `i` (started) must run again (its run was undone): ready again, its reads needed.
    pub fn retry(&mut self, i: usize) {
        debug_assert_eq!(self.state[i], TaskState::Started);
        for a in &self.reads[i] {
            *self.readers_left.entry(*a).or_default() += 1;
        }
        self.state[i] = if self.deps[i].iter().all(|&d| self.state[d] == TaskState::Done) {
            self.ready.push(Reverse(i));
            TaskState::Ready
        } else {
            TaskState::Waiting
        };
    }

    /// Every task done?
    pub fn all_done(&self) -> bool {
        self.done == self.state.len()
    }

    /// The first task (in record order) not done, if any.
    pub fn first_not_done(&self) -> Option<usize> {
        self.state.iter().position(|s| *s != TaskState::Done)
    }

    /// The task that can follow `batch` (tasks started together on one worker, in the order
    /// they run there) without waiting for their replies: the earliest not-yet-started
    /// successor of the batch's last task whose dependences are all done or in the batch.
    /// Whether its inputs will be where it runs is for the caller to check.
    pub fn chain(&self, batch: &[usize]) -> Option<usize> {
        let last = *batch.last()?;
        self.succ[last]
            .iter()
            .copied()
            .filter(|&j| matches!(self.state[j], TaskState::Waiting | TaskState::Ready))
            .filter(|&j| self.deps[j].iter().all(|&d| self.state[d] == TaskState::Done || batch.contains(&d)))
            .min()
    }

    /// Take task `i` (which [`Self::chain`] returned) out of the ready queue if it is there:
    /// it is started as part of a batch.
    pub fn start_chained(&mut self, i: usize) {
        if self.state[i] == TaskState::Ready {
            self.ready.retain(|&Reverse(j)| j != i);
        }
        self.start(i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(reads: &[(u64, u64)], writes: &[(u64, u64)]) -> TaskRecord {
        crate::testing::kernel_task(1, crate::testing::accesses(reads), crate::testing::accesses(writes))
    }

    #[test]
    fn dependences_per_buffer() {
        let tasks = vec![
            task(&[(1, 1), (2, 0)], &[(2, 1)]), // 0: reads A v1, writes B
            task(&[(1, 1), (3, 0)], &[(3, 1)]), // 1: reads A v1 too: independent of 0
            task(&[(2, 1)], &[(2, 2)]),         // 2: B in place: after 0
            task(&[(2, 1), (4, 0)], &[(4, 1)]), // 3: reads B v1 (not v2): after 2, the writer
            task(&[(1, 2)], &[]),               // 4: reads A v2: after 0 and 1 (they read v1)
            task(&[(5, 0)], &[(5, 1), (6, 1)]), // 5: writes 6 without reading it
            task(&[(6, 1)], &[(6, 2)]),         // 6: after 5
        ];
        let o = RerunOrder::new(&tasks);
        assert_eq!(o.deps(0), &[] as &[usize]);
        assert_eq!(o.deps(1), &[] as &[usize]);
        assert_eq!(o.deps(2), &[0]);
        assert_eq!(o.deps(3), &[2]);
        assert_eq!(o.deps(4), &[0, 1]);
        assert_eq!(o.deps(6), &[5]);
    }

    #[test]
    fn the_ready_queue_hands_out_record_order_as_dependences_finish() {
        // Two in-place chains over buffers 1 and 2, interleaved in the record, all reading
        // buffer 9 (an image's data) at one version.
        let mut tasks = Vec::new();
        for v in 0..4u64 {
            tasks.push(task(&[(1, v), (9, 1)], &[(1, v + 1)]));
            tasks.push(task(&[(2, v), (9, 1)], &[(2, v + 1)]));
        }
        let mut o = RerunOrder::new(&tasks);
        assert_eq!((o.pop(), o.pop(), o.pop()), (Some(0), Some(1), None));
        o.start(0);
        o.start(1);
        assert!(o.needed_later(Access { buffer: 1, version: 1 }), "task 2 reads it");
        assert!(!o.needed_later(Access { buffer: 1, version: 0 }));
        o.finish(1);
        assert_eq!(o.pop(), Some(3));
        o.unpop(3);
        o.finish(0);
        assert_eq!((o.pop(), o.pop()), (Some(2), Some(3)));
        // A chain: what follows task 2 on the same worker without a reply in between.
        o.start(2);
        assert_eq!(o.chain(&[2]), Some(4));
        o.start_chained(4);
        assert_eq!(o.chain(&[2, 4]), Some(6));
        // A run undone goes back to the queue; its reads count again.
        o.start(3);
        o.retry(3);
        assert!(o.needed_later(Access { buffer: 2, version: 1 }));
        assert_eq!(o.pop(), Some(3));
        o.unpop(3);
        for i in [2, 4] {
            o.finish(i);
        }
        assert_eq!(o.first_not_done(), Some(3));
        assert!(!o.all_done());
    }

    #[test]
    fn a_long_in_place_chain_is_scheduled_in_one_pass() {
        // 300,000 in-place updates over 20 buffers, all reading one shared buffer: scheduling
        // is O(n log n), so this is quick (it took minutes with a rescan per task started).
        let n = 300_000u64;
        let tasks: Vec<TaskRecord> = (0..n).map(|i| task(&[(i % 20, i / 20), (99, 1)], &[(i % 20, i / 20 + 1)])).collect();
        let mut o = RerunOrder::new(&tasks);
        let mut order = Vec::new();
        while let Some(i) = o.pop() {
            o.start(i);
            let mut batch = vec![i];
            while let Some(j) = o.chain(&batch) {
                o.start_chained(j);
                batch.push(j);
                if batch.len() == 64 {
                    break;
                }
            }
            for &j in &batch {
                o.finish(j);
            }
            order.extend(batch);
        }
        assert!(o.all_done());
        assert_eq!(order.len(), n as usize);
        // Each buffer's updates in version order.
        let mut last: Vec<Option<usize>> = vec![None; 20];
        for i in order {
            let b = i % 20;
            assert!(last[b].is_none_or(|l| l < i));
            last[b] = Some(i);
        }
    }
}
