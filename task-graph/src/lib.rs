//! The record of every executed target region: which kernel, on which worker, which buffer
//! versions it read and which it wrote, and when. Edges are the dependences those versions
//! imply (a task that read or overwrote a version depends on the task that produced it).
//!
//! Failure recovery walks this graph: [`TaskGraph::lost_work`] finds the tasks to re-run to
//! rebuild versions that were lost, stopping at versions that are still available, and
//! [`TaskGraph::prune`] bounds the record to what recovery can still need.
//!
//! Apart from that record, a graph made with [`TaskGraph::with_log`] keeps a full log of every
//! task in record order, never pruned ([`LogLine`]: the `OMPCLUSTER_TASKS` file), for
//! replaying a run's tasks elsewhere (the `scheduler` crate's placement simulation).

use petgraph::stable_graph::{NodeIndex, StableDiGraph};
use petgraph::visit::{EdgeRef, IntoEdgeReferences};
use serde::{Deserialize, Serialize};
// The maps are keyed by (buffer, version) pairs the runtime made itself, never by input an
// adversary chooses: the fast Fx hash, not SipHash (each region records several lookups).
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// Identity of a device buffer (stable for the buffer's lifetime; never reused).
pub type BufferId = u64;

/// One version of one buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Access {
    /// The buffer.
    pub buffer: BufferId,
    /// Its version. Version 0 is the zero-filled contents at allocation, which can always be
    /// rebuilt; every host submit and every kernel that changes the buffer makes a new one.
    pub version: u64,
}

/// What a recorded task does, for re-running it.
#[derive(Debug, Clone, Serialize)]
pub enum Op {
    /// A target region: its kernel (`image`, `index`) called with `args`.
    Kernel,
    /// The host wrote `bytes` at `offset` into the buffer it reads and writes (a partial
    /// `target update to` or submit): kept so that the version it made can be rebuilt.
    HostUpdate {
        /// Offset in the buffer.
        offset: u64,
        /// The bytes.
        bytes: std::sync::Arc<[u8]>,
    },
    /// A device-to-device copy (`omp_target_memcpy`).
    DeviceCopy {
        /// Source address.
        src: u64,
        /// Destination address.
        dst: u64,
        /// Bytes.
        size: u64,
    },
}

/// One executed target region (or another operation that made a version: see [`Op`]).
#[derive(Debug, Clone, Serialize)]
pub struct TaskRecord {
    /// Sequence number, from 0.
    pub id: u64,
    /// Kernel symbol (shared with the plugin's kernel table: recording a task allocates no
    /// copy of it).
    pub kernel: std::sync::Arc<str>,
    /// The kernel's device image and its index there: what re-executing it sends.
    pub image: u32,
    /// Index of the kernel in its image.
    pub index: u32,
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
    /// What it does.
    pub op: Op,
    /// Blocks device code allocated in it (start, whole pages reserved), in order: a
    /// re-execution is given the same addresses.
    pub allocs: Vec<(u64, u64)>,
    /// Its region ran on several workers (`OMPCLUSTER_FT_REPLICAS`), whose copies hold what
    /// it wrote: recovery counts it apart when it runs it again.
    pub replicated: bool,
}

/// One buffer version a logged task read or wrote, with the buffer's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoggedAccess {
    /// The buffer.
    pub buffer: BufferId,
    /// The version.
    pub version: u64,
    /// The buffer's size in bytes.
    pub bytes: u64,
}

/// One task of the full log (see [`TaskGraph::with_log`]), as one line of the
/// `OMPCLUSTER_TASKS` file: what a placement simulation needs to replay it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogLine {
    /// Task id ([`TaskRecord::id`]).
    pub id: u64,
    /// Kernel symbol, or what another operation is (see [`Op`]).
    pub kernel: std::sync::Arc<str>,
    /// A kernel or another operation.
    pub op: OpKind,
    /// Worker rank that ran it.
    pub worker: i32,
    /// Versions it could read.
    pub reads: Vec<LoggedAccess>,
    /// Versions it produced.
    pub writes: Vec<LoggedAccess>,
    /// Time inside the kernel, seconds.
    pub kernel_s: f64,
    /// Start of the launch, seconds since start-up.
    pub start_s: f64,
    /// End of the launch, seconds since start-up.
    pub end_s: f64,
}

/// Which [`Op`] a logged task is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// [`Op::Kernel`].
    Kernel,
    /// [`Op::HostUpdate`].
    HostUpdate,
    /// [`Op::DeviceCopy`].
    DeviceCopy,
}

impl From<&Op> for OpKind {
    fn from(op: &Op) -> Self {
        match op {
            Op::Kernel => OpKind::Kernel,
            Op::HostUpdate { .. } => OpKind::HostUpdate,
            Op::DeviceCopy { .. } => OpKind::DeviceCopy,
        }
    }
}

/// A task of the full log as kept in memory: buffer sizes are added when it is written out.
#[derive(Debug)]
struct Logged {
    id: u64,
    kernel: std::sync::Arc<str>,
    op: OpKind,
    worker: i32,
    reads: Vec<Access>,
    writes: Vec<Access>,
    kernel_s: f64,
    start_s: f64,
    end_s: f64,
}

/// Why one task depends on another.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Dep {
    /// Read a version the other produced.
    Flow(Access),
    /// Overwrote a version the other produced.
    Output(Access),
}

/// What happened to a task during recoveries (the colours of the DOT export, after Figure 14
/// of the OCFTL thesis).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Mark {
    /// It ran on a worker that died, and what it produced there was lost.
    Lost,
    /// It was run again to rebuild lost versions.
    Reexecuted,
    /// It read a version that recovery took from a checkpoint.
    FromCheckpoint,
    /// Its re-execution ran on another worker than its first run.
    Moved,
}

impl Mark {
    fn colour(self) -> &'static str {
        match self {
            Mark::Lost => "grey70",
            Mark::Reexecuted => "orange",
            Mark::FromCheckpoint => "lightblue",
            Mark::Moved => "palegreen",
        }
    }
}

/// What re-running lost work takes: see [`TaskGraph::lost_work`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LostWork {
    /// Tasks to run again, by id, in record order (a dependence order).
    pub tasks: Vec<u64>,
    /// Versions to take from where they still are (a live copy or a checkpoint): the lost
    /// versions that are available there, and the inputs of `tasks` that they do not rebuild
    /// themselves.
    pub restore: BTreeSet<Access>,
    /// Versions needed that nothing can give back: not available, and produced by no recorded
    /// task (host data, or a task pruned from the record).
    pub unrecoverable: Vec<Access>,
}

/// The task graph.
#[derive(Debug, Default)]
pub struct TaskGraph {
    graph: StableDiGraph<TaskRecord, Dep>,
    /// Task id -> node (ids are never reused; nodes are, after pruning).
    by_id: BTreeMap<u64, NodeIndex>,
    /// Which task produced each version (of the tasks still recorded).
    producer: HashMap<Access, NodeIndex>,
    /// The newest produced version of each buffer.
    latest: HashMap<BufferId, Access>,
    marks: HashMap<u64, BTreeSet<Mark>>,
    /// The recorded tasks that read each version.
    readers: HashMap<Access, Vec<NodeIndex>>,
    next_id: u64,
    /// Tasks with an id that are not in the record: pruned, or never kept (they made no
    /// version).
    pruned: u64,
    /// Every task recorded, if a full log is kept ([`TaskGraph::with_log`]).
    log: Option<Vec<Logged>>,
}

impl TaskGraph {
    /// An empty graph.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty graph that also keeps a full log of the tasks it records, those that made no
    /// version and those later pruned included ([`TaskGraph::log`]). It costs a copy of each
    /// task's versions for the rest of the run.
    pub fn with_log() -> Self {
        TaskGraph { log: Some(Vec::new()), ..Self::default() }
    }

    /// The full log, in record order, if one is kept, with each buffer's size from `size`.
    pub fn log<'a>(&'a self, size: &'a dyn Fn(BufferId) -> u64) -> Option<impl Iterator<Item = LogLine> + 'a> {
        let sized = move |v: &[Access]| -> Vec<LoggedAccess> { v.iter().map(|a| LoggedAccess { buffer: a.buffer, version: a.version, bytes: size(a.buffer) }).collect() };
        self.log.as_ref().map(|log| {
            log.iter().map(move |t| LogLine {
                id: t.id,
                kernel: t.kernel.clone(),
                op: t.op,
                worker: t.worker,
                reads: sized(&t.reads),
                writes: sized(&t.writes),
                kernel_s: t.kernel_s,
                start_s: t.start_s,
                end_s: t.end_s,
            })
        })
    }

    /// Number of recorded tasks (pruned ones excluded).
    pub fn len(&self) -> usize {
        self.graph.node_count()
    }

    /// No task recorded (or all pruned)?
    pub fn is_empty(&self) -> bool {
        self.graph.node_count() == 0
    }

    /// Tasks recorded so far, pruned ones included.
    pub fn recorded(&self) -> u64 {
        self.next_id
    }

    /// Record a task and its dependences on earlier tasks. Returns its id. A task that made no
    /// version gets an id but is not kept: no version recovery rebuilds can come from it (and
    /// a prune would drop it anyway), so its record would only cost time.
    pub fn record(&mut self, mut task: TaskRecord) -> u64 {
        task.id = self.next_id;
        self.next_id += 1;
        let id = task.id;
        if let Some(log) = &mut self.log {
            log.push(Logged {
                id,
                kernel: task.kernel.clone(),
                op: OpKind::from(&task.op),
                worker: task.worker,
                reads: task.reads.clone(),
                writes: task.writes.clone(),
                kernel_s: task.kernel_s,
                start_s: task.start_s,
                end_s: task.end_s,
            });
        }
        if task.writes.is_empty() {
            self.pruned += 1;
            return id;
        }
        let reads = task.reads.clone();
        let writes = task.writes.clone();
        let node = self.graph.add_node(task);
        self.by_id.insert(id, node);
        for r in &reads {
            self.readers.entry(*r).or_default().push(node);
        }
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

    /// The task that produced `version` of a buffer, if a recorded task did.
    pub fn producer(&self, access: Access) -> Option<&TaskRecord> {
        self.producer.get(&access).map(|&n| &self.graph[n])
    }

    /// The task with this id, unless pruned.
    pub fn task(&self, id: u64) -> Option<&TaskRecord> {
        self.by_id.get(&id).map(|&n| &self.graph[n])
    }

    /// All recorded tasks in record order.
    pub fn tasks(&self) -> impl Iterator<Item = &TaskRecord> {
        self.by_id.values().map(|&n| &self.graph[n])
    }

    /// Note what happened to a task during a recovery.
    pub fn mark(&mut self, id: u64, mark: Mark) {
        if self.by_id.contains_key(&id) {
            self.marks.entry(id).or_default().insert(mark);
        }
    }

    /// Tasks to re-execute so that every version in `lost` exists again, found by lineage:
    /// a version that is `available` (a live copy or a checkpoint holds it) is restored from
    /// there; any other is rebuilt by re-running the task that produced it, whose inputs are
    /// found the same way. Only that minimal set is returned, in record order.
    pub fn lost_work(&self, lost: &BTreeSet<Access>, available: &dyn Fn(Access) -> bool) -> LostWork {
        let mut todo: Vec<Access> = lost.iter().copied().collect();
        let mut seen: HashSet<Access> = HashSet::default();
        let mut tasks: HashSet<u64> = HashSet::default();
        let mut out = LostWork::default();
        while let Some(a) = todo.pop() {
            if !seen.insert(a) {
                continue;
            }
            if available(a) {
                out.restore.insert(a);
                continue;
            }
            match self.producer.get(&a) {
                Some(&n) => {
                    let t = &self.graph[n];
                    if tasks.insert(t.id) {
                        todo.extend(t.reads.iter().copied());
                    }
                }
                None => out.unrecoverable.push(a),
            }
        }
        out.tasks = tasks.into_iter().collect();
        out.tasks.sort_unstable();
        out.unrecoverable.sort_unstable();
        out
    }

    /// Forget the tasks recovery can no longer need: every task recorded before task `upto`
    /// outside the lineage of `roots` (the versions that could still be lost: current
    /// versions not known `safe`) and of what the tasks from `upto` on read, where lineage
    /// stops at `safe` versions (version 0, a published checkpoint, a copy that no worker's
    /// failure takes). Tasks from `upto` on are kept: recorded after the caller took `roots`.
    /// Returns how many tasks were removed. Graph edges of kept tasks to removed ones go too.
    pub fn prune(&mut self, roots: &BTreeSet<Access>, safe: &dyn Fn(Access) -> bool, upto: u64) -> u64 {
        let mut roots = roots.clone();
        for (_, &n) in self.by_id.range(upto..) {
            roots.extend(self.graph[n].reads.iter().copied().filter(|&a| !safe(a)));
        }
        let keep: HashSet<u64> = self.lost_work(&roots, safe).tasks.into_iter().collect();
        let drop: Vec<(u64, NodeIndex)> =
            self.by_id.range(..upto).filter(|(id, _)| !keep.contains(id)).map(|(&id, &n)| (id, n)).collect();
        // The reader lists are cleaned once per version read, after all removals: one version
        // can have thousands of readers (every region reads its image's data), and taking each
        // removed reader out of the list on its own made a prune quadratic.
        let gone: HashSet<NodeIndex> = drop.iter().map(|&(_, n)| n).collect();
        let mut read: HashSet<Access> = HashSet::default();
        for &(id, n) in &drop {
            if let Some(t) = self.graph.remove_node(n) {
                read.extend(t.reads.iter().copied());
                for w in &t.writes {
                    if self.producer.get(w) == Some(&n) {
                        self.producer.remove(w);
                    }
                }
            }
            self.by_id.remove(&id);
            self.marks.remove(&id);
        }
        for r in read {
            if let Some(v) = self.readers.get_mut(&r) {
                v.retain(|x| !gone.contains(x));
                if v.is_empty() {
                    self.readers.remove(&r);
                }
            }
        }
        self.pruned += drop.len() as u64;
        drop.len() as u64
    }

    /// Does a recorded task read this version (so that re-running it may need it)?
    pub fn is_read(&self, access: Access) -> bool {
        self.readers.contains_key(&access)
    }

    /// Can re-running recorded tasks need `access`: does a recorded task read it whose output
    /// is a version `is_root` accepts (one that could be lost), or feeds one the same way?
    /// Walks forward from the readers of `access`, each version at most once, looking at most
    /// at `budget` written versions (taken from it): a walk that runs out answers true, the
    /// safe answer.
    pub fn feeds(&self, access: Access, is_root: &dyn Fn(Access) -> bool, budget: &mut u64) -> bool {
        let mut todo = vec![access];
        let mut seen: BTreeSet<Access> = BTreeSet::new();
        while let Some(a) = todo.pop() {
            if !seen.insert(a) {
                continue;
            }
            for &n in self.readers.get(&a).into_iter().flatten() {
                for &w in &self.graph[n].writes {
                    if *budget == 0 {
                        return true;
                    }
                    *budget -= 1;
                    if is_root(w) {
                        return true;
                    }
                    todo.push(w);
                }
            }
        }
        false
    }

    /// Do the recorded readers of versions `from..to` of `buffer` write nothing but versions
    /// of `buffer` up to `to`? Then what those versions feed through recorded tasks is
    /// `buffer`'s own versions up to `to`: once a copy of version `to` exists, they are no
    /// longer needed (the common case, a chain of in-place updates, is answered with one
    /// lookup per version, without the walk of [`TaskGraph::feeds`]).
    pub fn feeds_only_itself(&self, buffer: BufferId, from: u64, to: u64) -> bool {
        (from..to).all(|version| {
            self.readers
                .get(&Access { buffer, version })
                .into_iter()
                .flatten()
                .all(|&n| self.graph[n].writes.iter().all(|w| w.buffer == buffer && w.version <= to))
        })
    }

    /// Buffers that recorded tasks read.
    pub fn buffers_read(&self) -> BTreeSet<BufferId> {
        self.tasks().flat_map(|t| t.reads.iter().map(|a| a.buffer)).collect()
    }

    /// The graph in Graphviz DOT: one node per recorded task (kernel, worker, time), coloured
    /// by what recoveries did to it, one edge per dependence labelled with the buffer and
    /// version. Tasks pruned from the record (no longer needed by recovery), or never kept (they
    /// made no version), are not shown; a comment and the graph's label say how many there were.
    pub fn to_dot(&self) -> String {
        let mut s = String::from("digraph tasks {\n  node [shape=box, fontname=\"monospace\"];\n");
        if self.pruned > 0 {
            let _ = writeln!(
                s,
                "  // {} of {} tasks are not in the record (recovery could no longer need them, or they made no version)\n  label=\"{} earlier tasks not shown\";",
                self.pruned, self.next_id, self.pruned
            );
        }
        for &n in self.by_id.values() {
            let t = &self.graph[n];
            let marks = self.marks.get(&t.id);
            // The fill says what happened most notably (checkpoint input, re-executed, moved,
            // lost, in that order); a re-run on another worker also gets a green border.
            let order = [Mark::FromCheckpoint, Mark::Reexecuted, Mark::Moved, Mark::Lost];
            let style = match marks.and_then(|m| order.into_iter().find(|o| m.contains(o))) {
                Some(m) => {
                    let all = marks.into_iter().flatten();
                    let names: Vec<String> = all.map(|m| format!("{m:?}").to_lowercase()).collect();
                    let border = if m != Mark::Moved && marks.is_some_and(|x| x.contains(&Mark::Moved)) {
                        ", color=darkgreen, penwidth=3"
                    } else {
                        ""
                    };
                    format!(", style=filled, fillcolor={}{border}, tooltip=\"{}\"", m.colour(), names.join(" "))
                }
                None => String::new(),
            };
            let _ = writeln!(
                s,
                "  t{} [label=\"#{} {}\\nworker {}\\n{:.3} ms\"{style}];",
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
            image: 0,
            index: 0,
            args: vec![],
            worker,
            reads: acc(reads),
            writes: acc(writes),
            start_s: 0.0,
            end_s: 0.0,
            kernel_s: 0.001,
            op: Op::Kernel,
            allocs: Vec::new(),
            replicated: false,
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
        let avail = |a: Access| a.version == 0 || a.buffer == 1 || a.buffer == 3;
        let w = g.lost_work(&lost, &avail);
        // h needs b2 v1, which is gone too, so f must run again first.
        assert_eq!(w.tasks, vec![0, 2]);
        assert!(w.unrecoverable.is_empty());
        // f reads b1 v1 (available) and b2 v0 (zeros: the caller counts them available).
        assert!(w.restore.contains(&Access { buffer: 1, version: 1 }));

        // If the host copy of b1 is gone too, nothing can rebuild it.
        let zeros = |a: Access| a.version == 0;
        let w = g.lost_work(&lost, &zeros);
        assert_eq!(w.unrecoverable, vec![Access { buffer: 1, version: 1 }]);

        // A checkpoint holding b2 v1 cuts the lineage: only h runs again.
        let ck = |a: Access| a.version == 0 || a == Access { buffer: 2, version: 1 } || a.buffer == 1;
        assert_eq!(g.lost_work(&lost, &ck).tasks, vec![2]);
    }

    #[test]
    fn pruning_keeps_only_what_recovery_can_need() {
        let mut g = TaskGraph::new();
        // 1000 regions that made no version (empty ones, and readers of b7) between two
        // writers of b7: counted, never kept.
        g.record(task("w1", 1, &[(7, 0)], &[(7, 1)]));
        for i in 0..1000 {
            g.record(task("empty", 2, if i % 2 == 0 { &[] } else { &[(7, 1)] }, &[]));
        }
        g.record(task("w2", 1, &[(7, 1)], &[(7, 2)]));
        g.record(task("w9", 2, &[(9, 0)], &[(9, 1)]));
        assert_eq!((g.len(), g.recorded()), (3, 1003));
        // b7 v2 could be lost; b9 v1 is in a checkpoint.
        let roots: BTreeSet<Access> = [Access { buffer: 7, version: 2 }, Access { buffer: 9, version: 1 }].into();
        let safe = |a: Access| a.version == 0 || a == Access { buffer: 9, version: 1 };
        assert!(g.is_read(Access { buffer: 9, version: 0 }));
        assert_eq!(g.prune(&roots, &safe, u64::MAX), 1);
        assert_eq!(g.tasks().map(|t| &*t.kernel).collect::<Vec<_>>(), vec!["w1", "w2"]);
        // b7 v1 feeds b7 v2 (a root); b9 v0 fed only b9 v1, not a root if checkpointed.
        let root = |a: Access| a == Access { buffer: 7, version: 2 };
        assert!(g.feeds(Access { buffer: 7, version: 0 }, &root, &mut { u64::MAX }));
        assert!(!g.feeds(Access { buffer: 9, version: 0 }, &root, &mut { u64::MAX }));
        // b7 v0 and v1 feed only b7's own versions, up to v2.
        assert!(g.feeds_only_itself(7, 0, 2));
        // A walk that runs out of its budget answers true (from b7 v0 it looks at b7 v1, then
        // at b7 v2), and takes what it looked at from the budget.
        let never = |_: Access| false;
        let mut budget = 1;
        assert!(g.feeds(Access { buffer: 7, version: 0 }, &never, &mut budget));
        assert_eq!(budget, 0);
        let mut budget = 10;
        assert!(!g.feeds(Access { buffer: 7, version: 0 }, &never, &mut budget));
        assert_eq!(budget, 8);
        // What the kept tasks read is still read; what only pruned ones read is not.
        assert!(g.is_read(Access { buffer: 7, version: 1 }) && g.is_read(Access { buffer: 7, version: 0 }));
        assert!(!g.is_read(Access { buffer: 9, version: 0 }) && !g.is_read(Access { buffer: 7, version: 2 }));
        assert_eq!(g.recorded(), 1003);
        // The lineage still works after pruning, and new ids continue.
        let w = g.lost_work(&[Access { buffer: 7, version: 2 }].into(), &|a| a.version == 0);
        assert_eq!(w.tasks, vec![0, 1001]);
        assert_eq!(g.record(task("next", 1, &[(8, 0)], &[(8, 1)])), 1003);
        g.mark(1001, Mark::Reexecuted);
        let dot = g.to_dot();
        assert!(dot.contains("fillcolor=orange"), "{dot}");
        assert!(dot.contains("1001 earlier tasks not shown"), "{dot}");
        // A version whose producer was pruned and which is not available cannot be rebuilt.
        let w = g.lost_work(&[Access { buffer: 9, version: 1 }].into(), &|_| false);
        assert_eq!(w.unrecoverable, vec![Access { buffer: 9, version: 1 }]);
    }

    #[test]
    fn the_full_log_keeps_every_task_in_record_order() {
        let mut g = TaskGraph::new();
        g.record(task("f", 1, &[(1, 0)], &[(1, 1)]));
        assert!(g.log(&|_| 0).is_none(), "no log unless asked");

        let mut g = TaskGraph::with_log();
        g.record(task("f", 1, &[(1, 0)], &[(1, 1)]));
        g.record(task("empty", 2, &[(1, 1)], &[]));
        g.record(task("g", 2, &[(1, 1), (2, 3)], &[(2, 4)]));
        // Pruning the record leaves the log whole.
        assert_eq!(g.prune(&BTreeSet::new(), &|_| true, u64::MAX), 2);
        let size = |b: BufferId| b * 100;
        let lines: Vec<LogLine> = g.log(&size).unwrap().collect();
        assert_eq!(lines.iter().map(|l| (l.id, &*l.kernel, l.worker)).collect::<Vec<_>>(), vec![(0, "f", 1), (1, "empty", 2), (2, "g", 2)]);
        assert_eq!(lines[2].reads[1], LoggedAccess { buffer: 2, version: 3, bytes: 200 });
        assert_eq!(lines[2].writes, vec![LoggedAccess { buffer: 2, version: 4, bytes: 200 }]);
        assert!(lines[1].writes.is_empty());
        // One JSON object per line, read back as written.
        let json = serde_json::to_string(&lines[2]).unwrap();
        assert!(json.starts_with(r#"{"id":2,"kernel":"g","op":"kernel","worker":2,"reads":[{"buffer":1,"version":1,"bytes":100}"#), "{json}");
        assert_eq!(serde_json::from_str::<LogLine>(&json).unwrap(), lines[2]);
    }

    #[test]
    fn a_version_feeding_another_buffer_is_not_only_its_own() {
        let mut g = TaskGraph::new();
        g.record(task("a", 1, &[(5, 0)], &[(5, 1)]));
        g.record(task("b", 1, &[(5, 1)], &[(5, 2)]));
        assert!(g.feeds_only_itself(5, 0, 2));
        // A reader of b5 v1 writes b6: b5 v1 feeds another buffer; b5 v0 still does not.
        g.record(task("c", 2, &[(5, 1), (6, 0)], &[(6, 1)]));
        assert!(!g.feeds_only_itself(5, 0, 2));
        assert!(g.feeds_only_itself(5, 0, 1));
        // A reader that writes a version past `to` (what a merge records can do).
        let mut g = TaskGraph::new();
        g.record(task("m", 1, &[(5, 1)], &[(5, 3)]));
        assert!(!g.feeds_only_itself(5, 1, 2));
        assert!(g.feeds_only_itself(5, 1, 3));
    }

    #[test]
    fn a_prune_keeps_what_was_recorded_after_its_roots_were_taken() {
        let mut g = TaskGraph::new();
        // b5: v1, v2 in place; b6 v1 made from b5 v1.
        g.record(task("a", 1, &[(5, 0)], &[(5, 1)]));
        g.record(task("b", 1, &[(5, 1)], &[(5, 2)]));
        let upto = g.recorded();
        // Recorded after the caller took its roots (b5 v2 safe by then: say the head holds
        // it): a reader of b5 v1, the version before.
        g.record(task("late", 2, &[(5, 1), (6, 0)], &[(6, 1)]));
        let safe = |a: Access| a.version == 0 || a == Access { buffer: 5, version: 2 };
        assert_eq!(g.prune(&BTreeSet::new(), &safe, upto), 1, "only b: the late task and the producer of what it read stay");
        assert_eq!(g.tasks().map(|t| &*t.kernel).collect::<Vec<_>>(), vec!["a", "late"]);
        // With everything recorded before `upto`, the same prune keeps nothing of it.
        assert_eq!(g.prune(&BTreeSet::new(), &|a| a.version == 0 || a.buffer == 5, u64::MAX), 2);
    }
}
