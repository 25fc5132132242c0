//! The run's timeline. The head records what happened where ([`Recorder`]: its offloading
//! calls, each worker's kernels, transfers with their sizes, checkpoints, failures and
//! recoveries) and writes it at exit in the Chrome trace-event format (the JSON object form,
//! which Perfetto and chrome://tracing open). [`TraceFile`] reads such a file back,
//! [`Summary`] counts what it holds, and `plot` (feature `plot`) draws it as an SVG Gantt
//! chart (the `ompcluster-trace` command).
//!
//! Layout of the file: one process per rank (pid = rank; 0 is the head), and in each, one
//! thread per track: the head's offloading threads, "checkpoints and recovery"; a worker's
//! kernels and its transfers. Spans that overlap on one track (regions running at the same
//! time on one worker) are spread over lanes, each its own thread, so that every track holds
//! properly nested (here: disjoint) complete events, as the format requires.

pub mod record;
#[cfg(feature = "plot")]
pub mod plot;

pub use record::{Args, Recorder};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use thiserror::Error;

/// What a span or instant is: its `cat` in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Cat {
    /// A libomptarget call into the plugin on the head (`__tgt_rtl_*`).
    Call,
    /// A target region on a worker, from the head's EXECUTE to the worker's reply.
    Kernel,
    /// A lost task run again by recovery.
    Rerun,
    /// Bytes from the head to a worker.
    Submit,
    /// Bytes from a worker to the head.
    Retrieve,
    /// Bytes from worker to worker (the span is on the receiver's track).
    Exchange,
    /// A checkpoint's pause of offloading.
    Checkpoint,
    /// A checkpoint's saves and flush, in the background after its pause.
    CheckpointFlush,
    /// A recovery (offloading held).
    Recovery,
    /// A rank's failure, as the head learnt of it (an instant).
    Failure,
}

impl Cat {
    /// Every category, in legend order.
    pub const ALL: [Cat; 10] = [
        Cat::Call,
        Cat::Kernel,
        Cat::Rerun,
        Cat::Submit,
        Cat::Retrieve,
        Cat::Exchange,
        Cat::Checkpoint,
        Cat::CheckpointFlush,
        Cat::Recovery,
        Cat::Failure,
    ];

    /// Its name in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            Cat::Call => "call",
            Cat::Kernel => "kernel",
            Cat::Rerun => "rerun",
            Cat::Submit => "submit",
            Cat::Retrieve => "retrieve",
            Cat::Exchange => "exchange",
            Cat::Checkpoint => "checkpoint",
            Cat::CheckpointFlush => "checkpoint_flush",
            Cat::Recovery => "recovery",
            Cat::Failure => "failure",
        }
    }

    /// The category named `s` in a file.
    pub fn parse(s: &str) -> Option<Cat> {
        Cat::ALL.into_iter().find(|c| c.as_str() == s)
    }

    /// The track a span of this category goes to, within its rank.
    fn track(self) -> Track {
        match self {
            Cat::Call => Track::Calls,
            Cat::Kernel | Cat::Rerun => Track::Kernels,
            Cat::Submit | Cat::Retrieve | Cat::Exchange => Track::Transfers,
            Cat::Checkpoint | Cat::CheckpointFlush | Cat::Recovery | Cat::Failure => Track::FaultTolerance,
        }
    }
}

/// A track of a rank; its lanes are threads numbered from its base.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Track {
    FaultTolerance,
    Calls,
    Kernels,
    Transfers,
}

impl Track {
    /// The thread id of lane 0 (lanes of one track are consecutive).
    fn base(self) -> i64 {
        match self {
            Track::FaultTolerance => 1,
            Track::Calls => 100,
            Track::Kernels => 1000,
            Track::Transfers => 100_000,
        }
    }

    fn label(self, lane: i64) -> String {
        let name = match self {
            Track::FaultTolerance => "checkpoints and recovery",
            Track::Calls => return format!("offloading thread {}", lane + 1),
            Track::Kernels => "kernels",
            Track::Transfers => "transfers",
        };
        if lane == 0 {
            name.to_string()
        } else {
            format!("{name} ({})", lane + 1)
        }
    }
}

/// A trace file: the Chrome trace-event format's JSON object form.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TraceFile {
    /// The events.
    #[serde(rename = "traceEvents")]
    pub trace_events: Vec<TraceEvent>,
    /// How viewers show times ("ms").
    #[serde(rename = "displayTimeUnit", default, skip_serializing_if = "Option::is_none")]
    pub display_time_unit: Option<String>,
    /// Anything else: here, the run's ranks and where times start.
    #[serde(rename = "otherData", default, skip_serializing_if = "Option::is_none")]
    pub other_data: Option<Value>,
}

/// One event of the format (the fields this runtime writes; others are kept out).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TraceEvent {
    /// What it is (a kernel's name, "submit", ...); for metadata, which metadata.
    pub name: String,
    /// Its category ([`Cat::as_str`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cat: Option<String>,
    /// Phase: "X" complete event, "i" instant, "M" metadata.
    pub ph: String,
    /// Start, microseconds since the plugin started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ts: Option<f64>,
    /// Duration of a complete event, microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dur: Option<f64>,
    /// Process: the rank.
    pub pid: i64,
    /// Thread: the track and lane within the rank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tid: Option<i64>,
    /// An instant's scope ("g": the whole timeline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s: Option<String>,
    /// Details (bytes, task, ...); metadata's value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Value>,
}

/// A trace file that cannot be read.
#[derive(Debug, Error)]
pub enum ReadError {
    /// The file could not be opened or read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// It is not a trace in the Chrome trace-event format.
    #[error("{path} is not a trace in the Chrome trace-event format: {why}")]
    Format {
        /// The file.
        path: String,
        /// What is wrong.
        why: String,
    },
}

impl TraceFile {
    /// Read and check a trace file: JSON of the object form, every event with a known phase,
    /// complete events with a start and a non-negative duration, instants with a start.
    pub fn read(path: &Path) -> Result<TraceFile, ReadError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ReadError::Io { path: shown.clone(), source })?;
        let file: TraceFile =
            serde_json::from_str(&text).map_err(|e| ReadError::Format { path: shown.clone(), why: e.to_string() })?;
        file.check().map_err(|why| ReadError::Format { path: shown, why })?;
        Ok(file)
    }

    /// What is wrong with the events, if anything.
    pub fn check(&self) -> Result<(), String> {
        for (i, e) in self.trace_events.iter().enumerate() {
            let bad = |why: &str| Err(format!("event {i} ({:?}, ph {:?}): {why}", e.name, e.ph));
            match e.ph.as_str() {
                "X" => match (e.ts, e.dur) {
                    (Some(ts), Some(dur)) if ts.is_finite() && dur.is_finite() && ts >= 0.0 && dur >= 0.0 => {}
                    _ => return bad("a complete event needs ts >= 0 and dur >= 0"),
                },
                "i" | "I" => {
                    if !e.ts.is_some_and(|t| t.is_finite() && t >= 0.0) {
                        return bad("an instant needs ts >= 0");
                    }
                }
                "M" => {
                    if e.args.as_ref().and_then(|a| a.get("name").or_else(|| a.get("sort_index"))).is_none() {
                        return bad("metadata needs args.name or args.sort_index");
                    }
                }
                _ => return bad("unknown phase"),
            }
            if e.ph != "M" && e.tid.is_none() {
                return bad("no tid");
            }
        }
        Ok(())
    }

    /// The spans and instants (not metadata) of category `cat`.
    pub fn of(&self, cat: Cat) -> impl Iterator<Item = &TraceEvent> {
        self.trace_events.iter().filter(move |e| e.ph != "M" && e.cat.as_deref() == Some(cat.as_str()))
    }

    /// The name metadata gives (pid, tid): a thread's name, or with `tid` None a process's.
    pub fn name_of(&self, pid: i64, tid: Option<i64>) -> Option<&str> {
        let which = if tid.is_some() { "thread_name" } else { "process_name" };
        self.trace_events
            .iter()
            .find(|e| e.ph == "M" && e.name == which && e.pid == pid && (tid.is_none() || e.tid == tid))
            .and_then(|e| e.args.as_ref()?.get("name")?.as_str())
    }
}

/// What a trace holds, in the run report's terms (`ompcluster-trace summary`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    /// What ran where and what moved: the run report's own counts (`run_report::Counts`),
    /// here counted from the spans (a kernel span per region, a rerun span per task re-run,
    /// the bytes of transfers).
    #[serde(flatten)]
    pub counts: run_report::Counts,
    /// Checkpoint pauses.
    pub checkpoints: u64,
    /// Ranks whose failure the head learnt of, in order.
    pub failed_ranks: Vec<i64>,
    /// Recoveries.
    pub recoveries: u64,
    /// Offloading calls of libomptarget, by name.
    pub calls: BTreeMap<String, u64>,
    /// From the first event's start to the last one's end, seconds.
    pub span_seconds: f64,
}

impl Summary {
    /// Count what `t` holds.
    pub fn of(t: &TraceFile) -> Summary {
        let bytes = |cat: Cat| -> u64 { t.of(cat).filter_map(|e| e.args.as_ref()?.get("bytes")?.as_u64()).sum() };
        let mut s = Summary {
            counts: run_report::Counts {
                tasks_per_worker: BTreeMap::new(),
                tasks_reexecuted: t.of(Cat::Rerun).count() as u64,
                bytes_submitted: bytes(Cat::Submit),
                bytes_retrieved: bytes(Cat::Retrieve),
                bytes_exchanged: bytes(Cat::Exchange),
            },
            checkpoints: t.of(Cat::Checkpoint).count() as u64,
            failed_ranks: t.of(Cat::Failure).filter_map(|e| e.args.as_ref()?.get("rank")?.as_i64()).collect(),
            recoveries: t.of(Cat::Recovery).count() as u64,
            ..Summary::default()
        };
        for e in t.of(Cat::Kernel) {
            *s.counts.tasks_per_worker.entry(e.pid.to_string()).or_default() += 1;
        }
        for e in t.of(Cat::Call) {
            *s.calls.entry(e.name.clone()).or_default() += 1;
        }
        let timed = t.trace_events.iter().filter(|e| e.ph != "M").filter_map(|e| Some((e.ts?, e.ts? + e.dur.unwrap_or(0.0))));
        let (lo, hi) = timed.fold((f64::INFINITY, 0f64), |(lo, hi), (a, b)| (lo.min(a), hi.max(b)));
        s.span_seconds = if lo.is_finite() { (hi - lo) / 1e6 } else { 0.0 };
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn categories_round_trip() {
        for c in Cat::ALL {
            assert_eq!(Cat::parse(c.as_str()), Some(c));
        }
        assert_eq!(Cat::parse("nonsense"), None);
    }

    #[test]
    fn check_refuses_what_viewers_cannot_show() {
        let ev = |ph: &str, ts: Option<f64>, dur: Option<f64>| TraceEvent {
            name: "x".into(),
            cat: None,
            ph: ph.into(),
            ts,
            dur,
            pid: 0,
            tid: Some(1),
            s: None,
            args: None,
        };
        let file = |e: TraceEvent| TraceFile { trace_events: vec![e], display_time_unit: None, other_data: None };
        assert!(file(ev("X", Some(1.0), Some(2.0))).check().is_ok());
        assert!(file(ev("X", Some(1.0), None)).check().is_err());
        assert!(file(ev("X", Some(1.0), Some(-1.0))).check().is_err());
        assert!(file(ev("i", None, None)).check().is_err());
        assert!(file(ev("B", Some(1.0), None)).check().is_err());
        assert!(file(ev("M", None, None)).check().is_err());
    }
}
