//! Recording on the head, and writing the file at exit.
//!
//! Concurrency (design note): any offloading thread records; each record is one push under a
//! mutex (no I/O, no allocation but the span's own when it names a kernel by an `Arc`). Times
//! are read by the caller around what it measured, so the lock is never inside a measured
//! span. Lanes are assigned once, at write time, from the sorted spans: recording does not
//! need to know what else runs.

use crate::{Cat, TraceEvent, TraceFile, Track};
use parking_lot::Mutex;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Details of a span: (key, value) pairs, written as its `args`.
pub type Args = Vec<(&'static str, Value)>;

/// A span's name: a fixed word, or a kernel's name shared with the runtime.
#[derive(Debug, Clone)]
pub enum Name {
    /// A fixed word ("submit").
    Static(&'static str),
    /// A shared name (a kernel's).
    Shared(Arc<str>),
    /// A name made for this span ("checkpoint 3").
    Owned(String),
}

impl Name {
    fn as_str(&self) -> &str {
        match self {
            Name::Static(s) => s,
            Name::Shared(s) => s,
            Name::Owned(s) => s,
        }
    }
}

impl From<&'static str> for Name {
    fn from(s: &'static str) -> Self {
        Name::Static(s)
    }
}

impl From<Arc<str>> for Name {
    fn from(s: Arc<str>) -> Self {
        Name::Shared(s)
    }
}

impl From<String> for Name {
    fn from(s: String) -> Self {
        Name::Owned(s)
    }
}

#[derive(Debug)]
struct Span {
    cat: Cat,
    rank: i32,
    /// The recording thread (its lane on the calls track).
    thread: u32,
    name: Name,
    ts: f64,
    /// None: an instant.
    dur: Option<f64>,
    args: Args,
}

static NEXT_THREAD: AtomicU32 = AtomicU32::new(0);

thread_local! {
    /// A small number for the recording thread, in order of first record.
    static THREAD: u32 = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
}

/// The head's recorder of a run's timeline.
#[derive(Debug)]
pub struct Recorder {
    start: Instant,
    spans: Mutex<Vec<Span>>,
}

impl Recorder {
    /// A recorder whose times count from `start` (the plugin's start, as the run report's).
    pub fn new(start: Instant) -> Self {
        Recorder { start, spans: Mutex::new(Vec::new()) }
    }

    /// Now, microseconds since the start.
    pub fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64() * 1e6
    }

    /// A span on `rank`'s track for `cat`, from `since` (a [`Recorder::now`]) until now.
    pub fn span(&self, cat: Cat, rank: i32, name: impl Into<Name>, since: f64, args: Args) {
        let end = self.now();
        self.push(cat, rank, name.into(), since, Some((end - since).max(0.0)), args);
    }

    /// A span that started at `ts` and took `dur` microseconds.
    pub fn span_at(&self, cat: Cat, rank: i32, name: impl Into<Name>, ts: f64, dur: f64, args: Args) {
        self.push(cat, rank, name.into(), ts, Some(dur.max(0.0)), args);
    }

    /// Something that happened now (a failure), shown across the whole timeline.
    pub fn instant(&self, cat: Cat, rank: i32, name: impl Into<Name>, args: Args) {
        let now = self.now();
        self.push(cat, rank, name.into(), now, None, args);
    }

    fn push(&self, cat: Cat, rank: i32, name: Name, ts: f64, dur: Option<f64>, args: Args) {
        let thread = THREAD.with(|t| *t);
        self.spans.lock().push(Span { cat, rank, thread, name, ts, dur, args });
    }

    /// The trace of what was recorded, for a job of `ranks` ranks.
    pub fn to_file(&self, ranks: i32) -> TraceFile {
        let mut spans = std::mem::take(&mut *self.spans.lock());
        spans.sort_by(|a, b| a.ts.total_cmp(&b.ts));
        let mut events = Vec::with_capacity(spans.len() + 4 * ranks.max(0) as usize);
        // Per (rank, track): the end of each lane's last span, or (calls) thread -> lane.
        let mut lanes: BTreeMap<(i32, Track), Vec<f64>> = BTreeMap::new();
        let mut call_lanes: HashMap<(i32, u32), i64> = HashMap::new();
        let mut used: BTreeMap<(i32, Track), i64> = BTreeMap::new();
        for r in 1..ranks {
            used.insert((r, Track::Kernels), 1);
        }
        for s in spans {
            let track = s.cat.track();
            let lane = match (track, s.dur) {
                (Track::Calls, _) => {
                    // A thread's first call takes the rank's next lane (`used` counts them).
                    let next = used.get(&(s.rank, Track::Calls)).copied().unwrap_or(0);
                    *call_lanes.entry((s.rank, s.thread)).or_insert(next)
                }
                (_, None) => 0,
                (_, Some(dur)) => {
                    let ends = lanes.entry((s.rank, track)).or_default();
                    let lane = match ends.iter().position(|&end| end <= s.ts) {
                        Some(l) => l,
                        None => {
                            ends.push(0.0);
                            ends.len() - 1
                        }
                    };
                    ends[lane] = s.ts + dur;
                    lane as i64
                }
            };
            let n = used.entry((s.rank, track)).or_default();
            *n = (*n).max(lane + 1);
            let args: Map<String, Value> = s.args.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            events.push(TraceEvent {
                name: s.name.as_str().to_string(),
                cat: Some(s.cat.as_str().to_string()),
                ph: if s.dur.is_some() { "X" } else { "i" }.into(),
                ts: Some(s.ts),
                dur: s.dur,
                pid: s.rank as i64,
                tid: Some(track.base() + lane),
                s: s.dur.is_none().then(|| "g".to_string()),
                args: (!args.is_empty()).then_some(Value::Object(args)),
            });
        }
        let meta = |name: &str, pid: i64, tid: Option<i64>, args: Value| TraceEvent {
            name: name.into(),
            cat: None,
            ph: "M".into(),
            ts: None,
            dur: None,
            pid,
            tid,
            s: None,
            args: Some(args),
        };
        let mut head = Vec::new();
        for r in 0..ranks.max(1) {
            let name = if r == 0 { "head (rank 0)".to_string() } else { format!("worker {r}") };
            head.push(meta("process_name", r as i64, None, json!({ "name": name })));
            head.push(meta("process_sort_index", r as i64, None, json!({ "sort_index": r })));
        }
        for (&(rank, track), &n) in &used {
            for lane in 0..n {
                let tid = track.base() + lane;
                head.push(meta("thread_name", rank as i64, Some(tid), json!({ "name": track.label(lane) })));
                head.push(meta("thread_sort_index", rank as i64, Some(tid), json!({ "sort_index": tid })));
            }
        }
        head.extend(events);
        TraceFile {
            trace_events: head,
            display_time_unit: Some("ms".into()),
            other_data: Some(json!({
                "producer": "ompcluster (OMPCLUSTER_TRACE)",
                "ranks": ranks,
                "clock": "microseconds since the plugin started on the head, as the run report's seconds",
                "kernels": "a target region from the head's EXECUTE to the worker's reply; args.kernel_us is the time in the kernel",
            })),
        }
    }

    /// Write the trace for `ranks` ranks to `path`, atomically (a temporary file in the same
    /// directory, then rename).
    pub fn write(&self, path: &Path, ranks: i32) -> std::io::Result<()> {
        let file = self.to_file(ranks);
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let tmp = tempfile::NamedTempFile::new_in(dir)?;
        let mut w = std::io::BufWriter::new(tmp);
        serde_json::to_writer(&mut w, &file)?;
        w.write_all(b"\n")?;
        let tmp = w.into_inner().map_err(|e| e.into_error())?;
        tmp.as_file().sync_all()?;
        tmp.persist(path).map_err(|e| e.error)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Summary;

    #[test]
    fn overlapping_spans_take_lanes_and_the_file_is_valid() {
        let r = Recorder::new(Instant::now());
        r.span_at(Cat::Kernel, 1, "a", 0.0, 10.0, vec![]);
        r.span_at(Cat::Kernel, 1, "b", 5.0, 10.0, vec![]);
        r.span_at(Cat::Kernel, 1, "c", 10.0, 1.0, vec![]);
        r.span_at(Cat::Submit, 2, "submit", 1.0, 1.0, vec![("bytes", json!(4096))]);
        r.instant(Cat::Failure, 0, "rank 2 failed", vec![("rank", json!(2))]);
        let f = r.to_file(3);
        f.check().unwrap();
        let tid = |name: &str| f.trace_events.iter().find(|e| e.name == name).unwrap().tid.unwrap();
        assert_eq!(tid("a"), 1000);
        assert_eq!(tid("b"), 1001);
        assert_eq!(tid("c"), 1000, "lane 0 is free again at 10");
        assert_eq!(f.name_of(1, Some(1001)), Some("kernels (2)"));
        assert_eq!(f.name_of(2, None), Some("worker 2"));
        assert_eq!(f.name_of(2, Some(1000)), Some("kernels"), "every worker has a kernels track");
        let s = Summary::of(&f);
        assert_eq!(s.counts.tasks_per_worker.get("1"), Some(&3));
        assert_eq!(s.counts.bytes_submitted, 4096);
        assert_eq!(s.failed_ranks, vec![2]);
    }

    #[test]
    fn written_file_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.json");
        let r = Recorder::new(Instant::now());
        let t = r.now();
        r.span(Cat::Call, 0, "data_submit", t, vec![("bytes", json!(8))]);
        r.write(&path, 2).unwrap();
        let f = TraceFile::read(&path).unwrap();
        assert_eq!(f.of(Cat::Call).count(), 1);
        assert_eq!(f.name_of(0, Some(100)), Some("offloading thread 1"));
        std::fs::write(&path, "{\"traceEvents\": [{\"name\": \"x\", \"ph\": \"X\", \"pid\": 0, \"tid\": 1}]}").unwrap();
        assert!(TraceFile::read(&path).is_err(), "a complete event without ts is refused");
    }
}
