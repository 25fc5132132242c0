//! Placement simulation: a recorded task log (`OMPCLUSTER_TASKS`) replayed on P simulated
//! workers with a discrete-event clock, each ready task placed by the same [`Scheduler`] the
//! plugin uses, to compare the makespan with the critical-path bound.
//!
//! The model (design note; `BENCHMARKS.md` has what it leaves out):
//! * **Dependences.** A task depends on the producer of each version it reads, on the producer
//!   of the version of each buffer it overwrites, and on the earlier readers of that version
//!   (write-after-read, so that in-place updates keep their order). Nothing else: the host
//!   program's own waits (`taskwait`) are not in the log.
//! * **Data.** A version no logged task made (version 0, what the host submitted) is on the head
//!   (rank 0, never a worker). A version a task made is on its worker once it ends, a version
//!   moved once it arrived. A worker's copy of a buffer holds one version: writing the buffer
//!   replaces it.
//! * **Placement.** A task is placed as soon as its predecessors ended (those ready at the same
//!   instant in record order) by [`Scheduler::choose`] with [`Policy::Locality`], over one
//!   [`Candidate`] per worker built as the plugin builds it: the bytes and the number of the
//!   versions it reads that the worker does not hold (a copy on its way is not held yet), and
//!   the tasks placed there that have not ended.
//! * **Costs.** The inputs a worker lacks move one after another, from when the task is placed
//!   (the plugin moves them at launch, whatever the worker is running); a move of `b` bytes
//!   takes `latency + b / bandwidth`, from the head or another worker alike. An input already
//!   on its way there is not moved again (the plugin waits for it). A worker runs one
//!   task at a time, in the order they were placed there, each once its inputs arrived, for the
//!   kernel time recorded. Each move's time is fed back with
//!   [`Scheduler::transfer_finished`] when it ends, each kernel's with
//!   [`Scheduler::task_finished`] (as the plugin does, not for host updates and device copies).
//! * **Head.** Rank 0 handles the regions one at a time ([`Head`]: a single server), in the
//!   order they became ready (FIFO; those ready at the same instant in record order): it places
//!   one when it is free (and, under a cap, when fewer than the cap are placed and not ended),
//!   then spends [`Head::s_per_region`], plus [`Head::s_per_byte`] for each byte of the
//!   region's inputs it sends itself (versions on the head the worker lacks). The region's moves
//!   start, and it may run, once the head is done with it. The head receives nothing in this
//!   model (outputs stay on the workers). [`Head::FREE`] (no cost, no cap) places each region
//!   the instant it is ready, as the simulation did before the head was modelled.
//! * **Bound.** max(critical path of kernel times, total kernel time / P, tasks x
//!   [`Head::s_per_region`]): moves and the head's per-byte time excluded, so the ratio of
//!   makespan to bound is at least 1. It is loose where the critical path is
//!   close to total / P; [`RecordedGraph::list_makespan_s`] (greedy list scheduling, moves
//!   free) tells what the tasks' order allows there, whatever the placement.

use crate::{Candidate, Policy, Scheduler};
use rustc_hash::FxHashMap as HashMap;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
use std::io::BufRead;
use task_graph::{Access, BufferId, LogLine, OpKind};

/// A task log that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadLogError {
    /// Reading failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A line is not a task.
    #[error("line {line}: {source}")]
    Line {
        /// Line number, from 1.
        line: usize,
        /// Why.
        source: serde_json::Error,
    },
}

/// What a move costs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Costs {
    /// Seconds per move, whatever its size.
    pub latency_s: f64,
    /// Bytes per second.
    pub bytes_per_s: f64,
}

/// What the head (rank 0) spends on each region, and how many it lets run at once (see the
/// module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Head {
    /// Seconds of the head's time to place, post and record one region.
    pub s_per_region: f64,
    /// Seconds of the head's time per byte it sends itself (a region's inputs that are on the
    /// head and that its worker lacks).
    pub s_per_byte: f64,
    /// At most this many regions placed and not ended; `None`: no cap.
    pub max_in_flight: Option<usize>,
}

impl Head {
    /// A head that costs nothing and caps nothing.
    pub const FREE: Head = Head { s_per_region: 0.0, s_per_byte: 0.0, max_in_flight: None };
}

impl Costs {
    fn move_s(&self, bytes: u64) -> f64 {
        self.latency_s + bytes as f64 / self.bytes_per_s
    }
}

#[derive(Debug)]
struct Node {
    kernel_s: f64,
    kernel: bool,
    /// The rank it ran on in the recorded run.
    worker: i32,
    /// Versions read, with the buffer's size and whether no logged task made it (it is on the
    /// head).
    reads: Vec<(Access, u64, bool)>,
    writes: Vec<Access>,
    preds: u32,
    succs: Vec<usize>,
}

/// The dependence graph of a task log (see the module documentation).
#[derive(Debug)]
pub struct RecordedGraph {
    nodes: Vec<Node>,
    critical_path_s: f64,
    total_kernel_s: f64,
}

impl RecordedGraph {
    /// The graph of `log`'s tasks, taken in the order given (record order).
    pub fn new(log: &[LogLine]) -> Self {
        let mut producer: HashMap<Access, usize> = HashMap::default();
        let mut readers: HashMap<Access, Vec<usize>> = HashMap::default();
        // The newest version of each buffer seen so far, read or written.
        let mut latest: HashMap<BufferId, u64> = HashMap::default();
        let mut nodes: Vec<Node> = Vec::with_capacity(log.len());
        let mut finish: Vec<f64> = Vec::with_capacity(log.len());
        let mut critical_path_s: f64 = 0.0;
        for (i, t) in log.iter().enumerate() {
            let mut preds: Vec<usize> = Vec::new();
            let mut reads = Vec::with_capacity(t.reads.len());
            for r in &t.reads {
                let a = Access { buffer: r.buffer, version: r.version };
                preds.extend(producer.get(&a));
                readers.entry(a).or_default().push(i);
                reads.push((a, r.bytes, !producer.contains_key(&a)));
                let l = latest.entry(a.buffer).or_insert(a.version);
                *l = (*l).max(a.version);
            }
            let mut writes = Vec::with_capacity(t.writes.len());
            for w in &t.writes {
                // The version it overwrites: the one it read, else the newest seen.
                let read = t.reads.iter().find(|r| r.buffer == w.buffer).map(|r| r.version);
                if let Some(version) = read.or_else(|| latest.get(&w.buffer).copied()) {
                    let prev = Access { buffer: w.buffer, version };
                    preds.extend(producer.get(&prev));
                    preds.extend(readers.get(&prev).into_iter().flatten());
                }
                let a = Access { buffer: w.buffer, version: w.version };
                producer.insert(a, i);
                latest.insert(a.buffer, w.version);
                writes.push(a);
            }
            preds.retain(|&p| p != i);
            preds.sort_unstable();
            preds.dedup();
            let start = preds.iter().map(|&p| finish[p]).fold(0.0, f64::max);
            finish.push(start + t.kernel_s);
            critical_path_s = critical_path_s.max(start + t.kernel_s);
            for &p in &preds {
                nodes[p].succs.push(i);
            }
            nodes.push(Node { kernel_s: t.kernel_s, kernel: t.op == OpKind::Kernel, worker: t.worker, reads, writes, preds: preds.len() as u32, succs: Vec::new() });
        }
        let total_kernel_s = nodes.iter().map(|n| n.kernel_s).sum();
        RecordedGraph { nodes, critical_path_s, total_kernel_s }
    }

    /// Read a log of JSON lines (the `OMPCLUSTER_TASKS` file; blank lines are skipped).
    pub fn read(input: impl BufRead) -> Result<Self, ReadLogError> {
        let mut log = Vec::new();
        for (n, line) in input.lines().enumerate() {
            let line = line?;
            if !line.trim().is_empty() {
                log.push(serde_json::from_str(&line).map_err(|source| ReadLogError::Line { line: n + 1, source })?);
            }
        }
        Ok(Self::new(&log))
    }

    /// Number of tasks.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// No task?
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The longest chain of dependent tasks, in kernel seconds.
    pub fn critical_path_s(&self) -> f64 {
        self.critical_path_s
    }

    /// The kernel seconds of all tasks.
    pub fn total_kernel_s(&self) -> f64 {
        self.total_kernel_s
    }

    /// `tasks` independent kernels of `kernel_s` seconds each, on zero-byte buffers of their
    /// own (the shape of Task Bench's `trivial` pattern: no dependence, no move).
    pub fn independent(tasks: usize, kernel_s: f64) -> Self {
        let log: Vec<LogLine> = (0..tasks as u64)
            .map(|id| LogLine {
                id,
                kernel: "independent".into(),
                op: OpKind::Kernel,
                worker: 1,
                reads: Vec::new(),
                writes: vec![task_graph::LoggedAccess { buffer: id + 1, version: 1, bytes: 0 }],
                kernel_s,
                start_s: 0.0,
                end_s: 0.0,
            })
            .collect();
        Self::new(&log)
    }

    /// The highest worker rank of the recorded run, if every task ran on a worker (none on the
    /// head): the fewest workers [`Placement::Recorded`] can simulate.
    pub fn recorded_workers(&self) -> Option<usize> {
        let ranks = || self.nodes.iter().map(|n| n.worker);
        (ranks().min()? >= 1).then(|| ranks().max().map(|r| r as usize)).flatten()
    }

    /// The makespan of greedy list scheduling on `workers` workers with free moves: whenever a
    /// worker is idle it starts the ready task recorded first. No placement, no queue, no
    /// data: a reference for what the tasks' order allows.
    pub fn list_makespan_s(&self, workers: usize) -> f64 {
        let mut waiting: Vec<u32> = self.nodes.iter().map(|n| n.preds).collect();
        let mut ready: BinaryHeap<std::cmp::Reverse<usize>> = (0..self.nodes.len()).filter(|&i| waiting[i] == 0).map(std::cmp::Reverse).collect();
        let mut running: BinaryHeap<At> = BinaryHeap::new();
        let (mut idle, mut now) = (workers, 0.0);
        loop {
            while idle > 0 {
                let Some(std::cmp::Reverse(i)) = ready.pop() else { break };
                running.push(At(now + self.nodes[i].kernel_s, i as u64, Event::Done(i)));
                idle -= 1;
            }
            let Some(At(t, ..)) = running.peek() else { return now };
            now = *t;
            while running.peek().is_some_and(|At(t, ..)| *t <= now) {
                let Some(At(_, _, Event::Done(i))) = running.pop() else { unreachable!("only ends are queued") };
                idle += 1;
                for &s in &self.nodes[i].succs {
                    waiting[s] -= 1;
                    if waiting[s] == 0 {
                        ready.push(std::cmp::Reverse(s));
                    }
                }
            }
        }
    }
}

/// What one simulation gave.
#[derive(Debug, Clone, PartialEq)]
pub struct SimOutcome {
    /// Simulated workers.
    pub workers: usize,
    /// When the last task ended, seconds.
    pub makespan_s: f64,
    /// max(critical path, total kernel time / workers, tasks x the head's time per region),
    /// seconds.
    pub bound_s: f64,
    /// Seconds the head spent on regions (placing, posting, recording, sending).
    pub head_busy_s: f64,
    /// Moves made.
    pub moves: u64,
    /// Bytes moved.
    pub bytes_moved: u64,
    /// Tasks each worker ran (index 0: rank 1).
    pub tasks_per_worker: Vec<u64>,
}

impl SimOutcome {
    /// Total kernel time over workers x makespan: how busy the workers were.
    pub fn busy(&self, graph: &RecordedGraph) -> f64 {
        if self.makespan_s > 0.0 {
            graph.total_kernel_s / (self.workers as f64 * self.makespan_s)
        } else {
            1.0
        }
    }

    /// Makespan over bound.
    pub fn ratio(&self) -> f64 {
        if self.bound_s > 0.0 {
            self.makespan_s / self.bound_s
        } else {
            1.0
        }
    }
}

#[derive(Debug)]
enum Event {
    /// A move of this many bytes that took this long ended.
    Moved(u64, f64),
    /// A task ended.
    Done(usize),
    /// The head is done with a region and can take the next.
    HeadFree,
}

/// An event and when: ordered for a min-heap on (time, sequence); sequence numbers are unique.
#[derive(Debug)]
struct At(f64, u64, Event);

impl PartialEq for At {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for At {}

impl Ord for At {
    fn cmp(&self, other: &Self) -> Ordering {
        other.0.total_cmp(&self.0).then(other.1.cmp(&self.1))
    }
}

impl PartialOrd for At {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The versions task `n` reads that worker `w`'s copies (`copy`) do not hold at `now`.
fn lacks<'a>(n: &'a Node, copy: &'a HashMap<(BufferId, usize), (u64, f64)>, w: usize, now: f64) -> impl Iterator<Item = &'a (Access, u64, bool)> + 'a {
    n.reads.iter().filter(move |(a, ..)| !copy.get(&(a.buffer, w)).is_some_and(|&(v, at)| v == a.version && at <= now))
}

/// Where the simulated tasks run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// Where a fresh [`Scheduler`] of [`Policy::Locality`] places them, on this many workers
    /// (at least 1).
    Scheduler(usize),
    /// Where the recorded run placed them, on this many workers (its worker count: at least
    /// [`RecordedGraph::recorded_workers`]): that run's placement under the simulation's costs.
    Recorded(usize),
}

/// Replay `graph` with `costs` and `head`, placed as `placement` says. Panics on no worker, or on
/// [`Placement::Recorded`] with fewer workers than [`RecordedGraph::recorded_workers`] (or
/// none, when the head ran tasks).
pub fn simulate(graph: &RecordedGraph, placement: Placement, costs: Costs, head: Head) -> SimOutcome {
    let workers = match placement {
        Placement::Scheduler(n) => n,
        Placement::Recorded(n) => {
            assert!(graph.recorded_workers().is_some_and(|r| r <= n), "the log ran on ranks 1..={n}");
            n
        }
    };
    assert!(workers >= 1, "no worker to simulate");
    assert!(head.max_in_flight != Some(0), "a cap of no region in flight runs nothing");
    let sched = Scheduler::new(Policy::Locality);
    let nodes = &graph.nodes;
    let mut waiting: Vec<u32> = nodes.iter().map(|n| n.preds).collect();
    let mut ready: Vec<usize> = (0..nodes.len()).filter(|&i| waiting[i] == 0).collect();
    // Ready and not yet taken by the head, in the order they became ready.
    let mut queue: VecDeque<usize> = VecDeque::new();
    // When the head is done with the region it took last; regions placed and not ended.
    let (mut head_free, mut placed) = (0.0f64, 0usize);
    let mut events: BinaryHeap<At> = BinaryHeap::new();
    let mut seq = 0u64;
    // (buffer, rank) -> the version the worker's copy holds, and from when.
    let mut copy: HashMap<(BufferId, usize), (u64, f64)> = HashMap::default();
    let mut placed_on: Vec<usize> = vec![0; nodes.len()];
    let mut in_flight: Vec<u32> = vec![0; workers + 1];
    let mut free_at: Vec<f64> = vec![0.0; workers + 1];
    let mut out = SimOutcome {
        workers,
        makespan_s: 0.0,
        bound_s: graph.critical_path_s.max(graph.total_kernel_s / workers as f64).max(nodes.len() as f64 * head.s_per_region),
        head_busy_s: 0.0,
        moves: 0,
        bytes_moved: 0,
        tasks_per_worker: vec![0; workers],
    };
    let mut now = 0.0;
    loop {
        ready.sort_unstable();
        queue.extend(ready.drain(..));
        while head_free <= now && head.max_in_flight.is_none_or(|cap| placed < cap) {
            let Some(i) = queue.pop_front() else { break };
            let n = &nodes[i];
            let w = match placement {
                Placement::Recorded(_) => n.worker as usize,
                Placement::Scheduler(_) => {
                    let candidates: Vec<Candidate> = (1..=workers)
                        .map(|w| Candidate {
                            rank: w as i32,
                            missing_bytes: lacks(n, &copy, w, now).map(|(_, b, _)| b).sum(),
                            missing_buffers: lacks(n, &copy, w, now).count() as u32,
                            in_flight: in_flight[w],
                        })
                        .collect();
                    sched.choose(&candidates).expect("at least one worker") as usize
                }
            };
            // The head's time on it: per region, and per byte of the head's own data it sends.
            let held = |a: &Access| copy.get(&(a.buffer, w)).is_some_and(|&(v, _)| v == a.version);
            let head_bytes: u64 = n.reads.iter().filter(|(a, _, on_head)| *on_head && !held(a)).map(|(_, b, _)| b).sum();
            let service = head.s_per_region + head.s_per_byte * head_bytes as f64;
            let posted = now + service;
            out.head_busy_s += service;
            placed += 1;
            if service > 0.0 {
                head_free = posted;
                events.push(At(posted, seq, Event::HeadFree));
                seq += 1;
            }
            // When its inputs are all there: those it lacks move one after another.
            let (mut moved, mut inputs) = (posted, posted);
            for &(a, bytes, _) in &n.reads {
                match copy.get(&(a.buffer, w)) {
                    Some(&(v, at)) if v == a.version => inputs = inputs.max(at),
                    _ => {
                        let took = costs.move_s(bytes);
                        moved += took;
                        inputs = inputs.max(moved);
                        events.push(At(moved, seq, Event::Moved(bytes, took)));
                        seq += 1;
                        copy.insert((a.buffer, w), (a.version, moved));
                        out.moves += 1;
                        out.bytes_moved += bytes;
                    }
                }
            }
            let end = free_at[w].max(inputs) + n.kernel_s;
            free_at[w] = end;
            in_flight[w] += 1;
            placed_on[i] = w;
            out.tasks_per_worker[w - 1] += 1;
            events.push(At(end, seq, Event::Done(i)));
            seq += 1;
        }
        // Everything that happens at the next instant, then the placement of what it made ready.
        let Some(At(t, ..)) = events.peek() else { break };
        now = *t;
        while events.peek().is_some_and(|At(t, ..)| *t <= now) {
            let Some(At(_, _, e)) = events.pop() else { break };
            match e {
                Event::Moved(bytes, took) => sched.transfer_finished(bytes, took),
                Event::HeadFree => {}
                Event::Done(i) => {
                    let (n, w) = (&nodes[i], placed_on[i]);
                    in_flight[w] -= 1;
                    placed -= 1;
                    for a in &n.writes {
                        copy.insert((a.buffer, w), (a.version, now));
                    }
                    if n.kernel {
                        sched.task_finished(n.kernel_s);
                    }
                    for &s in &n.succs {
                        waiting[s] -= 1;
                        if waiting[s] == 0 {
                            ready.push(s);
                        }
                    }
                    out.makespan_s = out.makespan_s.max(now);
                }
            }
        }
    }
    debug_assert!(waiting.iter().all(|&w| w == 0) && queue.is_empty(), "every task ran");
    out
}

/// The smallest uniform kernel time that keeps `workers` workers at least `busy` busy
/// ([`SimOutcome::busy`]) over `tasks` independent tasks ([`RecordedGraph::independent`]) under
/// `costs` and `head`, found by simulation: doubling from 1 ns until busy enough, then
/// bisection to 0.1 %. Assumes longer tasks are never less busy. `None` if 1000 s per task is
/// not enough (a cap on regions in flight below `busy` x `workers`, say).
pub fn min_busy_task_s(workers: usize, tasks: usize, costs: Costs, head: Head, busy: f64) -> Option<f64> {
    let enough = |kernel_s: f64| {
        let g = RecordedGraph::independent(tasks, kernel_s);
        simulate(&g, Placement::Scheduler(workers), costs, head).busy(&g) >= busy
    };
    let mut hi = 1e-9;
    while !enough(hi) {
        hi *= 2.0;
        if hi > 1e3 {
            return None;
        }
    }
    let mut lo = if hi > 1e-9 { hi / 2.0 } else { return Some(hi) };
    while hi - lo > 1e-3 * hi {
        let mid = 0.5 * (lo + hi);
        if enough(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Some(hi)
}

#[cfg(test)]
mod tests {
    use super::*;
    use task_graph::LoggedAccess;

    const COSTS: Costs = Costs { latency_s: 2e-6, bytes_per_s: 5e9 };

    fn line(id: u64, kernel_s: f64, reads: &[(u64, u64)], writes: &[(u64, u64)], bytes: u64) -> LogLine {
        let acc = |v: &[(u64, u64)]| v.iter().map(|&(buffer, version)| LoggedAccess { buffer, version, bytes }).collect();
        LogLine {
            id,
            kernel: "k".into(),
            op: OpKind::Kernel,
            worker: 1,
            reads: acc(reads),
            writes: acc(writes),
            kernel_s,
            start_s: 0.0,
            end_s: 0.0,
        }
    }

    #[test]
    fn a_chain_takes_the_sum_of_its_tasks() {
        // One buffer updated in place ten times: one move from the head, then it stays put.
        let log: Vec<LogLine> = (0..10).map(|v| line(v, 1e-3, &[(1, v)], &[(1, v + 1)], 4096)).collect();
        let g = RecordedGraph::new(&log);
        assert!((g.critical_path_s() - 1e-2).abs() < 1e-12);
        for p in [1, 3, 64] {
            assert!((g.list_makespan_s(p) - 1e-2).abs() < 1e-12);
            let o = simulate(&g, Placement::Scheduler(p), COSTS, Head::FREE);
            assert_eq!((o.moves, o.bytes_moved), (1, 4096), "{p} workers: {o:?}");
            assert!((o.makespan_s - (1e-2 + COSTS.move_s(4096))).abs() < 1e-12, "{o:?}");
            assert_eq!(o.tasks_per_worker.iter().filter(|&&n| n > 0).count(), 1);
        }
    }

    #[test]
    fn independent_equal_tasks_take_the_bound() {
        // 64 tasks writing their own buffer from nothing (version 0 is on the head, and zero
        // bytes cost nothing to move here).
        let log: Vec<LogLine> = (0..64).map(|b| line(b, 1e-3, &[], &[(b, 1)], 0)).collect();
        let g = RecordedGraph::new(&log);
        for p in [1, 3, 4, 8, 16, 32, 64] {
            let o = simulate(&g, Placement::Scheduler(p), COSTS, Head::FREE);
            let rounds = 64usize.div_ceil(p) as f64;
            assert!((g.list_makespan_s(p) - rounds * 1e-3).abs() < 1e-12);
            assert!((o.makespan_s - rounds * 1e-3).abs() < 1e-12, "{p} workers: {o:?}");
            if 64 % p == 0 {
                assert!((o.ratio() - 1.0).abs() < 1e-9, "{o:?}");
            }
            assert!(o.tasks_per_worker.iter().all(|&n| n as f64 == rounds || n as f64 == rounds - 1.0), "{o:?}");
        }
    }

    #[test]
    fn resident_blocks_spread_over_every_worker() {
        // As tests/programs/resident_stencil.c: NB blocks of 512 KiB, each updated in place
        // once per step, independent of the others.
        let (blocks, steps) = (8u64, 50u64);
        let mut log = Vec::new();
        for s in 0..steps {
            for b in 0..blocks {
                log.push(line(log.len() as u64, 1e-3, &[(b, s)], &[(b, s + 1)], 512 << 10));
            }
        }
        let g = RecordedGraph::new(&log);
        assert!((g.critical_path_s() - steps as f64 * 1e-3).abs() < 1e-12);
        for p in [3, 4, 8] {
            let o = simulate(&g, Placement::Scheduler(p), COSTS, Head::FREE);
            assert!(o.tasks_per_worker.iter().all(|&n| n > 0), "{p} workers: {o:?}");
            assert!(o.ratio() < 1.5, "{p} workers: {o:?}");
        }
        // With a worker per block, each block stays where it went first: one move each.
        let o = simulate(&g, Placement::Scheduler(8), COSTS, Head::FREE);
        assert_eq!(o.moves, blocks, "{o:?}");
        assert!(o.tasks_per_worker.iter().all(|&n| n == steps), "{o:?}");
        // The recorded run's placement (every task on worker 1 here), under the same costs.
        assert_eq!(g.recorded_workers(), Some(1));
        let o = simulate(&g, Placement::Recorded(2), COSTS, Head::FREE);
        assert_eq!(o.tasks_per_worker, vec![blocks * steps, 0]);
        assert!((o.makespan_s - (blocks * steps) as f64 * 1e-3 - COSTS.move_s(512 << 10)).abs() < 1e-9, "{o:?}");
    }

    #[test]
    fn an_input_on_its_way_is_not_moved_again() {
        // Two tasks reading one host buffer, placed at once on the only worker: one move.
        let log = vec![line(0, 1e-3, &[(1, 1)], &[(2, 1)], 1 << 20), line(1, 1e-3, &[(1, 1)], &[(3, 1)], 1 << 20)];
        let o = simulate(&RecordedGraph::new(&log), Placement::Scheduler(1), COSTS, Head::FREE);
        assert_eq!(o.moves, 1, "{o:?}");
        assert!((o.makespan_s - (COSTS.move_s(1 << 20) + 2e-3)).abs() < 1e-12, "{o:?}");
    }

    #[test]
    fn writers_wait_for_the_readers_of_what_they_overwrite() {
        // t0 writes b1 v1; t1 and t2 read it (2 ms each); t3 overwrites it in place (1 ms):
        // without the write-after-read order t3 could end before the readers.
        let log = vec![
            line(0, 1e-3, &[(1, 0)], &[(1, 1)], 0),
            line(1, 2e-3, &[(1, 1), (2, 0)], &[(2, 1)], 0),
            line(2, 2e-3, &[(1, 1), (3, 0)], &[(3, 1)], 0),
            line(3, 1e-3, &[(1, 1)], &[(1, 2)], 0),
        ];
        let g = RecordedGraph::new(&log);
        assert!((g.critical_path_s() - 4e-3).abs() < 1e-12);
        let o = simulate(&g, Placement::Scheduler(4), COSTS, Head::FREE);
        assert!(o.makespan_s >= 4e-3 - 1e-12, "{o:?}");
    }

    #[test]
    fn a_free_head_changes_nothing() {
        // Five tiles updated in place over six steps, each task reading its neighbour's tile
        // and a host input of its own: moves, chains, write-after-read. The pinned outcomes are
        // what the simulation gave before the head was modelled (bit for bit, commit 882e83a),
        // and the head's fields at zero must give them again.
        let zero = Head { s_per_region: 0.0, s_per_byte: 0.0, max_in_flight: None };
        assert_eq!(zero, Head::FREE);
        assert_eq!(Head::default(), Head::FREE);
        let mut log = Vec::new();
        for s in 0..6u64 {
            for b in 0..5u64 {
                let other = (b + 1) % 5;
                log.push(line(log.len() as u64, 1e-4 * (1 + b) as f64, &[(b, s), (other, s), (100 + b, 0)], &[(b, s + 1)], 64 << 10));
            }
        }
        let g = RecordedGraph::new(&log);
        let pinned: [(usize, f64, f64, u64, &[u64]); 4] = [
            (1, 0.009120857599999999, 0.009, 20, &[30]),
            (2, 0.006256822400000002, 0.006, 22, &[18, 12]),
            (3, 0.006256822400000002, 0.006, 22, &[18, 12, 0]),
            (8, 0.006256822400000002, 0.006, 22, &[18, 0, 0, 0, 12, 0, 0, 0]),
        ];
        for (p, makespan_s, bound_s, moves, tasks_per_worker) in pinned {
            let o = simulate(&g, Placement::Scheduler(p), COSTS, zero);
            assert_eq!((o.makespan_s, o.bound_s, o.moves, o.head_busy_s), (makespan_s, bound_s, moves, 0.0), "{p} workers");
            assert_eq!(o.tasks_per_worker, tasks_per_worker, "{p} workers");
            // A cap no run reaches changes nothing either.
            assert_eq!(o, simulate(&g, Placement::Scheduler(p), COSTS, Head { max_in_flight: Some(log.len()), ..zero }), "{p} workers");
        }
    }

    #[test]
    fn a_busy_head_serializes_the_regions() {
        // 1000 independent tasks of 1 ms on 1024 workers: free, they all run at once; at 10 us
        // of head time each, the last is placed after 10 ms and ends 1 ms later.
        let g = RecordedGraph::independent(1000, 1e-3);
        let free = simulate(&g, Placement::Scheduler(1024), COSTS, Head::FREE);
        assert!((free.makespan_s - 1e-3).abs() < 1e-12, "{free:?}");
        let head = Head { s_per_region: 10e-6, ..Head::FREE };
        let o = simulate(&g, Placement::Scheduler(1024), COSTS, head);
        assert!((o.makespan_s - (1000.0 * 10e-6 + 1e-3)).abs() < 1e-9, "{o:?}");
        assert!((o.head_busy_s - 1e-2).abs() < 1e-9, "{o:?}");
        assert!((o.bound_s - 1e-2).abs() < 1e-12, "the head's share is the bound: {o:?}");
        assert!(o.ratio() >= 1.0 && o.ratio() < 1.11, "{o:?}");
        // A cap of 4 in flight: four at a time, each placed 10 us after the previous one, so
        // the head never waits long and the tasks run about four at once: 250 rounds of 1 ms.
        let o = simulate(&g, Placement::Scheduler(1024), COSTS, Head { max_in_flight: Some(4), ..head });
        assert!(o.makespan_s > 0.25 && o.makespan_s < 0.26, "{o:?}");
        // Bytes the head sends: a 1 MB host input per task at 1 ns per byte adds 1 ms of head
        // time to each region.
        let log: Vec<LogLine> = (0..10).map(|b| line(b, 1e-3, &[(100 + b, 0)], &[(b, 1)], 1_000_000)).collect();
        let o = simulate(&RecordedGraph::new(&log), Placement::Scheduler(16), COSTS, Head { s_per_byte: 1e-9, ..head });
        assert!((o.head_busy_s - 10.0 * (10e-6 + 1e-3)).abs() < 1e-9, "{o:?}");
        assert!((o.makespan_s - (10.0 * (10e-6 + 1e-3) + COSTS.move_s(1_000_000) + 1e-3)).abs() < 1e-9, "{o:?}");
    }

    #[test]
    fn the_shortest_busy_task_matches_the_head_model() {
        // N independent tasks of L on P workers, a region every c: when L <= (P - 1) c no
        // worker waits for another, the makespan is N c + L, and busy = N L / (P (N c + L)),
        // so busy >= B from L = B P N c / (N - B P).
        let (p, n, c, b) = (16usize, 1600usize, 20e-6, 0.8);
        let head = Head { s_per_region: c, ..Head::FREE };
        let l = min_busy_task_s(p, n, COSTS, head, b).unwrap();
        let analytic = b * p as f64 * n as f64 * c / (n as f64 - b * p as f64);
        assert!((l / analytic - 1.0).abs() < 5e-3, "{l} against {analytic}");
        assert_eq!(min_busy_task_s(p, n, COSTS, Head::FREE, b), Some(1e-9));
        assert_eq!(min_busy_task_s(p, n, COSTS, Head { max_in_flight: Some(8), ..head }, b), None);
    }

    #[test]
    fn logs_are_read_line_by_line() {
        let text = format!("{}\n\n{}\n", serde_json::to_string(&line(0, 1e-3, &[(1, 0)], &[(1, 1)], 8)).unwrap(), serde_json::to_string(&line(1, 1e-3, &[(1, 1)], &[(1, 2)], 8)).unwrap());
        let g = RecordedGraph::read(text.as_bytes()).unwrap();
        assert_eq!(g.len(), 2);
        let e = RecordedGraph::read("{\"id\":0}\n".as_bytes()).unwrap_err();
        assert!(e.to_string().starts_with("line 1:"), "{e}");
    }
}
