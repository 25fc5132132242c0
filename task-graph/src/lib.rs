//! The record of every executed target region: which kernel, on which worker, which buffer
//! versions it read and which it wrote, and when. Edges are the dependences those versions
//! imply (a task that read or overwrote a version depends on the task that produced it).
//!
//! Failure recovery walks this graph: [`TaskGraph::lost_work`] finds the tasks to re-run to
//! rebuild versions that were lost, stopping at versions that are still available.

use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::EdgeRef;
use serde::Serialize;
use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;

/// Identity of a device buffer (stable for the buffer's lifetime; never reused).
pub type BufferId = u64;

/// One version of one buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Access {
    /// The buffer.
    pub buffer: BufferId,
    /// Its version. Version 0 is the zero-filled contents at allocation, which can always be
    /// rebuilt; every host submit and every kernel that changes the buffer makes a new one.
    pub version: u64,
}

/// One executed target region.
#[derive(Debug, Clone, Serialize)]
pub struct TaskRecord {
    /// Sequence number, from 0.
    pub id: u64,
    /// Kernel symbol (shared with the plugin's kernel table: recording a task allocates no
    /// copy of it).
    pub kernel: std::sync::Arc<str>,
    /// Argument values as passed to the kernel.
    pub args: Vec<u64>,
    /// Worker rank that ran it.
    pub worker: i32,
    /// Versions it could read (every buffer it could reach, at the version it saw).
    pub reads: Vec<Access>,
    /// Versions it produced (buffers whose contents it changed).
    pub writes: Vec<Access>,
    /// Start of the whole launch (placement and data movement included), seconds since start-up.
    pub start_s: f64,
    /// End of the launch, seconds since start-up.
    pub end_s: f64,
    /// Time inside the kernel on the worker, seconds.
    pub kernel_s: f64,
}

/// Why one task depends on another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Dep {
    /// Read a version the other produced.
    Flow(Access),
    /// Overwrote a version the other produced.
    Output(Access),
}

/// The task graph.
#[derive(Debug, Default)]
pub struct TaskGraph {
    graph: DiGraph<TaskRecord, Dep>,
    /// Which task produced each version.
    producer: HashMap<Access, NodeIndex>,
    /// The newest produced version of each buffer.
    latest: HashMap<BufferId, Access>,
}

impl TaskGraph {
    /// An empty graph.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of recorded tasks.
    pub fn len(&self) -> usize {
        self.graph.node_count()
    }

    /// No task recorded yet?
    pub fn is_empty(&self) -> bool {
        self.graph.node_count() == 0
    }

    /// Record a task and its dependences on earlier tasks. Returns its id.
    pub fn record(&mut self, mut task: TaskRecord) -> u64 {
        task.id = self.graph.node_count() as u64;
        let id = task.id;
        let reads = task.reads.clone();
        let writes = task.writes.clone();
        let node = self.graph.add_node(task);
        for r in reads {
            if let Some(&p) = self.producer.get(&r) {
                self.graph.add_edge(p, node, Dep::Flow(r));
            }
        }
        for w in writes {
            if let Some(prev) = self.latest.get(&w.buffer).copied() {
                if let Some(&p) = self.producer.get(&prev) {
                    if p != node && !self.graph.contains_edge(p, node) {
                        self.graph.add_edge(p, node, Dep::Output(prev));
                    }
                }
            }
            self.producer.insert(w, node);
            self.latest.insert(w.buffer, w);
        }
        id
    }

    /// The task that produced `version` of a buffer, if a task did.
    pub fn producer(&self, access: Access) -> Option<&TaskRecord> {
        self.producer.get(&access).map(|&n| &self.graph[n])
    }

    /// All tasks in record order.
    pub fn tasks(&self) -> impl Iterator<Item = &TaskRecord> {
        self.graph.node_weights()
    }

    /// Tasks to re-execute, in record order, so that every version in `lost` exists again:
    /// the producer of each lost version, and recursively the producers of the inputs it read
    /// that are not `available`. A lost version no task produced (it came from the host) is
    /// returned in the second list: only a checkpoint or the host can restore it.
    pub fn lost_work(
        &self,
        lost: &BTreeSet<Access>,
        available: &dyn Fn(Access) -> bool,
    ) -> (Vec<u64>, Vec<Access>) {
        let mut todo: Vec<Access> = lost.iter().copied().collect();
        let mut seen: BTreeSet<Access> = BTreeSet::new();
        let mut tasks: BTreeSet<NodeIndex> = BTreeSet::new();
        let mut unrecoverable = Vec::new();
        while let Some(a) = todo.pop() {
            if !seen.insert(a) {
                continue;
            }
            match self.producer.get(&a) {
                Some(&n) => {
                    if tasks.insert(n) {
                        for e in self.graph.edges_directed(n, petgraph::Direction::Incoming) {
                            if let Dep::Flow(input) = e.weight() {
                                if !available(*input) {
                                    todo.push(*input);
                                }
                            }
                        }
                        // Inputs that no task produced (host data) must be available too.
                        for r in &self.graph[n].reads {
                            if r.version != 0 && !self.producer.contains_key(r) && !available(*r) {
                                todo.push(*r);
                            }
                        }
                    }
                }
                None => unrecoverable.push(a),
            }
        }
        let mut ids: Vec<u64> = tasks.into_iter().map(|n| self.graph[n].id).collect();
        ids.sort_unstable();
        (ids, unrecoverable)
    }

    /// The graph in Graphviz DOT: one node per task (kernel, worker, time), one edge per
    /// dependence labelled with the buffer and version.
    pub fn to_dot(&self) -> String {
        let mut s = String::from("digraph tasks {\n  node [shape=box, fontname=\"monospace\"];\n");
        for n in self.graph.node_indices() {
            let t = &self.graph[n];
            let _ = writeln!(
                s,
                "  t{} [label=\"#{} {}\\nworker {}\\n{:.3} ms\"];",
                t.id,
                t.id,
                escape(&t.kernel),
                t.worker,
                t.kernel_s * 1e3
            );
        }
        for e in self.graph.edge_references() {
            let (a, b) = (self.graph[e.source()].id, self.graph[e.target()].id);
            let (kind, acc) = match e.weight() {
                Dep::Flow(a) => ("", a),
                Dep::Output(a) => (" style=dashed", a),
            };
            let _ = writeln!(s, "  t{a} -> t{b} [label=\"b{} v{}\"{kind}];", acc.buffer, acc.version);
        }
        s.push_str("}\n");
        s
    }
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(kernel: &str, worker: i32, reads: &[(u64, u64)], writes: &[(u64, u64)]) -> TaskRecord {
        let acc = |v: &[(u64, u64)]| v.iter().map(|&(buffer, version)| Access { buffer, version }).collect();
        TaskRecord {
            id: 0,
            kernel: kernel.into(),
            args: vec![],
            worker,
            reads: acc(reads),
            writes: acc(writes),
            start_s: 0.0,
            end_s: 0.0,
            kernel_s: 0.001,
        }
    }

    #[test]
    fn dependences_and_lost_work() {
        let mut g = TaskGraph::new();
        // b1 v1 from the host. t0: b2 = f(b1). t1: b3 = g(b2). t2: b2 = h(b2) (v3). t3 reads b1 only.
        let t0 = g.record(task("f", 1, &[(1, 1), (2, 0)], &[(2, 1)]));
        let t1 = g.record(task("g", 2, &[(2, 1), (3, 0)], &[(3, 1)]));
        let t2 = g.record(task("h", 1, &[(2, 1)], &[(2, 2)]));
        let _t3 = g.record(task("k", 2, &[(1, 1)], &[]));
        assert_eq!((t0, t1, t2), (0, 1, 2));
        assert_eq!(&*g.producer(Access { buffer: 2, version: 2 }).unwrap().kernel, "h");
        let dot = g.to_dot();
        assert!(dot.contains("t0 -> t1 [label=\"b2 v1\"]"));
        assert!(dot.contains("t0 -> t2"));

        // Worker 1 died holding b2 v2; b3 v1 is safe on worker 2, the host data is available.
        let lost: BTreeSet<Access> = [Access { buffer: 2, version: 2 }].into();
        let avail = |a: Access| a.buffer == 1 || a.buffer == 3;
        let (tasks, unrec) = g.lost_work(&lost, &avail);
        // h needs b2 v1, which is gone too, so f must run again first.
        assert_eq!(tasks, vec![0, 2]);
        assert!(unrec.is_empty());

        // If the host copy of b1 is gone too, nothing can rebuild it.
        let none = |_a: Access| false;
        let (_, unrec) = g.lost_work(&lost, &none);
        assert_eq!(unrec, vec![Access { buffer: 1, version: 1 }]); // v0 (zeros) is always rebuildable
    }
}
